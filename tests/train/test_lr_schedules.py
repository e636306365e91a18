"""The exp, cosine and wsd learning rates, warmup included, against DeePMD-kit's own schedules
(``deepmd.dpmodel.utils.learning_rate``), as Python numbers and as traced jnp programs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxmd_dp.config.optimization import LearningRateConfig
from jaxmd_dp.train.schedule import CosineDecay, ExpDecay, WSDDecay, make_schedule, worker_scale

BaseLR = pytest.importorskip("deepmd.dpmodel.utils.learning_rate").BaseLR

NSTEPS = 20
CASES = [
    dict(type="exp", start_lr=1e-3, stop_lr=1e-5, decay_steps=3),
    dict(type="exp", start_lr=1e-3, stop_lr=1e-5, decay_steps=50),  # decay_steps shortened (≥ the run)
    dict(type="exp", start_lr=1e-3, stop_lr=1e-5, decay_steps=3, decay_rate=0.7),
    dict(type="exp", start_lr=2e-3, stop_lr=1e-5, decay_steps=4, smooth=True),
    dict(type="exp", start_lr=1e-3, stop_lr_ratio=1e-2, decay_steps=3, warmup_steps=5, warmup_start_factor=0.1),
    dict(type="exp", start_lr=1e-3, stop_lr=1e-6, decay_steps=2, smooth=True, warmup_ratio=0.25),
    dict(type="cosine", start_lr=1e-3, stop_lr=1e-5),
    dict(type="cosine", start_lr=1e-3, stop_lr_ratio=0.05, warmup_steps=4, warmup_start_factor=0.2),
    dict(type="wsd", start_lr=1e-3, stop_lr=1e-5, decay_phase_ratio=0.3),
    dict(type="wsd", start_lr=1e-3, stop_lr=1e-5, decay_phase_ratio=0.4, decay_type="cosine", warmup_steps=3),
    dict(type="wsd", start_lr=1e-3, stop_lr=1e-5, decay_phase_ratio=0.5, decay_type="linear", warmup_ratio=0.1),
]
STEPS = np.arange(NSTEPS)


@pytest.fixture(scope="module")
def traced():
    """One jitted program that evaluates any schedule at a step (the schedule static, as in the training
    step)."""
    return jax.jit(lambda schedule, step: schedule(step), static_argnums=0)


@pytest.mark.parametrize("case", CASES, ids=[f"{c['type']}-{i}" for i, c in enumerate(CASES)])
def test_schedule_is_deepmds(case, traced):
    want = np.array([BaseLR(**case, num_steps=NSTEPS).value(int(t)) for t in STEPS])
    schedule = make_schedule(LearningRateConfig(**case), NSTEPS)
    assert isinstance(schedule, {"exp": ExpDecay, "cosine": CosineDecay, "wsd": WSDDecay}[case["type"]])
    np.testing.assert_allclose([schedule(int(t)) for t in STEPS], want, rtol=1e-14, atol=0)
    got = np.array([traced(schedule, jnp.asarray(t)) for t in STEPS])
    np.testing.assert_allclose(got, want, rtol=1e-14, atol=0)
    assert len(set(want.round(15))) > 2  # the case moves: warmup and decay are both seen


@pytest.mark.parametrize("case", [CASES[0], CASES[7], CASES[9]], ids=["exp", "cosine", "wsd"])
def test_worker_scaling_scales_every_rate(case):
    """scale_by_worker multiplies the whole schedule, warmup and floor included."""
    base = make_schedule(LearningRateConfig(**case), NSTEPS)
    scaled = make_schedule(LearningRateConfig(**case), NSTEPS, worker_scale("sqrt", 4))
    np.testing.assert_allclose([scaled(int(t)) for t in STEPS], [2 * base(int(t)) for t in STEPS], rtol=1e-14)
    assert scaled.start_lr == 2 * base.start_lr


def test_default_exp_schedule_is_the_plain_one():
    """Without warmup or smooth decay the exp schedule is DeePMD-kit's plain formula (the training step's
    program of the default keys)."""
    s = make_schedule(LearningRateConfig(start_lr=1e-3, stop_lr=1e-5, decay_steps=5), 100)
    assert (s.smooth, s.warmup_steps, s.warmup_start_lr) == (False, 0, 0.0)
    assert s(12) == 1e-3 * s.decay_rate**2
