"""DeePMD-kit's reference fixtures (../shared/fixtures): load weights and predictions once per session."""

from __future__ import annotations

import functools

import numpy as np
from shared_paths import require, shared_dir

FIXTURES = ("water_se_e2_a", "water_pairnets", "cu_virial", "nopbc_cho")


def fixture_dir(name: str):
    return require(shared_dir().parent / "fixtures" / name)


@functools.cache
def load_fixture(name: str):
    """(hyper, params, stats, predictions dict) for a fixture, weights converted from DeePMD-kit's."""
    from jaxmd_dp.cli.convert_deepmd import hyper_from_deepmd, load_state_dict, params_from_state_dict, read_input

    d = fixture_dir(name)
    hyper = hyper_from_deepmd(read_input(d / "out.json")["model"], str(d))
    params, stats = params_from_state_dict(load_state_dict(d / "params.npz"), hyper, str(d))
    with np.load(d / "predictions.npz") as z:
        pred = {k: z[k] for k in z.files}
    return hyper, params, stats, pred


def max_rel(a, b) -> float:
    """max |a − b| / max |b|."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))
