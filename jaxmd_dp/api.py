"""The notebook / Python API.

    from jaxmd_dp import Trainer, load_config
    from jaxmd_dp.api import Model, load_model, live_plot_callback, use_compile_cache

    use_compile_cache()                               # optional: reuse compiled steps across sessions
    config = load_config("configs/water.yaml", ["training.numb_steps=50"])
    plot = live_plot_callback()                       # a learning curve redrawn at every lcurve line
    trainer = Trainer(config, "runs/water", callbacks=[plot])
    trainer.fit(50)
    energy, forces = trainer.model.energy_and_forces(coord, box, atype)   # eV, eV/Å
    model = load_model("runs/water")                  # a run, checkpoint, model directory or frozen file
    atoms.calc = DPCalculator(model)                  # ASE (needs ase): from jaxmd_dp.md import DPCalculator

Units: Å, eV, eV/Å; virials eV (DeePMD-kit's layout).
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence

import numpy as np

from jaxmd_dp.config import load_config
from jaxmd_dp.model.trained import Model
from jaxmd_dp.runtime.compile_cache import use_compile_cache
from jaxmd_dp.train.callbacks import Callback
from jaxmd_dp.train.checkpoint import load_trained
from jaxmd_dp.train.loop import Trainer

__all__ = [
    "Trainer",
    "load_config",
    "Model",
    "load_model",
    "as_model",
    "LivePlot",
    "live_plot_callback",
    "use_compile_cache",
]


def load_model(path: str | os.PathLike) -> Model:
    """A :class:`Model` from a model file (``.jaxdp``), a model directory, a training output directory or
    a checkpoint (the latest step)."""
    return Model(*load_trained(path))


def as_model(model) -> Model:
    """A :class:`Model` from a Model, a path (:func:`load_model`), a :class:`Trainer` (its current model)
    or a (hyper, params, stats) tuple."""
    if isinstance(model, Model):
        return model
    if isinstance(model, (str, os.PathLike)):
        return load_model(model)
    if isinstance(model, Trainer):
        return model.model
    if isinstance(model, tuple) and len(model) == 3:
        return Model(*model)
    raise TypeError(f"expected a Model, a model path, a Trainer or (hyper, params, stats), got {type(model).__name__}")


# ------------------------------------------------------------------------------------------------ live plot
class LivePlot(Callback):
    """A learning curve redrawn in the notebook at every lcurve line (``disp_freq`` steps): a training
    callback, fed the numbers written to lcurve.out (``rmse``, ``rmse_e`` eV/atom, ``rmse_f`` eV/Å,
    ``rmse_v`` eV/atom).

        plot = LivePlot()
        Trainer(config, out, callbacks=[plot]).fit()

    Given as the trainer's ``log`` instead (``Trainer(config, out, log=plot)``) it is that callback too, and
    prints the log's lines when ``echo``, except the per-window ``batch N:`` lines the plot shows (unless
    ``echo_batches``). ``plot(step, train, valid, lr)`` adds a point by hand.

    Outside a notebook nothing is drawn; the points are kept (``steps``, ``train``, ``valid``, ``lr``) and
    :meth:`figure` / :meth:`save` give the plot.
    """

    def __init__(
        self, keys: Sequence[str] = ("rmse", "rmse_e", "rmse_f"), echo: bool = True, echo_batches: bool = False
    ):
        self.keys = tuple(keys)
        self.echo, self.echo_batches = echo, echo_batches
        self.steps: list[int] = []
        self.train: dict[str, list[float]] = {}
        self.valid: dict[str, list[float]] = {}
        self.lr: list[float] = []
        self._handle = None

    def on_window(self, trainer, window) -> None:
        """The training callback: one lcurve line's numbers (:class:`jaxmd_dp.train.callbacks.Window`)."""
        self.update(window.step, window.train, window.valid, window.lr)

    def __call__(self, *args, **kwargs) -> None:
        """As a log: ``plot(line)``; else ``plot(step, train, valid, lr)`` (:meth:`update`)."""
        if len(args) == 1 and isinstance(args[0], str) and not kwargs:
            self.log(args[0])
        else:
            self.update(*args, **kwargs)

    def log(self, line: str) -> None:
        """A console line from the trainer (its ``log``): printed when ``echo``, a window's ``batch N:`` lines
        only with ``echo_batches``."""
        for ln in str(line).splitlines() or [""]:
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
        from jaxmd_dp.cli.plot import QUANTITIES  # the titles and units of ``python -m jaxmd_dp.plot``

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
    """A :class:`LivePlot`: pass it as ``Trainer(..., callbacks=[plot])`` (or as the trainer's ``log``)."""
    return LivePlot(keys, echo)
