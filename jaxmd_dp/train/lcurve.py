"""``lcurve.out``, DeePMD-kit's learning-curve file: a header, then one line every ``disp_freq`` steps.

    # step       rmse_val    rmse_trn    rmse_e_val  rmse_e_trn    rmse_f_val  rmse_f_trn   lr
          1      2.60e+01    2.68e+01      1.14e-01    5.33e-01      8.23e-01    8.47e-01    1.0e-03

Keys are sorted (rmse, rmse_e, rmse_f, rmse_v); without validation data only ``*_trn`` columns appear.
"""

from __future__ import annotations

import math
from pathlib import Path

NAN_NOTE = "# If there is no available reference data, rmse_*_{val,trn} will print nan\n"


def header(keys: list[str], has_valid: bool) -> str:
    s = "# {:5s}".format("step")
    for k in sorted(keys):
        s += f"   {k + '_val':>11s} {k + '_trn':>11s}" if has_valid else f"   {k + '_trn':>11s}"
    return s + "   {:8s}\n".format("lr") + NAN_NOTE


def line(step: int, train: dict, valid: dict | None, lr: float) -> str:
    s = f"{step:7d}"
    for k in sorted(train):
        if valid is not None:
            s += f"   {valid.get(k, math.nan):11.2e} {train[k]:11.2e}"
        else:
            s += f"   {train[k]:11.2e}"
    return s + f"   {lr:8.1e}\n"


def truncate_after(path: Path, step: int) -> None:
    """Keep the header and the lines of steps ≤ ``step`` (a restart rewrites what follows)."""
    if not path.exists():
        return
    keep = [
        ln
        for ln in path.read_text().splitlines(keepends=True)
        if ln.startswith("#") or (ln.split() and int(ln.split()[0]) <= step)
    ]
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(keep))
    tmp.replace(path)
