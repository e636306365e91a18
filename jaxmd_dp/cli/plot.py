"""Plot a learning curve (lcurve.out, ours or DeePMD-kit's) to a PNG.

    python -m jaxmd_dp.plot lcurve.out [-o lcurve.png]

One panel per quantity in the file (total loss ``rmse``, ``rmse_e``, ``rmse_f``, ``rmse_v``, ...), each with
the training and validation curves on log axes and the learning rate on a twin axis. Needs matplotlib
(``pip install 'jaxmd_dp[plot]'``).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np

from jaxmd_dp.errors import InputError

#: panel titles and units of the quantities our trainer and DeePMD-kit write (energies and virials per atom)
QUANTITIES = {
    "rmse": ("total loss (√L)", ""),
    "rmse_e": ("energy RMSE", "eV/atom"),
    "rmse_f": ("force RMSE", "eV/Å"),
    "rmse_v": ("virial RMSE", "eV/atom"),
}
TRAIN_COLOR, VALID_COLOR, LR_COLOR = "#1f77b4", "#d62728", "#7f7f7f"


def read_lcurve(path: str | Path) -> dict[str, np.ndarray]:
    """Columns of a learning-curve file by name (``step``, ``rmse_e_trn``, ..., ``lr``), as float arrays.

    The names come from the header line ``# step ...``; lines starting with ``#`` are comments.
    Raises :class:`InputError` (one line, naming the file) for a missing, empty or garbled file."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise InputError(f"{path}: no such learning-curve file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: cannot read the learning curve ({getattr(e, 'strerror', None) or e})") from None
    names = None
    rows = []
    for lineno, line in enumerate(text.splitlines(), 1):
        words = line.split()
        if not words:
            continue
        if words[0].startswith("#"):
            words = line.lstrip("#").split()
            if names is None and words and words[0] == "step":
                names = words
            continue
        if names is None:
            raise InputError(f"{path}: line {lineno}: data before the '# step ...' header (not an lcurve.out file?)")
        if len(words) != len(names):
            raise InputError(f"{path}: line {lineno}: {len(words)} columns, the header names {len(names)}")
        try:
            rows.append([float(w) for w in words])
        except ValueError:
            raise InputError(f"{path}: line {lineno}: not a number in {line.strip()[:60]!r}") from None
    if names is None:
        raise InputError(f"{path}: no '# step ...' header line (not an lcurve.out file?)")
    if not rows:
        raise InputError(f"{path}: no data lines after the header (training wrote none yet?)")
    data = np.asarray(rows, dtype=np.float64)
    return {n: data[:, k] for k, n in enumerate(names)}


def quantities(columns: dict[str, np.ndarray]) -> list[str]:
    """The quantities with at least one finite value, in lcurve order (``rmse``, ``rmse_e``, ...)."""
    out = []
    for name in columns:
        for suffix in ("_trn", "_val"):
            if name.endswith(suffix):
                q = name[: -len(suffix)]
                if q not in out and np.isfinite(columns[name]).any():
                    out.append(q)
    order = list(QUANTITIES)
    return sorted(out, key=lambda q: (order.index(q) if q in order else len(order), q))


