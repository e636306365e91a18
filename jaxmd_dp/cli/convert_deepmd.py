"""Import a DeePMD-kit energy model (se_e2_a, se_atten, se_atten_v2; from a state dict se_e2_a only).

    python -m jaxmd_dp.convert_deepmd MODEL.dp -o OUT           # DeePMD-kit's model file (.dp or .yaml)
    python -m jaxmd_dp.convert_deepmd PARAMS INPUT -o OUT       # a PyTorch state dict and its input.json

MODEL.dp: DeePMD-kit's backend-independent model file (``dp convert-backend model.pb model.dp`` makes one
from a TensorFlow or PyTorch model). PARAMS: a state dict saved as ``.npz`` under DeePMD-kit's key names,
or a DeePMD-kit ``.pt`` checkpoint (needs torch). INPUT: DeePMD-kit's ``input.json`` or ``out.json`` (its
``model`` section gives the hyper-parameters). OUT: a model directory that ``python -m jaxmd_dp.test -m OUT``
loads. A DeePMD-kit ``.dp`` file is also read directly by ``test -m``, ``freeze -m`` and ``--init-frz-model``.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np
from flax.traverse_util import unflatten_dict

from jaxmd_dp.errors import InputError
from jaxmd_dp.model.deepmd_file import CONVERT_FIRST, load_deepmd
from jaxmd_dp.model.deepmd_file import FILE_SUFFIXES as DEEPMD_SUFFIXES
from jaxmd_dp.model.energy import ModelHyper, Stats
from jaxmd_dp.model.io import save_model

_DESC = "descriptor.sea."
_FIT = "fitting_net."
_NET = re.compile(r"filter_layers\.networks\.(\d+)\.layers\.(\d+)\.(matrix|bias|idt)$")


def hyper_from_deepmd(model: dict, source: str = "input") -> ModelHyper:
    """ModelHyper from the ``model`` section of a DeePMD-kit input/out.json."""
    try:
        return ModelHyper.from_deepmd(model)
    except InputError as e:
        raise InputError(f"{source}: {e}") from None
    except KeyError as e:
        raise InputError(f"{source}: missing key {e.args[0]!r} in the model section") from None
    except ValueError as e:
        raise InputError(f"{source}: model: {e} (DeePMD-kit's out.json has the list)") from None


def params_from_state_dict(sd: dict[str, np.ndarray], hyper: ModelHyper, source: str = "params"):
    """Map a DeePMD-kit state dict (any prefix before ``atomic_model.``) onto (params, stats)."""
    sd = {
        k.split("atomic_model.", 1)[1]: np.asarray(v, dtype=np.float64) for k, v in sd.items() if "atomic_model." in k
    }
    if not sd:
        raise InputError(f"{source}: no DeePMD-kit 'atomic_model.' keys found (is this a DeePMD-kit se_e2_a model?)")
    flat = {}
    for key, val in sd.items():
        for prefix, top, name in ((_DESC, "descriptor", "embed"), (_FIT, "fitting", "fit")):
            if key.startswith(prefix):
                m = _NET.match(key[len(prefix) :])
                if m:
                    net, layer, leaf = m.groups()
                    flat[(top, f"{name}_{net}", f"layer_{layer}", leaf)] = val
    params = unflatten_dict(flat)
    try:
        davg, dstd = sd[_DESC + "mean"], sd[_DESC + "stddev"]
        bias = sd["out_bias"][0, :, 0] + sd.get(_FIT + "bias_atom_e", np.zeros((hyper.ntypes, 1)))[:, 0]
    except KeyError as e:
        raise InputError(f"{source}: missing DeePMD-kit tensor {e.args[0]!r}") from None
    shape = (hyper.ntypes, hyper.nnei, 4)
    if davg.shape != shape:
        raise InputError(f"{source}: descriptor mean has shape {davg.shape}, the input's sel/type_map need {shape}")
    _check_shapes(params, hyper, source)
    return params, Stats(davg, dstd, bias)


def _check_shapes(params, hyper: ModelHyper, source: str) -> None:
    from jax import tree_util

    from jaxmd_dp.model.energy import param_shapes

    got = tree_util.tree_map(np.shape, params)
    want = tree_util.tree_map(lambda x: tuple(x.shape), param_shapes(hyper))
    if got != want:
        raise InputError(
            f"{source}: the weights do not match the input's hyper-parameters "
            f"(nets/layers/shapes differ; check neuron, type_one_side, resnet_dt)"
        )


def load_state_dict(path: str | Path) -> dict[str, np.ndarray]:
    """Read DeePMD-kit weights from ``.npz`` or a ``.pt`` checkpoint (torch needed for the latter)."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such file")
    if path.suffix == ".npz":
        try:
            with np.load(path) as z:
                return {k: z[k] for k in z.files}
        except (OSError, ValueError) as e:
            raise InputError(f"{path}: not a readable .npz file ({e})") from None
    if path.suffix in (".pt", ".pth"):
        try:
            import torch
        except ImportError:
            raise InputError(
                f"{path}: reading a .pt checkpoint needs PyTorch (pip install torch), or save its state dict as .npz"
            ) from None
        try:
            obj = torch.load(path, map_location="cpu", weights_only=False)
        except Exception as e:  # torch raises many types for a bad file
            raise InputError(f"{path}: torch cannot read it ({type(e).__name__}: {e})") from None
        if isinstance(obj, dict) and "model" in obj and isinstance(obj["model"], dict):
            obj = obj["model"]
        if not isinstance(obj, dict):
            raise InputError(
                f"{path}: expected a checkpoint with a 'model' state dict (a frozen .pth is not supported)"
            )
        return {k: v.detach().cpu().numpy() for k, v in obj.items() if hasattr(v, "detach")}
    raise InputError(f"{path}: expected a .npz state dict or a .pt checkpoint")


