"""DeePMD-kit's model file out and in: the ``.dp`` (HDF5) and ``.yaml`` files of ``deepmd.dpmodel``.

DeePMD-kit 3.x keeps a backend-independent model file: the dict its models' ``serialize()`` build
(``deepmd/dpmodel/utils/serialization.py``, ``save_dp_model`` / ``load_dp_model``). From it
``dp convert-backend model.dp model.pb`` makes a TensorFlow graph (what ``pair_style deepmd`` in LAMMPS
loads), ``.pth`` (PyTorch) or ``.savedmodel`` (JAX), and ``dp test -m model.dp`` runs DeePMD-kit's NumPy
reference implementation. The file holds:

- ``model``: the atomic model (``@class`` "Model", ``type`` "standard"): ``type_map``, the energy bias in
  ``@variables/out_bias`` (1, ntypes, 1) eV (``out_std`` is not used for energies), the descriptor
  (``type`` "se_e2_a": its hyper-parameters under DeePMD-kit's names, ``@variables/davg``, ``dstd``
  (ntypes, nnei, 4), and ``embeddings``, a ``NetworkCollection`` of ``EmbeddingNetwork``s: one per
  neighbour type with ``type_one_side`` (ndim 1), else one per (centre, neighbour) type pair at index
  centre + neighbour·ntypes (ndim 2)) and the fitting (``type`` "ener": a ``FittingNetwork`` per centre
  type, ``@variables/bias_atom_e`` (ntypes, 1) eV, also added to the atomic energies).
  Each layer's ``@variables`` are ``w`` (in, out), ``b`` (out,) or null and ``idt`` (out,) or null.
- DPA-1 (``type`` "dpa1" for se_atten, "se_atten_v2"): ``sel`` one number (in a list), davg/dstd
  (ntypes, sel, 4), ``type_embedding`` (a ``TypeEmbedNet``: one linear layer on the one-hot types),
  ``embeddings`` (one net, ndim 0) and with "strip" ``embeddings_strip`` (the type net), ``attention_layers``
  (a ``NeighborGatedAttention``: per layer ``in_proj``, ``out_proj`` and a ``LayerNorm``); the fitting is one
  net (``mixed_types``, ndim 0) whose ``dim_descrpt`` counts the type embedding the descriptor appends.
- ``model_def_script``: the ``model`` section of a DeePMD-kit input that builds this model (the
  TensorFlow backend stores it in the graph).
- ``software``, ``version``, ``time``: who wrote the file, when.

In ``.dp`` every array is an HDF5 dataset ``variable_NNNN`` and the dict, with each array replaced by its
dataset's name, is the JSON attribute ``json`` of the root group. In ``.yaml`` each array is a mapping
``{"@class": "np.ndarray", "@is_variable": true, "@version": 1, "dtype": ..., "value": nested lists}``.

Our model maps one to one: embedding net k is ``params["descriptor"]["embed_{k}"]`` (the same index),
fitting net t ``params["fitting"]["fit_{t}"]``, their layers ``layer_{l}`` with ``matrix``/``bias``/``idt``
for DeePMD-kit's ``w``/``b``/``idt``; DPA-1's ``type_embedding``, ``embedding``, ``embedding_strip`` and
``attention_{l}`` (``in_proj``, ``out_proj``, ``layer_norm`` ``scale``/``offset`` for ``w``/``b``, ones and
zeros written without ``trainable_ln``) as :mod:`jaxmd_dp.model.se_atten` names them. davg/dstd are
:class:`~jaxmd_dp.model.energy.Stats`' and its energy bias is ``out_bias`` (``bias_atom_e`` written as zeros;
read back as the sum of both). Both descriptors are written by one path (:func:`to_deepmd_dict`: the
descriptor's dict by its type, the fitting and the model around it shared), and the files we write are the
dicts DeePMD-kit writes for the same weights but ``out_std`` (ones).
"""

from __future__ import annotations

import datetime
import json
import os
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from jaxmd_dp.errors import InputError
from jaxmd_dp.model.energy import ModelHyper, Stats, param_shapes
from jaxmd_dp.runtime.file_modes import give_usual_mode
from jaxmd_dp.version import __version__

__all__ = ["FILE_SUFFIXES", "load_deepmd", "read_deepmd_file", "save_deepmd", "to_deepmd_dict", "write_deepmd_file"]

#: Suffixes of DeePMD-kit's model file this module writes and reads (HDF5, YAML).
FILE_SUFFIXES = (".dp", ".yaml", ".yml")
#: DeePMD-kit's other model files: ``dp convert-backend`` turns them into a ``.dp`` first.
CONVERT_FIRST = (".pb", ".pth", ".pt", ".savedmodel", ".pt2", ".pte", ".hlo")

# The newest layout of each DeePMD-kit class this reader knows (its serialize()'s ``@version``).
_VERSIONS = {
    "Model": 2,
    "Descriptor": 3,
    "Fitting": 4,
    "NetworkCollection": 1,
    "EmbeddingNetwork": 2,
    "FittingNetwork": 1,
    "Layer": 2,
}


# ---------------------------------------------------------------------------------------------------------
# Adapters: the only places that know how our hyper-parameters and weight tree are laid out.


def _hyper_fields(hyper: ModelHyper) -> dict:
    """The flat hyper-parameter dict of our model files: ``type_map``, ``descriptor`` (type name), ``sel``,
    ``rcut``, ``rcut_smth``, ``neuron``, ``axis_neuron``, ``type_one_side``, ``resnet_dt``, ``activation``,
    ``precision``, ``fit_neuron``, ``fit_resnet_dt``, ``fit_activation``, ``fit_precision``."""
    return hyper.to_dict()


def _hyper_from_section(section: dict) -> ModelHyper:
    """Our hyper-parameters from a DeePMD-kit ``model`` section (validated as a config's)."""
    return ModelHyper.from_deepmd(section)


def _embedding_net(params, k: int) -> dict:
    """Embedding net k's layers: ``{"layer_0": {"matrix", "bias"[, "idt"]}, ...}``."""
    return params["descriptor"][f"embed_{k}"]


