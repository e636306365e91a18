"""The notebook / Python API.

    from jaxmd_dp import Trainer, load_config
    from jaxmd_dp.api import Model, live_plot_callback, use_compile_cache

    use_compile_cache()                               # optional: reuse compiled steps across sessions
    config = load_config("configs/water.yaml", ["training.numb_steps=50"])
    plot = live_plot_callback()                       # a learning curve redrawn at every lcurve line
    trainer = Trainer(config, "runs/water", log=plot)
    trainer.fit(50)
    energy, forces = trainer.model.energy_and_forces(coord, box, atype)   # eV, eV/Å
    model = Model.load("runs/water")                  # or a converted DeePMD-kit model directory
    atoms.calc = model.calculator()                   # ASE (needs ase)

Units: Å, eV, eV/Å; virials eV (DeePMD-kit's layout).
"""

from __future__ import annotations

import io
import os
import re
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxmd_dp.cli_util import use_compile_cache
from jaxmd_dp.config import load_config
from jaxmd_dp.errors import InputError
from jaxmd_dp.md import shared_evaluator
from jaxmd_dp.model.energy import ModelHyper, Prediction, Stats
from jaxmd_dp.train.loop import Trainer

__all__ = ["Trainer", "load_config", "Model", "LivePlot", "live_plot_callback", "use_compile_cache"]


class Model:
    """A trained se_e2_a model: hyper-parameters, weights and statistics, with numpy in/out predictions.

    ``Model(hyper, params, stats)``; ``Model.load(path)`` reads a model directory, training output or
    checkpoint (:func:`jaxmd_dp.model_io.load_model`); ``trainer.model`` is the current training state.
    """

    def __init__(self, hyper: ModelHyper, params, stats: Stats):
        self.hyper = hyper
        self.params = jax.tree_util.tree_map(jnp.asarray, params)
        self.stats = Stats(*(jnp.asarray(s) for s in stats))

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Model":
        from jaxmd_dp.model_io import load_model

        return cls(*load_model(path))

    def save(self, path: str | os.PathLike, info: dict | None = None):
        """Write a model directory (``model.json`` + ``weights.npz``) that :meth:`load` and
        ``python -m jaxmd_dp.test -m`` read."""
        from jaxmd_dp.model_io import save_model

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

    def calculator(self):
        """An ASE calculator (:class:`jaxmd_dp.md.DPCalculator`; needs ase)."""
        from jaxmd_dp.md import DPCalculator

        return DPCalculator(self)

    def energy_fn(self, box, atype, **kwargs):
        """jax-md ``(neighbor_fn, energy)`` for this model (:func:`jaxmd_dp.md.energy_fn`)."""
        from jaxmd_dp.md import energy_fn

        return energy_fn(self, box, self.atom_types(atype), **kwargs)


# ------------------------------------------------------------------------------------------------ live plot
_BATCH = re.compile(r"^batch\s+(\d+):\s+(trn|val):\s+(.*)$")
_WALL = re.compile(r"^batch\s+(\d+):\s+total wall time = .*?lr = ([0-9.eE+-]+)")
_PAIR = re.compile(r"(\w+) = ([-+0-9.eEnaif]+)")


