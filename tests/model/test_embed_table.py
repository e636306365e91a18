"""The training step's shortcuts keep the model's numbers:

- the table's ``outer`` (b ⊗ R, element-wise transposes) has the derivatives of the plain product;
- the tabulated embedding (``training.embedding_table``) interpolates G(s) to ~1e-11 and its slope to
  ~1e-9 at 64 nodes, and predictions and the force-loss weight gradient with it match the exact nets on
  DeePMD-kit's fixture.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from fixture_models import load_fixture, max_rel

from jaxmd_dp.geometry.neighbor import allocate, build
from jaxmd_dp.model.energy import Stats, predict
from jaxmd_dp.model.fast.embed_table import outer, quintic_basis, table_env_product
from jaxmd_dp.model.fast.pair_pack import pair_counts
from jaxmd_dp.model.nets import EmbeddingNet
from jaxmd_dp.model.plan import ExecutionPlan
from jaxmd_dp.model.se_e2_a import env_product

RNG = np.random.default_rng(3)
R = jnp.asarray(RNG.normal(size=(1, 3, 5, 4)))  # (nf, n, slots, 4)
B = jnp.asarray(RNG.normal(size=(3, 5, 6)))  # Hermite weights per pair
W = jnp.asarray(RNG.normal(size=(3, 5, 6, 4)))  # the node tables' stand-in


def _table_energy(prod, b, r, w):
    return jnp.sum(jnp.tanh(prod(b * jnp.sum(r, -1, keepdims=True), r) * w))  # b depends on R, as in the model


OUTER_DERIVATIVES = {
    "grad": lambda p: jax.grad(_table_energy, (1, 2))(p, B, R[0], W),
    "jvp": lambda p: jax.jvp(lambda b, r: _table_energy(p, b, r, W), (B, R[0]), (B[..., ::-1], R[0] ** 2))[1],
    # the training step's case: the table's gradient of a loss on the R-gradient ("forces")
    "grad_of_force_loss": lambda p: jax.grad(lambda w: jnp.sum(jax.grad(_table_energy, 2)(p, B, R[0], w) ** 2))(W),
}


@pytest.mark.parametrize("name", sorted(OUTER_DERIVATIVES))
def test_outer_derivatives_equal_plain_product(name):
    plain = lambda b, r: b[..., :, None] * r[..., None, :]  # noqa: E731
    got, want = OUTER_DERIVATIVES[name](outer), OUTER_DERIVATIVES[name](plain)
    for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_quintic_basis_interpolates_quintics_exactly():
    """The quintic Hermite interpolant reproduces any quintic from its end values, slopes and curvatures."""
    c = RNG.normal(size=6)
    f = np.polynomial.Polynomial(c)
    df, d2f = f.deriv(), f.deriv(2)
    a, h = 0.3, 0.7
    t = jnp.linspace(0.0, 1.0, 11)
    ends = jnp.array([f(a), h * df(a), h * h * d2f(a), f(a + h), h * df(a + h), h * h * d2f(a + h)])
    np.testing.assert_allclose(quintic_basis(t) @ ends, f(a + h * np.asarray(t)), rtol=1e-13, atol=1e-13)
    # its derivative (a custom JVP in factored form) interpolates the quintic's derivative
    slope = jax.vmap(jax.jacfwd(lambda x: quintic_basis(x) @ ends))(t)
    np.testing.assert_allclose(slope, h * df(a + h * np.asarray(t)), rtol=1e-12, atol=1e-12)
    dt = jnp.asarray(RNG.normal(size=t.shape))
    _, vjp = jax.vjp(quintic_basis, t)
    np.testing.assert_allclose(vjp(jnp.ones((11, 6)) * ends)[0], slope, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(jax.jvp(quintic_basis, (t,), (dt,))[1] @ ends, slope * dt, rtol=1e-12, atol=1e-12)


@pytest.fixture(scope="module")
def net():
    """A DeePMD-sized embedding net (25, 50, 100) with DeePMD-kit's initialisation, and its weights."""
    module = EmbeddingNet((25, 50, 100), dtype=jnp.float64)
    params = module.init(jax.random.PRNGKey(0), jnp.zeros((1, 1)))
    return module, params


def test_net_tangent_is_its_derivative(net):
    module, params = net
    s = jnp.linspace(-1.0, 6.0, 9)[:, None]
    value, slope = module.apply(params, s, jnp.ones_like(s))
    want = jax.jvp(lambda x: module.apply(params, x), (s,), (jnp.ones_like(s),))
    np.testing.assert_allclose(value, want[0], rtol=1e-14)
    np.testing.assert_allclose(slope, want[1], rtol=1e-12, atol=1e-14)