def _fitting_net(params, t: int) -> dict:
    """Type t's fitting net's layers (the last one linear)."""
    return params["fitting"][f"fit_{t}"]


def _params_tree(embedding_nets: list[list[dict]], fitting_nets: list[list[dict]]) -> dict:
    """The weight tree from each net's list of layers (``{"matrix", "bias"[, "idt"]}`` each)."""

    def net(layers):
        return {f"layer_{i}": layer for i, layer in enumerate(layers)}

    return {
        "descriptor": {f"embed_{k}": net(n) for k, n in enumerate(embedding_nets)},
        "fitting": {f"fit_{t}": net(n) for t, n in enumerate(fitting_nets)},
    }


def _layers(net: dict) -> list[dict]:
    return [net[f"layer_{i}"] for i in range(len(net))]


# ---------------------------------------------------------------------------------------------------------
# Out: our model → DeePMD-kit's dict


def _array(x, dtype=None) -> np.ndarray:
    return np.array(x, dtype=dtype, copy=True)


def _layer(layer: dict, activation: str, resnet: bool, precision: str) -> dict:
    """DeePMD-kit's ``Layer`` of one of ours ({"matrix"[, "bias"][, "idt"]})."""
    idt, bias = layer.get("idt"), layer.get("bias")
    return {
        "@class": "Layer",
        "@version": 2,
        "bias": bias is not None,
        "use_timestep": idt is not None,
        "activation_function": activation,
        "resnet": resnet,
        "precision": precision,
        "trainable": True,
        "@variables": {
            "w": _array(layer["matrix"]),
            "b": None if bias is None else _array(bias),
            "idt": None if idt is None else _array(idt),
        },
    }


def _collection(ndim: int, ntypes: int, network_type: str, networks: list[dict]) -> dict:
    return {
        "@class": "NetworkCollection",
        "@version": 1,
        "ndim": ndim,
        "ntypes": ntypes,
        "network_type": network_type,
        "networks": networks,
    }


def _embedding_network(
    net: dict, in_dim: int, neuron, activation: str, resnet_dt: bool, precision: str, bias: bool = True
) -> dict:
    """DeePMD-kit's ``EmbeddingNetwork`` of one of our nets (``layer_{l}``; every layer with DeePMD-kit's skip)."""
    return {
        "@class": "EmbeddingNetwork",
        "@version": 2,
        "in_dim": in_dim,
        "neuron": list(neuron),
        "activation_function": activation,
        "resnet_dt": resnet_dt,
        "bias": bias,
        "precision": precision,
        "layers": [_layer(layer, activation, True, precision) for layer in _layers(net)],
    }


def _fitting_network(net: dict, in_dim: int, fitting) -> dict:
    """DeePMD-kit's ``FittingNetwork`` of one of our fitting nets (hidden layers with skips, a linear last)."""
    layers, act, prec = _layers(net), fitting.activation, fitting.precision
    return {
        "@class": "FittingNetwork",
        "@version": 1,
        "in_dim": in_dim,
        "out_dim": 1,
        "neuron": list(fitting.neuron),
        "activation_function": act,
        "resnet_dt": fitting.resnet_dt,
        "precision": prec,
        "bias_out": True,
        "layers": [_layer(layer, act, True, prec) for layer in layers[:-1]] + [_layer(layers[-1], "none", False, prec)],
    }


def _env_mat(d) -> dict:
    return {"rcut": d.rcut, "rcut_smth": d.rcut_smth, "protection": 0.0, "use_exp_switch": False}


def _se_e2_a_descriptor(hyper: ModelHyper, params, davg: np.ndarray, dstd: np.ndarray) -> dict:
    """``DescrptSeA.serialize()``: one embedding net per neighbour type (type_one_side) or type pair."""
    d, ntypes = hyper.descriptor, hyper.ntypes
    nnets = ntypes if d.type_one_side else ntypes * ntypes
    embeddings = [
        _embedding_network(_embedding_net(params, k), 1, d.neuron, d.activation, d.resnet_dt, d.precision)
        for k in range(nnets)
    ]
    return {
        "@class": "Descriptor",
        "type": "se_e2_a",
        "@version": 2,
        "rcut": d.rcut,
        "rcut_smth": d.rcut_smth,
        "sel": list(d.sel),
        "neuron": list(d.neuron),
        "axis_neuron": d.axis_neuron,
        "resnet_dt": d.resnet_dt,
        "trainable": True,
        "type_one_side": d.type_one_side,
        "exclude_types": [],
        "env_protection": 0.0,
        "set_davg_zero": False,
        "activation_function": d.activation,
        "precision": d.precision,
        "spin": None,
        "env_mat": _env_mat(d),
        "embeddings": _collection(1 if d.type_one_side else 2, ntypes, "embedding_network", embeddings),
        "@variables": {"davg": davg, "dstd": dstd},
        "type_map": list(hyper.type_map),
    }


def _type_embedding(hyper: ModelHyper, tree: dict) -> dict:
    """``TypeEmbedNet.serialize()`` as DPA-1 builds it: one linear layer on the one-hot types, padded."""
    d, prec = hyper.descriptor, hyper.descriptor.precision
    net = _embedding_network(tree, hyper.ntypes, [d.tebd_dim], "Linear", False, prec, d.use_tebd_bias)
    return {
        "@class": "TypeEmbedNet",
        "@version": 2,
        "ntypes": hyper.ntypes,
        "neuron": [d.tebd_dim],
        "resnet_dt": False,
        "precision": prec,
        "activation_function": "Linear",
        "trainable": True,
        "padding": True,
        "use_econf_tebd": False,
        "use_tebd_bias": d.use_tebd_bias,
        "type_map": list(hyper.type_map),
        "embedding": net,
    }


