"""Learning-rate and prefactor schedules and the energy loss against DeePMD-kit's formulas."""

import math

import jax.numpy as jnp
import numpy as np
import pytest
from fixture_models import fixture_dir

from jaxmd_dp.model.energy import Prediction
from jaxmd_dp.train.loss import LossPrefs, energy_loss
from jaxmd_dp.train.schedule import effective_decay_steps, exp_decay, prefactor, worker_scale


@pytest.mark.parametrize(
    "start,stop,ds,n", [(1e-3, 3.51e-8, 5000, 1_000_000), (1e-3, 1e-4, 10, 50), (2e-3, 1e-6, 7, 333)]
)
def test_exp_decay_formula(start, stop, ds, n):
    lr = exp_decay(start, stop, ds, n)
    rate = math.exp(math.log(stop / start) / (n / ds))  # DeePMD-kit: lr reaches stop_lr at numb_steps
    for t in [0, 1, ds - 1, ds, 3 * ds + 2, n - 1, n]:
        want = max(start * rate ** (t // ds), stop)
        assert lr(t) == pytest.approx(want, rel=1e-12)
        assert float(lr(jnp.asarray(t))) == pytest.approx(want, rel=1e-12)
    if n % ds == 0:
        assert lr(n) == pytest.approx(stop, rel=1e-9)


def test_decay_steps_longer_than_run_is_replaced():
    assert effective_decay_steps(5000, 2000) == 100  # numb_steps // 10 > 100
    assert effective_decay_steps(5000, 500) == 6  # else numb_steps // 100 + 1
    assert effective_decay_steps(100, 2000) == 100


def test_explicit_decay_rate_and_worker_scale():
    lr = exp_decay(1e-3, 1e-8, 100, 10_000, decay_rate=0.5, scale=worker_scale("sqrt", 4))
    assert lr(250) == pytest.approx(2e-3 * 0.25)
    assert [worker_scale(m, 4) for m in ("linear", "sqrt", "none")] == [4.0, 2.0, 1.0]
    with pytest.raises(ValueError):
        worker_scale("cubic", 2)


def test_lcurve_lr_column_of_deepmd_fixture():
    """DeePMD-kit prints at display step s the lr of step index s − 1; ours must give the same column."""
    d = fixture_dir("cu_virial")
    rows = [ln.split() for ln in (d / "lcurve.out").read_text().splitlines() if not ln.startswith("#")]
    lr = exp_decay(1e-3, 1e-4, 10, 50)
    for r in rows:
        assert f"{lr(int(r[0]) - 1):8.1e}".strip() == r[-1]


def test_prefactor_interpolates_with_lr():
    assert prefactor(1000, 1, 1e-3, 1e-3) == 1000
    assert prefactor(1000, 1, 0.0, 1e-3) == 1
    assert prefactor(0.02, 1, 5e-4, 1e-3) == pytest.approx(0.51)


def test_energy_loss_matches_numpy():
    rng = np.random.default_rng(0)
    nb, na = 3, 5
    pred = Prediction(rng.normal(size=nb), rng.normal(size=(nb, na, 3)), rng.normal(size=(nb, 9)), None)
    batch = {
        "energy": rng.normal(size=nb),
        "force": rng.normal(size=(nb, na, 3)),
        "virial": rng.normal(size=(nb, 9)),
        "find_energy": 1.0,
        "find_force": 1.0,
        "find_virial": 1.0,
    }
    prefs = LossPrefs(0.02, 1.0, 1000.0, 1.0, 0.02, 1.0)
    lr, start = 3e-4, 1e-3
    loss, m = energy_loss(pred, batch, prefs, lr, start)
    pe, pf, pv = (lim + (s - lim) * lr / start for s, lim in ((0.02, 1.0), (1000.0, 1.0), (0.02, 1.0)))
    mse_e = np.mean((pred.energy - batch["energy"]) ** 2)
    mse_f = np.mean((pred.force - batch["force"]) ** 2)
    mse_v = np.mean((pred.virial - batch["virial"]) ** 2)
    want = pe / na * mse_e + pf * mse_f + pv / na * mse_v
    assert float(loss) == pytest.approx(want, rel=1e-12)
    assert float(m["rmse"]) == pytest.approx(math.sqrt(want), rel=1e-12)
    assert float(m["rmse_e"]) == pytest.approx(math.sqrt(mse_e) / na, rel=1e-12)
    assert float(m["rmse_v"]) == pytest.approx(math.sqrt(mse_v) / na, rel=1e-12)
    # a system without virial labels: the term is dropped and reported as nan
    loss2, m2 = energy_loss(pred, {**batch, "find_virial": 0.0}, prefs, lr, start)
    assert float(loss2) == pytest.approx(pe / na * mse_e + pf * mse_f, rel=1e-12)
    assert math.isnan(float(m2["rmse_v"]))
    # terms whose prefactors are both zero are not in the loss nor the metrics
    _, m3 = energy_loss(pred, batch, LossPrefs(0.02, 1.0, 1000.0, 1.0, 0.0, 0.0), lr, start)
    assert set(m3) == {"rmse", "rmse_e", "rmse_f"}


@pytest.mark.parametrize("weight_decay,form", [(0.0, "pytorch"), (1e-3, "pytorch"), (0.0, "tensorflow")])
def test_init_state_is_the_optimizers_own_init(weight_decay, form):
    """init_state builds the optimizer state from shapes and zeros (no compile): it must equal what
    ``optimizer.init`` gives, leaf by leaf, in structure, dtype and value."""
    import jax

    from jaxmd_dp.train.step import init_state, make_optimizer

    opt = make_optimizer(exp_decay(1e-3, 1e-8, 100, 1000), weight_decay=weight_decay, form=form)
    params = {"a": {"w": np.full((3, 4), 0.5, np.float32), "b": np.ones(4, np.float64)}, "c": np.arange(5.0)}
    state = init_state(params, opt)
    ref = opt.init(params)
    assert jax.tree_util.tree_structure(state.opt_state) == jax.tree_util.tree_structure(ref)
    for a, b in zip(jax.tree_util.tree_leaves(state.opt_state), jax.tree_util.tree_leaves(ref)):
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(np.asarray(a), np.asarray(b))
    assert int(state.step) == 0 and int(state.first_bad) == -1


def test_adam_tensorflow_form_follows_tf_adam_optimizer():
    """form="tensorflow" is TensorFlow's AdamOptimizer update, written here as TF computes it:
    lr_t = lr·√(1−β₂ᵗ)/(1−β₁ᵗ), w −= lr_t·m/(√v + ε). On gradients far above ε it agrees with the
    PyTorch form; on gradients near ε (here 1e-8) the PyTorch form's steps are several times larger."""
    import jax
    import optax

    from jaxmd_dp.train.step import make_optimizer

    schedule = exp_decay(1e-3, 1e-8, 2, 20)
    rng = np.random.default_rng(0)
    grads = [np.concatenate([rng.normal(size=4), 1e-8 * rng.normal(size=4)]) for _ in range(5)]
    b1, b2, eps = 0.9, 0.999, 1e-8
    w_ref, m, v = np.zeros(8), np.zeros(8), np.zeros(8)
    runs = {}
    for form in ("tensorflow", "pytorch"):
        opt = make_optimizer(schedule, form=form)
        w, state = jax.numpy.zeros(8), opt.init(jax.numpy.zeros(8))
        for g in grads:
            u, state = opt.update(jax.numpy.asarray(g), state, w)
            w = optax.apply_updates(w, u)
        runs[form] = np.asarray(w)
    for t, g in enumerate(grads, start=1):
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        lr_t = float(schedule(t - 1)) * np.sqrt(1 - b2**t) / (1 - b1**t)
        w_ref = w_ref - lr_t * m / (np.sqrt(v) + eps)
    np.testing.assert_allclose(runs["tensorflow"], w_ref, rtol=1e-12, atol=0)
    np.testing.assert_allclose(runs["pytorch"][:4], w_ref[:4], rtol=1e-4)
    assert np.all(np.abs(runs["pytorch"][4:]) > 3 * np.abs(w_ref[4:]))