class LivePlot:
    """A learning curve redrawn in the notebook at every lcurve line (``disp_freq`` steps).

    Use it either as the trainer's console ``log`` — ``Trainer(config, out, log=LivePlot())`` — where it
    reads the per-window ``batch N: trn: ...`` / ``val:`` / ``total wall time`` lines (other lines are
    printed when ``echo``), or as a structured callback ``plot(step, train, valid, lr)`` with the dicts
    that are written to lcurve.out (``rmse``, ``rmse_e`` eV/atom, ``rmse_f`` eV/Å, ``rmse_v``).

    Outside a notebook nothing is drawn; the points are kept (``steps``, ``train``, ``valid``, ``lr``) and
    :meth:`figure` / :meth:`save` give the plot.
    """

    def __init__(self, keys: Sequence[str] = ("rmse", "rmse_e", "rmse_f"), echo: bool = True,
                 echo_batches: bool = False):
        self.keys = tuple(keys)
        self.echo, self.echo_batches = echo, echo_batches
        self.steps: list[int] = []
        self.train: dict[str, list[float]] = {}
        self.valid: dict[str, list[float]] = {}
        self.lr: list[float] = []
        self._pending: dict = {}
        self._handle = None

    # -- the two hooks
    def __call__(self, *args, **kwargs) -> None:
        if len(args) == 1 and isinstance(args[0], str) and not kwargs:
            self.log(args[0])
        else:
            self.update(*args, **kwargs)

    def log(self, line: str) -> None:
        """A console line from the trainer (its ``log``)."""
        for ln in str(line).splitlines() or [""]:
            m = _BATCH.match(ln.strip())
            if m:
                vals = {k: float(v) for k, v in _PAIR.findall(m.group(3))}
                self._pending.setdefault(int(m.group(1)), {})[m.group(2)] = vals
            else:
                w = _WALL.match(ln.strip())
                if w:
                    step = int(w.group(1))
                    got = self._pending.pop(step, {})
                    if "trn" in got:
                        self.update(step, got["trn"], got.get("val"), float(w.group(2)))
            if self.echo and (self.echo_batches or not ln.strip().startswith("batch ")):
                print(ln)

    def update(self, step: int, train: dict, valid: dict | None = None, lr: float | None = None) -> None:
        """One lcurve line: step, training metrics, validation metrics (or None), learning rate."""
        self.steps.append(int(step))
        n = len(self.steps)
        for store, vals in ((self.train, train), (self.valid, valid or {})):
            for k, v in vals.items():
                col = store.setdefault(k, [])
                col.extend([np.nan] * (n - 1 - len(col)))
                col.append(float(v))
        self.lr.append(np.nan if lr is None else float(lr))
        self.redraw()

    # -- drawing
    def figure(self):
        """A matplotlib Figure of the curves so far (one panel per key, log scale)."""
        from matplotlib.figure import Figure

        keys = [k for k in self.keys if k in self.train] or sorted(self.train)[:3] or list(self.keys)
        fig = Figure(figsize=(3.6 * max(1, len(keys)), 3.0), layout="constrained")
        axes = fig.subplots(1, max(1, len(keys)), squeeze=False)[0]
        from jaxmd_dp.plot import QUANTITIES  # the titles and units of ``python -m jaxmd_dp.plot``

        labels = {k: f"{title} ({unit})" if unit else title for k, (title, unit) in QUANTITIES.items()}
        for ax, k in zip(axes, keys):
            for store, label, style in ((self.train, "train", "-o"), (self.valid, "validation", "-s")):
                y = store.get(k)
                if y:
                    ax.plot(self.steps[: len(y)], y, style, ms=3, label=label)
            ax.set_yscale("log")
            ax.set_xlabel("step")
            ax.set_ylabel(labels.get(k, k))
            ax.legend(fontsize=8)
        if self.steps:
            last = ", ".join(f"{k} {self.train[k][-1]:.3g}" for k in keys if k in self.train)
            fig.suptitle(f"step {self.steps[-1]}: {last}, lr {self.lr[-1]:.2g}", fontsize=9)
        return fig

    def png(self) -> bytes:
        buf = io.BytesIO()
        self.figure().savefig(buf, format="png", dpi=90)
        return buf.getvalue()

    def save(self, path: str | os.PathLike) -> None:
        self.figure().savefig(path, dpi=120)

    def redraw(self) -> None:
        if not _in_ipython():
            return
        from IPython.display import Image, display

        img = Image(data=self.png(), format="png")
        if self._handle is None:
            self._handle = display(img, display_id=True)
        else:
            self._handle.update(img)


def _in_ipython() -> bool:
    """Inside a Jupyter kernel (not a terminal IPython, where an image cannot be shown)."""
    from jaxmd_dp.train.progress import in_notebook

    return in_notebook()


def live_plot_callback(keys: Sequence[str] = ("rmse", "rmse_e", "rmse_f"), echo: bool = True) -> LivePlot:
    """A :class:`LivePlot`: pass it as ``Trainer(..., log=plot)`` or call ``plot(step, train, valid, lr)``
    from the training loop."""
    return LivePlot(keys, echo)