def _attention(d, tree: dict) -> dict:
    """``NeighborGatedAttention.serialize()``: ``attn_layer`` gated attention layers (one head, no mask)."""
    prec, width = d.precision, d.neuron[-1]
    common = {
        "dotr": d.attn_dotr,
        "do_mask": False,
        "scaling_factor": d.scaling_factor,
        "normalize": d.normalize,
        "temperature": d.temperature,
    }
    ln = {"trainable_ln": d.trainable_ln, "ln_eps": d.ln_eps, "precision": prec}

    def layer(i: int) -> dict:
        ours = tree[f"attention_{i}"]
        norm = ours.get("layer_norm") or {"scale": np.ones(width, prec), "offset": np.zeros(width, prec)}
        return {
            "nnei": d.sel,
            "embed_dim": width,
            "hidden_dim": d.attn,
            **common,
            **ln,
            "attention_layer": {
                "nnei": d.sel,
                "embed_dim": width,
                "hidden_dim": d.attn,
                "num_heads": 1,
                **common,
                "bias": True,
                "smooth": d.smooth_type_embedding,
                "precision": prec,
                "in_proj": _layer(ours["in_proj"], "none", False, prec),
                "out_proj": _layer(ours["out_proj"], "none", False, prec),
            },
            "attn_layer_norm": {
                "@class": "LayerNorm",
                "@version": 1,
                "eps": d.ln_eps,
                "trainable": d.trainable_ln,
                "precision": prec,
                "@variables": {"w": _array(norm["scale"]), "b": _array(norm["offset"])},
            },
        }

    return {
        "@class": "NeighborGatedAttention",
        "@version": 1,
        "layer_num": d.attn_layer,
        "nnei": d.sel,
        "embed_dim": width,
        "hidden_dim": d.attn,
        **common,
        **ln,
        "attention_layers": [layer(i) for i in range(d.attn_layer)],
    }


def _dpa1_descriptor(hyper: ModelHyper, params, davg: np.ndarray, dstd: np.ndarray) -> dict:
    """``DescrptDPA1.serialize()`` (type "dpa1", se_atten's serialised name) or ``DescrptSeAttenV2.serialize()``
    (type "se_atten_v2": no tebd_input_mode / smooth_type_embedding keys, the strip net after the embedding
    net). ``set_davg_zero`` is written as davg being all zero (the statistics it gave)."""
    d, ntypes, tree = hyper.descriptor, hyper.ntypes, params["descriptor"]
    v2, strip = d.type_name == "se_atten_v2", d.tebd_input_mode == "strip"
    sides = 1 if d.type_one_side else 2

    def embeddings(name: str, in_dim: int) -> dict:
        net = _embedding_network(tree[name], in_dim, d.neuron, d.activation, d.resnet_dt, d.precision)
        return _collection(0, ntypes, "embedding_network", [net])

    nets = {"embeddings": embeddings("embedding", 1 if strip else 1 + sides * d.tebd_dim)}
    if strip:
        nets["embeddings_strip"] = embeddings("embedding_strip", sides * d.tebd_dim)
    mode = {} if v2 else {"tebd_input_mode": d.tebd_input_mode}
    smooth = {} if v2 else {"smooth_type_embedding": d.smooth_type_embedding}
    data = {
        "@class": "Descriptor",
        "type": "se_atten_v2" if v2 else "dpa1",
        "@version": 2,
        "rcut": d.rcut,
        "rcut_smth": d.rcut_smth,
        "sel": [d.sel],
        "ntypes": ntypes,
        "neuron": list(d.neuron),
        "axis_neuron": d.axis_neuron,
        "tebd_dim": d.tebd_dim,
        **mode,
        "set_davg_zero": not np.any(davg),
        "attn": d.attn,
        "attn_layer": d.attn_layer,
        "attn_dotr": d.attn_dotr,
        "attn_mask": False,
        "activation_function": d.activation,
        "resnet_dt": d.resnet_dt,
        "scaling_factor": d.scaling_factor,
        "normalize": d.normalize,
        "temperature": d.temperature,
        "trainable_ln": d.trainable_ln,
        "ln_eps": d.ln_eps,
        **smooth,
        "type_one_side": d.type_one_side,
        "concat_output_tebd": d.concat_output_tebd,
        "use_econf_tebd": False,
        "use_tebd_bias": d.use_tebd_bias,
        "type_map": list(hyper.type_map),
        "precision": d.precision,
        "embeddings": nets["embeddings"],
        **({"embeddings_strip": nets["embeddings_strip"]} if v2 else {}),
        "attention_layers": _attention(d, tree),
        "env_mat": _env_mat(d),
        "type_embedding": _type_embedding(hyper, tree["type_embedding"]),
        "exclude_types": [list(p) for p in d.exclude_types],
        "env_protection": 0.0,
        "@variables": {"davg": davg, "dstd": dstd},
        "trainable": True,
        "spin": None,
    }
    if strip and not v2:
        data["embeddings_strip"] = nets["embeddings_strip"]
    return data


#: DeePMD-kit's descriptor dict of each of our descriptors, by type name.
_DESCRIPTOR_WRITERS = {"se_e2_a": _se_e2_a_descriptor, "se_atten": _dpa1_descriptor, "se_atten_v2": _dpa1_descriptor}


def _fitting(hyper: ModelHyper, params) -> dict:
    """``EnergyFittingNet.serialize()``: a net per centre type (ndim 1), or with a descriptor of mixed types
    one net for all (``mixed_types``, ndim 0; the type reaches it through the descriptor, e.g. DPA-1's
    appended type embedding, so ``dim_descrpt`` counts it). ``bias_atom_e`` is zero (the bias is the model's)."""
    f, ntypes, mixed = hyper.fitting, hyper.ntypes, hyper.descriptor.mixed_types
    dim = hyper.dim_descriptor
    nets = [_fitting_network(_fitting_net(params, t), dim, f) for t in range(1 if mixed else ntypes)]
    return {
        "@class": "Fitting",
        "@version": 4,
        "var_name": "energy",
        "ntypes": ntypes,
        "dim_descrpt": dim,
        "neuron": list(f.neuron),
        "resnet_dt": f.resnet_dt,
        "numb_fparam": 0,
        "numb_aparam": 0,
        "dim_case_embd": 0,
        "default_fparam": None,
        "rcond": None,
        "activation_function": f.activation,
        "precision": f.precision,
        "mixed_types": mixed,
        "exclude_types": [],
        "nets": _collection(0 if mixed else 1, ntypes, "fitting_network", nets),
        "@variables": {
            "bias_atom_e": np.zeros((ntypes, 1)),
            "case_embd": None,
            "fparam_avg": None,
            "fparam_inv_std": None,
            "aparam_avg": None,
            "aparam_inv_std": None,
        },
        "type_map": list(hyper.type_map),
        "tot_ener_zero": False,
        "trainable": [True] * (len(f.neuron) + 1),
        "layer_name": None,
        "use_aparam_as_mask": False,
        "spin": None,
        "type": "ener",
        "dim_out": 1,
        "atom_ener": [],
    }