def read_input(path: str | Path) -> dict:
    path = Path(path)
    try:
        d = json.loads(path.read_text())
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror})") from None
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: not valid JSON (line {e.lineno}: {e.msg})") from None
    if not isinstance(d, dict) or "model" not in d:
        raise InputError(f"{path}: no 'model' section (expected DeePMD-kit's input.json or out.json)")
    return d


def convert(params_path, input_path, out_path) -> Path:
    """Convert and save; returns the model directory. ``input_path`` is None for DeePMD-kit's model file."""
    if Path(params_path).suffix.lower() in DEEPMD_SUFFIXES + tuple(s for s in CONVERT_FIRST if s != ".pt"):
        if input_path is not None:
            raise InputError(f"{input_path}: not needed: {params_path} holds its hyper-parameters")
        hyper, params, stats = load_deepmd(params_path)
        return save_model(out_path, hyper, params, stats, {"converted_from": str(params_path)})
    if input_path is None:
        raise InputError(f"{params_path}: a state dict needs DeePMD-kit's input.json or out.json as INPUT")
    hyper = hyper_from_deepmd(read_input(input_path)["model"], str(input_path))
    params, stats = params_from_state_dict(load_state_dict(params_path), hyper, str(params_path))
    info = {"converted_from": str(params_path), "input": str(input_path)}
    return save_model(out_path, hyper, params, stats, info)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m jaxmd_dp.convert_deepmd", description=__doc__.split("\n")[0])
    p.add_argument(
        "params",
        help="DeePMD-kit model: .dp/.yaml model file, state dict .npz (DeePMD-kit key names) or .pt checkpoint",
    )
    p.add_argument("input", nargs="?", default=None, help="DeePMD-kit input.json or out.json (state dicts only)")
    p.add_argument("-o", "--output", required=True, help="model directory to write")
    args = p.parse_args(argv)
    out = convert(args.params, args.input, args.output)
    print(f"wrote {out}")
    return 0
