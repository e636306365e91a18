"""TensorBoard scalars: written with tensorboardX, read back with TensorBoard's own event reader."""

import math

import numpy as np
import pytest

from jaxmd_dp.errors import InputError
from jaxmd_dp.train.tensorboard import TBWriter


def _read(logdir):
    from tensorboard.backend.event_processing import event_accumulator

    acc = event_accumulator.EventAccumulator(str(logdir), size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_scalars_round_trip(tmp_path):
    logdir = tmp_path / "run" / "log"
    with TBWriter(logdir) as tb:
        for step in (1, 10, 20):
            tb.metrics(
                step,
                {"rmse": 2.0 / step, "rmse_e": np.float64(0.1 / step), "rmse_v": math.nan},
                {"rmse": 3.0 / step, "rmse_e": 0.2 / step},
                lr=1e-3 * 0.5 ** (step // 10),
                step_time=0.25,
            )
        tb.scalars(30, {"custom/tag": 7, "skipped": None})
    got = _read(logdir)
    assert set(got) == {"rmse/trn", "rmse_e/trn", "rmse/val", "rmse_e/val", "lr", "step_time", "custom/tag"}
    assert [s for s, _ in got["rmse_e/trn"]] == [1, 10, 20]
    np.testing.assert_allclose([v for _, v in got["rmse_e/trn"]], [0.1, 0.01, 0.005], rtol=1e-6)
    np.testing.assert_allclose([v for _, v in got["rmse/val"]], [3.0, 0.3, 0.15], rtol=1e-6)
    np.testing.assert_allclose([v for _, v in got["lr"]], [1e-3, 5e-4, 2.5e-4], rtol=1e-6)
    assert got["custom/tag"] == [(30, 7.0)]
    tb.close()  # idempotent


def test_restart_purges_later_steps(tmp_path):
    """A run restarted from step 10 hides what the first run wrote after step 10."""
    with TBWriter(tmp_path) as tb:
        for step in (5, 10, 15, 20):
            tb.scalars(step, {"lr": step})
    with TBWriter(tmp_path, purge_step=11) as tb:
        tb.scalars(12, {"lr": 120})
    assert _read(tmp_path)["lr"] == [(5, 5.0), (10, 10.0), (12, 120.0)]


def test_unwritable_logdir(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(InputError, match="file/log.*not writable"):
        TBWriter(blocker / "log")