def _input_section(model: dict) -> dict:
    """The DeePMD-kit input ``model`` section that builds the model of this dict (``model_def_script``)."""
    return _dpa1_section(model) if model["descriptor"]["type"] in _DPA1 else _section(model)


def to_deepmd_dict(hyper: ModelHyper, params, stats: Stats) -> dict:
    """DeePMD-kit's model-file dict of our energy model (arrays as numpy arrays): ``model`` as
    ``deepmd.dpmodel``'s standard energy model serialises itself (se_e2_a, se_atten as "dpa1", se_atten_v2),
    with ``model_def_script`` and the writer's ``software``/``version``/``time``. Weights keep their dtype;
    davg/dstd and the biases are float64. Raises InputError for a model DeePMD-kit's file cannot hold
    (bfloat16 weights)."""
    kind = hyper.descriptor.type_name
    if kind not in _DESCRIPTOR_WRITERS:
        raise InputError(f"descriptor {kind}: not written as a DeePMD-kit model file")
    for key, value in (("precision", hyper.descriptor.precision), ("fit_precision", hyper.fitting.precision)):
        if value not in ("float64", "float32"):
            raise InputError(f"{key} {value}: DeePMD-kit's model file holds float64 or float32 weights only")
    ntypes = hyper.ntypes
    davg, dstd, bias = (_array(s, np.float64) for s in stats)
    model = {
        "type_map": list(hyper.type_map),
        "atom_exclude_types": [],
        "pair_exclude_types": [],
        "rcond": None,
        "preset_out_bias": None,
        "@variables": {"out_bias": bias.reshape(1, ntypes, 1), "out_std": np.ones((1, ntypes, 1))},
        "@class": "Model",
        "type": "standard",
        "@version": 2,
        "descriptor": _DESCRIPTOR_WRITERS[kind](hyper, params, davg, dstd),
        "fitting": _fitting(hyper, params),
    }
    return {
        "software": "jaxmd_dp",
        "version": __version__,
        "time": str(datetime.datetime.now(tz=datetime.UTC)),
        "backend": "jaxmd_dp",
        "model": model,
        "model_def_script": _input_section(model),
        "@variables": {},
    }


# ---------------------------------------------------------------------------------------------------------
# The file: .dp (HDF5) or .yaml


def _map_variables(obj: Any, fn: Callable[[Any], Any], in_variables: bool = False) -> Any:
    """A copy of the dict with ``fn`` applied to every variable: each leaf under an ``@variables`` key and
    each mapping marked ``@is_variable`` (DeePMD-kit's ``traverse_model_dict``); None stays None."""
    if isinstance(obj, dict):
        if obj.get("@is_variable", False):
            return fn(obj)
        return {k: _map_variables(v, fn, in_variables or k == "@variables") for k, v in obj.items()}
    if isinstance(obj, list):
        return [_map_variables(v, fn, in_variables) for v in obj]
    if obj is None or not in_variables:
        return obj
    return fn(obj)


