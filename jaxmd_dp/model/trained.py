"""A trained model in memory: hyper-parameters, weights and statistics, with numpy in/out predictions."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxmd_dp.errors import InputError
from jaxmd_dp.model.energy import ModelHyper, Prediction, Stats
from jaxmd_dp.model.evaluate import Evaluator
from jaxmd_dp.model.fast.stacked_weights import has_stacked, to_nets
from jaxmd_dp.model.io import FILE_FORMATS, load_model, save_frozen, save_model


class Model:
    """A trained model: hyper-parameters, weights and statistics, with numpy in/out predictions.

    ``Model(hyper, params, stats)``; ``Model.load(path)`` reads a model directory or model file
    (:func:`jaxmd_dp.api.load_model` also reads training outputs and checkpoints); ``trainer.model`` is
    the current training state. Predictions go through :class:`~jaxmd_dp.model.evaluate.Evaluator`
    (:attr:`evaluator`). Molecular dynamics: ``jaxmd_dp.md.energy_fn(model, box, atype)`` (jax-md) and
    ``jaxmd_dp.md.DPCalculator(model)`` (ASE).
    """

    def __init__(self, hyper: ModelHyper, params, stats: Stats):
        """params: the per-net weights, or as a training state holds them (stacked groups,
        :func:`jaxmd_dp.model.fast.stacked_weights.to_nets`)."""
        self.hyper = hyper
        if has_stacked(params):  # split on the host: no program compiled per weight shape
            params = to_nets(jax.tree_util.tree_map(np.asarray, params))
        self.params = jax.tree_util.tree_map(jnp.asarray, params)
        self.stats = Stats(*(jnp.asarray(s) for s in stats))
        self._evaluator: Evaluator | None = None

    @classmethod
    def load(cls, path: str | os.PathLike) -> Model:
        """A model directory or model file (training outputs: :func:`jaxmd_dp.api.load_model`)."""
        return cls(*load_model(path))

    def save(self, path: str | os.PathLike, info: dict | None = None):
        """Write the model where :meth:`load` and ``python -m jaxmd_dp.test -m`` read it: one file when
        ``path`` has a model-file suffix (``.jaxdp``, :data:`jaxmd_dp.model.io.FILE_FORMATS`), else a
        directory (``model.json`` + ``weights.npz``). Returns the path."""
        write = save_frozen if Path(path).suffix.lower() in FILE_FORMATS else save_model
        return write(path, self.hyper, self.params, self.stats, info)

    @property
    def evaluator(self) -> Evaluator:
        """The :class:`~jaxmd_dp.model.evaluate.Evaluator` of this model (its compiled functions are shared
        by every model of the same hyper-parameters)."""
        if self._evaluator is None:
            self._evaluator = Evaluator(self.hyper, self.params, self.stats)
        return self._evaluator

    @property
    def type_map(self) -> list[str]:
        return list(self.hyper.type_map)

    def __repr__(self) -> str:
        h = self.hyper
        return (
            f"Model(type_map={list(h.type_map)}, descriptor={h.descriptor.type_name}, rcut={h.rcut}, "
            f"sel={list(h.sel)}, neuron={list(h.neuron)}, fit_neuron={list(h.fitting.neuron)})"
        )

    def atom_types(self, atype) -> np.ndarray:
        """Type indices (natoms,) from indices or chemical symbols (``["O", "H", "H", ...]``)."""
        a = np.asarray(atype)
        if a.dtype.kind in "US":
            index = {s: i for i, s in enumerate(self.hyper.type_map)}
            missing = sorted(set(a.tolist()) - set(index))
            if missing:
                raise InputError(f"elements {missing} are not in the model's type_map {self.type_map}")
            return np.array([index[s] for s in a.tolist()], np.int32)
        a = a.astype(np.int32).reshape(-1)
        if a.size and (a.min() < 0 or a.max() >= self.hyper.ntypes):
            raise InputError(f"atom types must lie in 0..{self.hyper.ntypes - 1} (type_map {self.type_map})")
        return a

    def predict(self, coord, box=None, atype=None) -> Prediction:
        """Energy (eV), forces (eV/Å), virial (eV, 9 components) and atomic energies, as numpy arrays.

        coord: (natoms, 3) or (nframes, natoms, 3) Å; box: (3, 3), (9,), (nframes, 3, 3) Å or None (no PBC);
        atype: (natoms,) type indices or chemical symbols. A single frame in gives a single frame out
        (energy a 0-d array, force (natoms, 3), virial (9,), atom_energy (natoms,)).
        """
        if atype is None:
            raise TypeError("predict() needs atype (type indices or chemical symbols)")
        coord = np.asarray(coord, np.float64)
        single = coord.ndim == 2
        coord = coord.reshape(-1, coord.shape[-2], 3)
        nf = coord.shape[0]
        if box is not None:
            box = np.asarray(box, np.float64).reshape(-1, 3, 3)
            box = np.broadcast_to(box, (nf, 3, 3))
        atype = self.atom_types(atype)
        if atype.shape[0] != coord.shape[1]:
            raise InputError(f"{atype.shape[0]} atom types for {coord.shape[1]} atoms")
        pred = self.evaluator(coord, box, atype)
        return Prediction(*(p[0] for p in pred)) if single else pred

    def energy_and_forces(self, coord, box=None, atype=None) -> tuple[Any, np.ndarray]:
        """(energy eV, forces eV/Å): a float and (natoms, 3) for one frame, (nframes,), (nframes, natoms, 3)
        for several; arguments as :meth:`predict`."""
        pred = self.predict(coord, box, atype)
        energy = float(pred.energy) if np.ndim(pred.energy) == 0 else pred.energy
        return energy, pred.force