def _tabulated(module, params, s, nodes):
    """G(s) (n, M1) through table_env_product: one slot per atom holding R = (s, 1, 0, 0), so row 1 of
    Rᵀ·G is the interpolated G(s) itself."""
    R = jnp.stack([s, jnp.ones_like(s), jnp.zeros_like(s), jnp.zeros_like(s)], -1)[None, :, None, :]
    T = table_env_product(lambda *a: module.apply(params, *a), R, jnp.ones(R.shape[:3], bool), nodes)
    return T[0, :, 1, :]


def test_table_error_falls_as_h6(net):
    """G and dG/ds from the table against the net on 2,000 random s in DeePMD's normalised range; the
    value's error shrinks ~64× per halving of the node spacing (quintic Hermite, h⁶), the slope's ~32×."""
    module, params = net
    s = jnp.asarray(np.sort(RNG.uniform(-1.0, 6.0, 2000)))
    ones = jnp.ones_like(s)
    exact, dexact = jax.jvp(lambda x: module.apply(params, x[:, None]), (s,), (ones,))  # row i depends on s_i only
    errors = {}
    for nodes in (32, 64, 128):
        got, dgot = jax.jvp(lambda x: _tabulated(module, params, x, nodes), (s,), (ones,))
        errors[nodes] = (max_rel(got, exact), max_rel(dgot, dexact))
    assert errors[64][0] < 1e-9 and errors[64][1] < 1e-7, errors
    for coarse, fine in ((32, 64), (64, 128)):
        assert 32 < errors[coarse][0] / errors[fine][0] < 128 and 16 < errors[coarse][1] / errors[fine][1] < 64, errors


def test_table_leaves_empty_slots_out_and_sums_each_atoms_pairs(net):
    """Masked slots add nothing, whatever they hold; an atom's real slots add up: Σ_j R_jᵀ G(s_j)."""
    module, params = net
    R = jnp.asarray(RNG.normal(size=(2, 3, 5, 4)))
    mask = jnp.asarray(RNG.uniform(size=(2, 3, 5)) < 0.6)
    got = table_env_product(lambda *a: module.apply(params, *a), R, mask, 128)
    G = module.apply(params, R[..., :1])
    want = env_product(jnp.where(mask[..., None], R, 0), G)
    assert max_rel(got, want) < 1e-10
    shifted = table_env_product(lambda *a: module.apply(params, *a), jnp.where(mask[..., None], R, 7.0), mask, 128)
    np.testing.assert_array_equal(shifted, got)
    np.testing.assert_array_equal(table_env_product(lambda *a: module.apply(params, *a), R, mask & False, 64), 0)


def test_table_needs_enough_nodes(net):
    module, params = net
    with pytest.raises(ValueError, match="16 to 1024 nodes"):
        _tabulated(module, params, jnp.zeros(3), 8)


@pytest.fixture(scope="module")
def cu_case():
    hyper, params, stats, p = load_fixture("cu_virial")
    spec = allocate(p["coord"], p["box"], hyper.rcut, hyper.sel)
    coord, box, atype = jnp.asarray(p["coord"][:1]), jnp.asarray(p["box"][:1]), jnp.asarray(p["atype"])
    nl = build(spec, coord, box, atype, order="any")
    sizes = tuple(int(c) for c in np.asarray(pair_counts(nl.idx >= 0, hyper.sel)).max(axis=0))
    return hyper, params, Stats(*stats), spec, sizes, coord, box, atype


def test_table_predictions_and_weight_gradient_match_exact(cu_case):
    """Energies, forces, virials and the weight gradient of a force + energy + virial loss with the nets
    tabulated on 64 nodes against the exact packed nets (DeePMD-kit's Cu fixture weights). The table needs
    no packed blocks: with and without them it gives the same numbers."""
    hyper, params, stats, spec, sizes, coord, box, atype = cu_case

    def run(params, table, pack=sizes):
        nl = build(spec, coord, box, atype, order="any")
        return predict(hyper, params, stats, coord, box, atype, nl, plan=ExecutionPlan(pack=pack, table=table))

    def loss(params, table):
        pr = run(params, table)
        return jnp.sum(pr.force**2) + 1e-3 * jnp.sum(pr.energy**2) + jnp.sum(pr.virial**2)

    exact, tab = jax.jit(lambda q: run(q, 0))(params), jax.jit(lambda q: run(q, 64))(params)
    unpacked = jax.jit(lambda q: run(q, 64, None))(params)
    for key in ("energy", "force", "virial"):
        err = max_rel(getattr(tab, key), getattr(exact, key))
        assert 0 < err <= 1e-8, f"{key}: {err:.2e}"  # > 0: the table was used
        np.testing.assert_array_equal(getattr(unpacked, key), getattr(tab, key))
    g_exact = jax.jit(jax.grad(lambda q: loss(q, 0)))(params)
    g_tab = jax.jit(jax.grad(lambda q: loss(q, 64)))(params)
    for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(g_tab), jax.tree_util.tree_leaves(g_exact)):
        assert max_rel(a, b) <= 1e-6, jax.tree_util.keystr(path)