def _suffix(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix in CONVERT_FIRST:
        raise InputError(
            f"{path}: a DeePMD-kit {suffix} model; convert it to a .dp model file first: "
            f"dp convert-backend {path.name} {path.stem}.dp"
        )
    if suffix not in FILE_SUFFIXES:
        raise InputError(f"{path}: DeePMD-kit's model file is .dp (HDF5) or .yaml, not {suffix or 'no suffix'!r}")
    return suffix


def _h5py(path: Path):
    try:
        import h5py
    except ImportError:
        raise InputError(
            f"{path}: DeePMD-kit's .dp model file needs h5py (pip install h5py, or the "
            "'deepmd' extra: pip install 'jaxmd_dp[deepmd]'); .yaml needs nothing more"
        ) from None
    return h5py


def _write_hdf5(tmp: str, data: dict, h5py) -> None:
    with h5py.File(tmp, "w") as f:
        count = iter(range(1 << 62))

        def store(x):
            return f.create_dataset(f"variable_{next(count):04d}", data=np.asarray(x)).name

        f.attrs["json"] = json.dumps(_map_variables(data, store), separators=(",", ":"))


def _write_yaml(tmp: str, data: dict) -> None:
    import yaml

    def tagged(x):
        if not isinstance(x, np.ndarray):
            return x
        return {"@class": "np.ndarray", "@is_variable": True, "@version": 1, "dtype": x.dtype.name, "value": x.tolist()}

    with open(tmp, "w") as f:
        yaml.safe_dump(_map_variables(data, tagged), f)


def write_deepmd_file(path: str | os.PathLike, data: dict) -> Path:
    """Write a DeePMD-kit model-file dict (``deepmd.dpmodel``'s ``save_dp_model`` layout) atomically: ``.dp``
    (HDF5, needs h5py) or ``.yaml``/``.yml`` by the suffix; a temporary file beside ``path`` renamed into
    place, so a failed write leaves no file. Returns the path."""
    path = Path(path)
    suffix = _suffix(path)
    h5py = _h5py(path) if suffix == ".dp" else None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        os.close(fd)
        try:
            if h5py is not None:
                _write_hdf5(tmp, data, h5py)
            else:
                _write_yaml(tmp, data)
            give_usual_mode(tmp)  # mkstemp's file is private (0600)
            os.replace(tmp, path)
        finally:
            Path(tmp).unlink(missing_ok=True)
    except OSError as e:
        raise InputError(f"{path}: cannot write the model ({e.strerror or e})") from None
    return path


def save_deepmd(path: str | os.PathLike, hyper: ModelHyper, params, stats: Stats) -> Path:
    """Write DeePMD-kit's model file of the model (:func:`to_deepmd_dict`): ``.dp`` (HDF5, needs h5py) or
    ``.yaml``/``.yml`` by the suffix, atomically (:func:`write_deepmd_file`). Returns the path."""
    path = Path(path)
    if path.suffix.lower() in CONVERT_FIRST:
        raise InputError(_convert_route(path, hyper))
    if _suffix(path) == ".dp":
        _h5py(path)  # refused before anything is computed
    return write_deepmd_file(path, to_deepmd_dict(hyper, params, stats))


def _convert_route(path: Path, hyper: ModelHyper) -> str:
    """One line for a request to write another DeePMD-kit format (.pb, .pth, ...): the route through the .dp
    file, or for a .pb of DPA-1 with smoothing (DeePMD-kit's TensorFlow backend does not deserialise
    se_atten_v2, nor se_atten with smooth_type_embedding) the formats that hold it."""
    d, dp = hyper.descriptor, f"{path.stem}.dp"
    if path.suffix.lower() == ".pb" and getattr(d, "smooth_type_embedding", False):
        return (
            f"{path}: DeePMD-kit's TensorFlow backend cannot hold {d.type_name} (a smooth type embedding); "
            f"write DeePMD-kit's model file {dp} instead (freeze -o {dp}), which DeePMD-kit runs as it is "
            f"(dp test -m {dp}) or converts for PyTorch and LAMMPS: dp convert-backend {dp} {path.stem}.pth"
        )
    return (
        f"{path}: jaxmd_dp writes DeePMD-kit's .dp or .yaml model file; write {dp} (freeze -o {dp}), "
        f"then dp convert-backend {dp} {path.name}"
    )


def read_deepmd_file(path: str | os.PathLike) -> dict:
    """The dict of DeePMD-kit's ``.dp`` or ``.yaml`` model file, arrays as numpy arrays
    (``deepmd.dpmodel.utils.serialization.load_dp_model``'s result)."""
    path = Path(path)
    suffix = _suffix(path)
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    if suffix == ".dp":
        h5py = _h5py(path)
        try:
            with h5py.File(path, "r") as f:
                if "json" not in f.attrs:
                    raise InputError(f"{path}: an HDF5 file without DeePMD-kit's 'json' attribute (not a .dp model)")
                data = json.loads(f.attrs["json"])
                return _map_variables(data, lambda name: np.array(f[name][()]))
        except OSError as e:
            raise InputError(f"{path}: not a readable HDF5 file ({e})") from None
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise InputError(f"{path}: a broken DeePMD-kit .dp model ({type(e).__name__}: {e})") from None
    import yaml

    def array(x):
        if isinstance(x, dict) and x.get("@class") == "np.ndarray":
            return np.asarray(x["value"], dtype=np.dtype(x["dtype"]))
        return x

    try:
        with open(path) as f:
            data = yaml.safe_load(f)
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or e})") from None
    except yaml.YAMLError as e:
        raise InputError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: not a DeePMD-kit model file (no mapping at the top)")
    try:
        return _map_variables(data, array)
    except (KeyError, TypeError, ValueError) as e:
        raise InputError(f"{path}: a broken array in the model file ({type(e).__name__}: {e})") from None


# ---------------------------------------------------------------------------------------------------------
# In: DeePMD-kit's dict → our model


class _Refused(Exception):
    """Why a DeePMD-kit model cannot be read (one line)."""


def _check_version(d: dict, where: str) -> None:
    cls, version = d.get("@class"), d.get("@version", 1)
    newest = _VERSIONS.get(cls)
    if newest is not None and isinstance(version, int) and version > newest:
        raise _Refused(f"{where} ({cls}) has layout version {version}; this reader knows up to {newest}")


def _nonempty(v) -> bool:
    return v is not None and v is not False and v != [] and v != 0 and v != 0.0


def _refuse_features(model: dict, desc: dict, fit: dict, mixed: bool = False) -> None:
    """One line for the first DeePMD-kit feature of the model that our energy model lacks (se_e2_a's; with
    ``mixed``, DPA-1's: excluded type pairs in the descriptor and one fitting net for all types are read)."""
    checks = [
        ("model.atom_exclude_types", model.get("atom_exclude_types"), "excluded atom types"),
        ("model.pair_exclude_types", model.get("pair_exclude_types"), "excluded type pairs"),
        ("descriptor.exclude_types", None if mixed else desc.get("exclude_types"), "excluded type pairs"),
        ("descriptor.env_protection", desc.get("env_protection"), "a protected environment matrix"),
        ("descriptor.spin", desc.get("spin"), "spin"),
        (
            "descriptor.env_mat.use_exp_switch",
            (desc.get("env_mat") or {}).get("use_exp_switch"),
            "the exponential switch",
        ),
        ("descriptor.compress", desc.get("compress"), "a compressed (tabulated) descriptor"),
        ("fitting.numb_fparam", fit.get("numb_fparam"), "frame parameters"),
        ("fitting.numb_aparam", fit.get("numb_aparam"), "atomic parameters"),
        ("fitting.default_fparam", fit.get("default_fparam"), "frame parameters"),
        ("fitting.dim_case_embd", fit.get("dim_case_embd"), "case embeddings (multi-task)"),
        ("fitting.mixed_types", None if mixed else fit.get("mixed_types"), "one fitting net for all types"),
        ("fitting.exclude_types", fit.get("exclude_types"), "excluded atom types"),
        ("fitting.atom_ener", [e for e in fit.get("atom_ener") or [] if e is not None], "fixed atomic energies"),
        ("fitting.use_aparam_as_mask", fit.get("use_aparam_as_mask"), "atomic parameters as a mask"),
        ("fitting.layer_name", [n for n in fit.get("layer_name") or [] if n is not None], "shared layers"),
        ("fitting.spin", fit.get("spin"), "spin"),
    ]
    for key, value, what in checks:
        if _nonempty(value):
            shown = json.dumps(value, default=str)
            raise _Refused(f"{key} is {shown if len(shown) <= 40 else 'set'}: {what} is not supported by jaxmd_dp")
    for key, value in (
        ("descriptor.trainable", desc.get("trainable", True)),
        ("fitting.trainable", fit.get("trainable", True)),
    ):
        if not all(v is True for v in (value if isinstance(value, list) else [value])):
            raise _Refused(f"{key} is {json.dumps(value)}: frozen (untrainable) layers are not supported by jaxmd_dp")
    if fit.get("var_name", "energy") != "energy" or fit.get("dim_out", 1) != 1:
        raise _Refused(f"fitting fits {fit.get('var_name')!r} of dimension {fit.get('dim_out')}, not the energy")


