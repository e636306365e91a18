"""A trained model in memory: hyper-parameters, weights and statistics, with numpy in/out predictions."""

from __future__ import annotations

import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxmd_dp.errors import InputError
from jaxmd_dp.model.energy import ModelHyper, Prediction, Stats
from jaxmd_dp.model.evaluate import shared_evaluator
from jaxmd_dp.model.io import load_model, save_model


class Model:
    """A trained se_e2_a model: hyper-parameters, weights and statistics, with numpy in/out predictions.

    ``Model(hyper, params, stats)``; ``Model.load(path)`` reads a model directory or frozen model file
    (:func:`jaxmd_dp.api.load_model` also reads training outputs and checkpoints); ``trainer.model`` is
    the current training state. Molecular dynamics: ``jaxmd_dp.md.energy_fn(model, ...)`` (jax-md) and
    ``jaxmd_dp.md.DPCalculator(model)`` (ASE).
    """

    def __init__(self, hyper: ModelHyper, params, stats: Stats):
        self.hyper = hyper
        self.params = jax.tree_util.tree_map(jnp.asarray, params)
        self.stats = Stats(*(jnp.asarray(s) for s in stats))

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Model":
        """A model directory or frozen model file (training outputs: :func:`jaxmd_dp.api.load_model`)."""
        return cls(*load_model(path))

    def save(self, path: str | os.PathLike, info: dict | None = None):
        """Write a model directory (``model.json`` + ``weights.npz``) that :meth:`load` and
        ``python -m jaxmd_dp.test -m`` read."""
        return save_model(path, self.hyper, self.params, self.stats, info)

    @property
    def type_map(self) -> list[str]:
        return list(self.hyper.type_map)

    def __repr__(self) -> str:
        h = self.hyper
        return (f"Model(type_map={list(h.type_map)}, rcut={h.rcut}, sel={list(h.sel)}, neuron={list(h.neuron)}, "
                f"fit_neuron={list(h.fit_neuron)})")

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
        pred = shared_evaluator(self.hyper, self.params, self.stats)(coord, box, atype)
        return Prediction(*(p[0] for p in pred)) if single else pred

    def energy_and_forces(self, coord, box=None, atype=None) -> tuple[Any, np.ndarray]:
        """(energy eV, forces eV/Å): a float and (natoms, 3) for one frame, (nframes,), (nframes, natoms, 3)
        for several; arguments as :meth:`predict`."""
        pred = self.predict(coord, box, atype)
        energy = float(pred.energy) if np.ndim(pred.energy) == 0 else pred.energy
        return energy, pred.force