def plot_lcurve(
    path: str | Path, output: str | Path | None = None, dpi: int = 100, width: float = 6.0, height: float = 3.2
) -> Path:
    """Draw ``path`` (an lcurve file) to ``output`` (default: beside it, ``.png``); returns the PNG path.

    The figure is ``width × height`` inches per panel row at ``dpi`` (two panels per row)."""
    columns = read_lcurve(path)
    qs = quantities(columns)
    if not qs:
        raise InputError(f"{path}: no rmse_*_trn / rmse_*_val columns with values to plot")
    if output is None:
        output = Path(path).with_suffix(".png")
    output = Path(output)
    try:
        import matplotlib

        matplotlib.use("Agg", force=True)
        import matplotlib.pyplot as plt
    except ImportError:
        raise InputError("plotting needs matplotlib: pip install 'jaxmd_dp[plot]'") from None

    ncols = 1 if len(qs) == 1 else 2
    nrows = math.ceil(len(qs) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows + 0.6), dpi=dpi, squeeze=False)
    step = columns["step"]
    lr = columns.get("lr")
    has_lr = lr is not None and bool((np.isfinite(lr) & (lr > 0)).any())
    legend = {}
    for ax, q in zip(axes.flat, qs):
        title, unit = QUANTITIES.get(q, (q, ""))
        for suffix, label, color in (("_trn", "train", TRAIN_COLOR), ("_val", "validation", VALID_COLOR)):
            y = columns.get(q + suffix)
            if y is None:
                continue
            ok = np.isfinite(y) & (y > 0)  # log axis: NaN (no labels) and zeros are left out
            if ok.any():
                (h,) = ax.plot(step[ok], y[ok], color=color, lw=1.4, marker="o" if ok.sum() < 30 else None, ms=3)
                legend.setdefault(label, h)
        ax.set_yscale("log")
        _step_axis(ax, step)
        ax.set_title(f"{title} ({unit})" if unit else title, fontsize=11)
        ax.set_xlabel("step")
        ax.set_ylabel(f"{q} ({unit})" if unit else q)
        ax.grid(True, which="major", alpha=0.35)
        ax.grid(True, which="minor", axis="y", alpha=0.12)
        if has_lr:
            ax2 = ax.twinx()
            ok = np.isfinite(lr) & (lr > 0)
            (h,) = ax2.plot(step[ok], lr[ok], color=LR_COLOR, lw=1.0, ls="--")
            legend.setdefault("learning rate", h)
            ax2.set_yscale("log")
            ax2.set_ylabel("learning rate", color=LR_COLOR)
            ax2.tick_params(axis="y", colors=LR_COLOR, which="both")
    for ax in list(axes.flat)[len(qs) :]:
        ax.set_visible(False)
    inch = 1.0 / (height * nrows + 0.6)  # one inch as a fraction of the figure height
    fig.suptitle(
        f"{Path(path).name}: {len(step)} points, last step {int(step[-1])}", fontsize=11, y=1 - 0.08 * inch, va="top"
    )
    fig.legend(
        list(legend.values()),
        list(legend),
        loc="upper center",
        ncol=len(legend),
        fontsize=9,
        frameon=False,
        bbox_to_anchor=(0.5, 1 - 0.3 * inch),
    )
    top = 1 - 0.5 * inch  # room for the title and the legend
    fig.tight_layout(rect=(0, 0, 1, top))
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(output, dpi=dpi, format="png")
    except OSError as e:
        raise InputError(f"{output}: cannot write the figure ({e.strerror or e})") from None
    finally:
        plt.close(fig)
    return output


def _step_axis(ax, step: np.ndarray) -> None:
    """Steps on a log axis that still shows step 0 (DeePMD-kit starts there): symlog, linear below the first
    decade that holds a step, ticks at 0 and at whole decades."""
    from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator

    pos = step[step > 0]
    if not pos.size:
        return
    lo = 10.0 ** math.floor(math.log10(pos.min()))
    hi = 10.0 ** math.ceil(math.log10(max(pos.max(), lo * 10)))
    if (step <= 0).any():
        ax.set_xscale("symlog", linthresh=lo, linscale=0.25)
        ticks = [0.0]
    else:
        ax.set_xscale("log")
        ticks = []
    ticks += [10.0**k for k in range(int(round(math.log10(lo))), int(round(math.log10(hi))) + 1)]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m jaxmd_dp.plot", description=__doc__.splitlines()[0])
    p.add_argument("lcurve", help="learning-curve file (lcurve.out)")
    p.add_argument("-o", "--output", default=None, help="PNG to write (default: the lcurve file's name with .png)")
    p.add_argument("--dpi", type=int, default=100, help="resolution (default 100)")
    args = p.parse_args(argv)
    out = plot_lcurve(args.lcurve, args.output, dpi=args.dpi)
    print(f"wrote {out}")
    return 0