def _section(model: dict) -> dict:
    """A DeePMD-kit input ``model`` section of the model's hyper-parameters."""
    desc, fit = model["descriptor"], model["fitting"]
    d_keys = (
        "sel",
        "rcut",
        "rcut_smth",
        "neuron",
        "axis_neuron",
        "type_one_side",
        "resnet_dt",
        "activation_function",
        "precision",
    )
    f_keys = ("neuron", "resnet_dt", "activation_function", "precision")
    missing = [f"descriptor.{k}" for k in d_keys if k not in desc] + [f"fitting.{k}" for k in f_keys if k not in fit]
    if "type_map" not in model:
        missing.insert(0, "type_map")
    if missing:
        raise _Refused(f"missing {', '.join(missing)}")
    return {
        "type_map": list(model["type_map"]),
        "descriptor": {"type": "se_e2_a", **{k: desc[k] for k in d_keys}},
        "fitting_net": {"type": "ener", **{k: fit[k] for k in f_keys}},
    }


def _net_layers(net: dict, where: str, activation: str, n_hidden: int, linear_out: bool) -> list[dict]:
    """A DeePMD-kit net's layers as ours ({"matrix", "bias"[, "idt"]}), checking their kinds."""
    _check_version(net, where)
    layers = net.get("layers")
    if not isinstance(layers, list) or len(layers) != n_hidden + linear_out:
        raise _Refused(
            f"{where} has {len(layers) if isinstance(layers, list) else 'no'} layers, expected {n_hidden + linear_out}"
        )
    out = []
    for i, layer in enumerate(layers):
        at = f"{where}.layers[{i}]"
        _check_version(layer, at)
        v = layer.get("@variables") or {}
        hidden = i < n_hidden
        want_act = activation if hidden else "none"
        act = str(layer.get("activation_function") or "none").lower()
        if act != want_act:
            raise _Refused(f"{at} has activation {act!r}, the net's is {want_act!r}")
        if v.get("w") is None or v.get("b") is None or layer.get("bias") is False:
            raise _Refused(f"{at} has no bias (only layers with a bias are supported)")
        if bool(layer.get("resnet", hidden)) != hidden:
            raise _Refused(f"{at}: resnet is {layer.get('resnet')}, expected {hidden}")
        leaves = {"matrix": v["w"], "bias": v["b"]}
        if v.get("idt") is not None:
            leaves["idt"] = v["idt"]
        out.append(leaves)
    return out


def _nets(collection: dict, where: str, ndim: int, ntypes: int) -> list[dict]:
    _check_version(collection, where)
    nets = collection.get("networks")
    if (
        collection.get("ndim") != ndim
        or collection.get("ntypes") != ntypes
        or not isinstance(nets, list)
        or len(nets) != ntypes**ndim
        or any(n is None for n in nets)
    ):
        raise _Refused(
            f"{where}: expected {ntypes**ndim} nets (ndim {ndim}, {ntypes} types), got "
            f"ndim {collection.get('ndim')} and {len(nets) if isinstance(nets, list) else 'no'} nets"
        )
    return nets


def _from_dict(data: dict) -> tuple[ModelHyper, dict, Stats]:
    model = data.get("model", data) if isinstance(data, dict) else None
    if not isinstance(model, dict):
        raise _Refused("no 'model' in the file")
    if model.get("@class") != "Model" or model.get("type", "standard") != "standard":
        kind = model.get("type", model.get("@class"))
        raise _Refused(f"a DeePMD-kit {kind!r} model; only a standard se_e2_a energy model is read")
    _check_version(model, "model")
    desc, fit = model.get("descriptor"), model.get("fitting")
    if not isinstance(desc, dict) or not isinstance(fit, dict):
        raise _Refused("the model has no descriptor or fitting")
    if desc.get("type") not in ("se_e2_a", "se_a", *_DPA1):
        raise _Refused(
            f"descriptor {desc.get('type')!r}; only se_e2_a, se_atten (dpa1) and se_atten_v2 are supported by jaxmd_dp"
        )
    if fit.get("type") != "ener":
        raise _Refused(f"fitting {fit.get('type')!r}; only the energy fitting 'ener' is supported by jaxmd_dp")
    _check_version(desc, "descriptor")
    _check_version(fit, "fitting")
    if desc.get("type") in _DPA1:
        return _from_dpa1(model, desc, fit)
    _refuse_features(model, desc, fit)
    try:
        hyper = _hyper_from_section(_section(model))
    except InputError as e:
        raise _Refused(str(e)) from None
    h = _hyper_fields(hyper)
    ntypes, tos = len(h["type_map"]), h["type_one_side"]
    dim_descrpt = h["neuron"][-1] * h["axis_neuron"]
    if fit.get("dim_descrpt", dim_descrpt) != dim_descrpt:
        raise _Refused(
            f"fitting.dim_descrpt is {fit['dim_descrpt']}, se_e2_a gives {dim_descrpt} "
            "(a type embedding is not supported)"
        )

    embeds = [
        _net_layers(n, f"descriptor.embeddings.networks[{k}]", h["activation"], len(h["neuron"]), False)
        for k, n in enumerate(_nets(desc.get("embeddings") or {}, "descriptor.embeddings", 1 if tos else 2, ntypes))
    ]
    fits = [
        _net_layers(n, f"fitting.nets.networks[{t}]", h["fit_activation"], len(h["fit_neuron"]), True)
        for t, n in enumerate(_nets(fit.get("nets") or {}, "fitting.nets", 1, ntypes))
    ]
    return hyper, *_checked_weights(hyper, _params_tree(embeds, fits), model, desc, fit)


def _checked_weights(hyper: ModelHyper, params: dict, model: dict, desc: dict, fit: dict) -> tuple[dict, Stats]:
    """(params cast to the nets' dtypes, stats) once the weight tree matches the hyper-parameters'; davg/dstd
    from the descriptor, the energy bias ``out_bias`` + ``bias_atom_e``."""
    import jax

    ntypes = len(hyper.type_map)
    want = param_shapes(hyper)
    got_struct = jax.tree_util.tree_structure(params)
    if got_struct != jax.tree_util.tree_structure(want):
        raise _Refused(
            "the nets' layers do not match the hyper-parameters (idt where resnet_dt is false, "
            "or missing where it is true)"
        )
    bad = [
        f"{'/'.join(str(getattr(p, 'key', p)) for p in path)} {np.shape(x)} (expected {tuple(w.shape)})"
        for (path, x), w in zip(jax.tree_util.tree_flatten_with_path(params)[0], jax.tree_util.tree_leaves(want))
        if np.shape(x) != tuple(w.shape)
    ]
    if bad:
        raise _Refused(f"weight shapes do not match the hyper-parameters: {bad[0]}")
    params = jax.tree_util.tree_map(lambda x, w: np.asarray(x, dtype=w.dtype), params, want)

    dvars, mvars, fvars = desc.get("@variables") or {}, model.get("@variables") or {}, fit.get("@variables") or {}
    shape = (ntypes, hyper.nnei, 4)
    if dvars.get("davg") is None or dvars.get("dstd") is None:
        raise _Refused("descriptor has no davg/dstd")
    davg, dstd = np.asarray(dvars["davg"], np.float64), np.asarray(dvars["dstd"], np.float64)
    if davg.shape != shape or dstd.shape != shape:
        raise _Refused(f"descriptor davg/dstd have shape {davg.shape}/{dstd.shape}, sel and type_map give {shape}")
    bias = np.zeros(ntypes)
    out_bias = mvars.get("out_bias")
    if out_bias is not None:
        out_bias = np.asarray(out_bias, np.float64)
        if out_bias.shape != (1, ntypes, 1):
            raise _Refused(f"model out_bias has shape {out_bias.shape}, expected (1, {ntypes}, 1)")
        bias = bias + out_bias[0, :, 0]
    if fvars.get("bias_atom_e") is not None:
        bias_atom_e = np.asarray(fvars["bias_atom_e"], np.float64)
        if bias_atom_e.shape != (ntypes, 1):
            raise _Refused(f"fitting bias_atom_e has shape {bias_atom_e.shape}, expected ({ntypes}, 1)")
        bias = bias + bias_atom_e[:, 0]
    return params, Stats(davg, dstd, bias)


# DPA-1 (se_atten, its serialised name dpa1, and se_atten_v2)
_DPA1 = ("se_atten", "dpa1", "se_atten_v2")
_DPA1_KEYS = (
    "rcut",
    "rcut_smth",
    "neuron",
    "axis_neuron",
    "tebd_dim",
    "type_one_side",
    "resnet_dt",
    "activation_function",
    "precision",
    "attn",
    "attn_layer",
    "attn_dotr",
    "scaling_factor",
    "normalize",
    "temperature",
    "trainable_ln",
    "ln_eps",
    "concat_output_tebd",
    "use_tebd_bias",
    "exclude_types",
    "set_davg_zero",
)


def _dpa1_section(model: dict) -> dict:
    """A DeePMD-kit input ``model`` section of a DPA-1 model's hyper-parameters."""
    desc, fit = model["descriptor"], model["fitting"]
    v2 = desc["type"] == "se_atten_v2"
    d_keys = _DPA1_KEYS + (() if v2 else ("tebd_input_mode", "smooth_type_embedding"))
    f_keys = ("neuron", "resnet_dt", "activation_function", "precision")
    missing = [f"descriptor.{k}" for k in (*d_keys, "sel") if k not in desc]
    missing += [f"fitting.{k}" for k in f_keys if k not in fit]
    if "type_map" not in model:
        missing.insert(0, "type_map")
    if missing:
        raise _Refused(f"missing {', '.join(missing)}")
    return {
        "type_map": list(model["type_map"]),
        "descriptor": {
            "type": "se_atten_v2" if v2 else "se_atten",
            "sel": int(np.sum(desc["sel"])),
            **{k: desc[k] for k in d_keys},
        },
        "fitting_net": {"type": "ener", **{k: fit[k] for k in f_keys}},
    }


def _affine(layer: dict, where: str, bias: bool = True) -> dict:
    """A linear layer (no activation, no skip) as {"matrix"[, "bias"]}."""
    _check_version(layer, where)
    v = layer.get("@variables") or {}
    act = str(layer.get("activation_function") or "none").lower()
    if act not in ("none", "linear") or layer.get("resnet") or v.get("idt") is not None:
        raise _Refused(f"{where}: expected a linear layer without skip or timestep")
    if v.get("w") is None or (v.get("b") is None) == bias:
        raise _Refused(f"{where}: {'no' if bias else 'a'} bias, expected {'one' if bias else 'none'}")
    return {"matrix": v["w"], **({"bias": v["b"]} if bias else {})}


def _dpa1_params(desc: dict, fit: dict, hyper: ModelHyper) -> dict:
    """The weight tree of a DPA-1 model (:mod:`jaxmd_dp.model.se_atten`, :mod:`jaxmd_dp.model.fitting_mixed`)."""
    d = hyper.descriptor
    tebd = desc.get("type_embedding") or {}
    _check_version(tebd, "descriptor.type_embedding")
    if tebd.get("use_econf_tebd") or not tebd.get("padding", True) or tebd.get("neuron") != [d.tebd_dim]:
        raise _Refused("descriptor.type_embedding: only one-hot types, padded, in one layer of tebd_dim are read")
    if str(tebd.get("activation_function", "linear")).lower() not in ("linear", "none"):
        raise _Refused(f"descriptor.type_embedding: activation {tebd.get('activation_function')!r}, not linear")
    layers = (tebd.get("embedding") or {}).get("layers") or [None]
    layer = layers[0] or {}
    if len(layers) != 1 or layer.get("use_timestep") or layer.get("resnet") is False:
        raise _Refused("descriptor.type_embedding: expected one layer with DeePMD-kit's skip and no timestep")
    v = dict(layer.get("@variables") or {})
    layer = {**layer, "resnet": False, "@variables": v}
    tree: dict = {"type_embedding": {"layer_0": _affine(layer, "descriptor.type_embedding", d.use_tebd_bias)}}
    nets = [("embedding", "embeddings")] + ([("embedding_strip", "embeddings_strip")] * (d.tebd_input_mode == "strip"))
    for ours, theirs in nets:
        (net,) = _nets(desc.get(theirs) or {}, f"descriptor.{theirs}", 0, hyper.ntypes)
        layers = _net_layers(net, f"descriptor.{theirs}.networks[0]", d.activation, len(d.neuron), False)
        tree[ours] = {f"layer_{i}": x for i, x in enumerate(layers)}
    attention = desc.get("attention_layers") or {}
    _check_version(attention, "descriptor.attention_layers")
    layers = attention.get("attention_layers") or []
    if len(layers) != d.attn_layer:
        raise _Refused(f"descriptor.attention_layers has {len(layers)} layers, attn_layer is {d.attn_layer}")
    for i, layer in enumerate(layers):
        at = f"descriptor.attention_layers[{i}]"
        gated = layer.get("attention_layer") or {}
        if gated.get("num_heads", 1) != 1 or gated.get("do_mask"):
            raise _Refused(f"{at}: only one head without a diagonal mask is read")
        tree[f"attention_{i}"] = {
            "in_proj": _affine(gated.get("in_proj") or {}, f"{at}.in_proj"),
            "out_proj": _affine(gated.get("out_proj") or {}, f"{at}.out_proj"),
        }
        ln = (layer.get("attn_layer_norm") or {}).get("@variables") or {}
        if ln.get("w") is None or ln.get("b") is None:
            raise _Refused(f"{at}.attn_layer_norm has no weights")
        if d.trainable_ln:
            tree[f"attention_{i}"]["layer_norm"] = {"scale": ln["w"], "offset": ln["b"]}
        elif np.any(np.asarray(ln["w"]) != 1.0) or np.any(np.asarray(ln["b"])):
            raise _Refused(f"{at}.attn_layer_norm: trainable_ln is false but its weights are not 1 and 0")
    (fnet,) = _nets(fit.get("nets") or {}, "fitting.nets", 0, hyper.ntypes)
    f = hyper.fitting
    fit_layers = _net_layers(fnet, "fitting.nets.networks[0]", f.activation, len(f.neuron), True)
    return {"descriptor": tree, "fitting": {"fit_0": {f"layer_{i}": x for i, x in enumerate(fit_layers)}}}


def _from_dpa1(model: dict, desc: dict, fit: dict) -> tuple[ModelHyper, dict, Stats]:
    """(hyper, params, stats) of a DeePMD-kit DPA-1 energy model (se_atten / dpa1 / se_atten_v2)."""
    _refuse_features(model, desc, fit, mixed=True)
    for key, value, ok, what in (
        ("descriptor.attn_mask", desc.get("attn_mask"), lambda v: not v, "a masked attention diagonal"),
        (
            "descriptor.use_econf_tebd",
            desc.get("use_econf_tebd"),
            lambda v: not v,
            "an electronic-configuration type embedding",
        ),
        ("descriptor.lmax", desc.get("lmax", 1), lambda v: v == 1, "a moment basis beyond l = 1"),
        ("fitting.mixed_types", fit.get("mixed_types", True), lambda v: v is True, "a fitting net per type with DPA-1"),
    ):
        if not ok(value):
            raise _Refused(f"{key} is {json.dumps(value)}: {what} is not supported by jaxmd_dp")
    try:
        hyper = _hyper_from_section(_dpa1_section(model))
    except InputError as e:
        raise _Refused(str(e)) from None
    if fit.get("dim_descrpt", hyper.dim_descriptor) != hyper.dim_descriptor:
        raise _Refused(f"fitting.dim_descrpt is {fit['dim_descrpt']}, the descriptor gives {hyper.dim_descriptor}")
    return hyper, *_checked_weights(hyper, _dpa1_params(desc, fit, hyper), model, desc, fit)


def load_deepmd(path: str | os.PathLike) -> tuple[ModelHyper, dict, Stats]:
    """(hyper, params, stats) of DeePMD-kit's ``.dp``/``.yaml`` model file of an se_e2_a or DPA-1 energy model (any
    DeePMD-kit backend's, e.g. from ``dp convert-backend model.pb model.dp``). A model we cannot run
    exactly as DeePMD-kit does (another descriptor or fitting, excluded types, frame/atomic parameters,
    fixed atomic energies, spin, ...) raises InputError with one line saying why; ``.pb``/``.pth`` files
    raise one telling to ``dp convert-backend`` them first. Settings that only shaped training (``rcond``,
    ``preset_out_bias``, ``set_davg_zero``, ``tot_ener_zero``) are not read. Weights keep the file's values
    (cast to the precision's dtype), stats are float64; the energy bias is ``out_bias`` + ``bias_atom_e``."""
    path = Path(path)
    data = read_deepmd_file(path)
    try:
        hyper, params, stats = _from_dict(data)
    except _Refused as e:
        raise InputError(f"{path}: {e}") from None
    if data.get("backend") == "TensorFlow" and not np.any(stats.energy_bias):
        # DeePMD-kit's TensorFlow energy model does not read model_attr/t_out_bias back from a .pb
        warnings.warn(
            f"{path}: converted from a TensorFlow .pb with a zero energy bias: DeePMD-kit's "
            "`dp convert-backend` does not carry a .pb's out_bias over, so energies may lack a constant "
            "per atom type (compare `dp test` on the .pb)",
            stacklevel=2,
        )
    return hyper, params, stats
