"""DPA-1 (se_atten, se_atten_v2) beside DeePMD-kit's numbers (test_se_atten_fixtures): its config section with
DeePMD-kit's keys and defaults, the model's hyper-parameters and files, the physics (forces the derivative, the
energy invariant under rotations and, without the first atom's type in empty slots, permutations; smooth at
rcut), merged frames, and the statistics on the mixed-types list."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from shared_paths import require

from jaxmd_dp.config import config_from_dict, model_config_from_dict
from jaxmd_dp.config.model import SeAttenConfig, SeAttenV2Config
from jaxmd_dp.errors import InputError
from jaxmd_dp.geometry.neighbor import allocate, build
from jaxmd_dp.geometry.stats import sample_stat_frames
from jaxmd_dp.md.neighbors import ModelNeighbors
from jaxmd_dp.model.energy import ModelHyper, Stats, init_params, param_shapes, predict, predict_merged
from jaxmd_dp.model.fitting_mixed import MixedFittingHyper
from jaxmd_dp.model.plan import ExecutionPlan
from jaxmd_dp.model.se_atten import SeAtten, SeAttenV2

SMALL = {"rcut": 4.0, "rcut_smth": 0.5, "sel": 40, "neuron": [4, 8], "axis_neuron": 2, "attn": 6, "tebd_dim": 3}


def model(descriptor: dict, type_map=("O", "H")) -> ModelHyper:
    return ModelHyper.from_deepmd(
        {"type_map": list(type_map), "descriptor": {**SMALL, **descriptor}, "fitting_net": {"neuron": [8, 8]}}
    )


# ------------------------------------------------------------------------------------------------ config
def test_defaults_are_deepmd_kits():
    v1 = model_config_from_dict(
        {"type_map": ["O", "H"], "descriptor": {"type": "se_atten"}, "fitting_net": {}}
    ).descriptor
    v2 = model_config_from_dict(
        {"type_map": ["O", "H"], "descriptor": {"type": "se_atten_v2"}, "fitting_net": {}}
    ).descriptor
    assert isinstance(v1, SeAttenConfig) and isinstance(v2, SeAttenV2Config)
    for d in (v1, v2):
        assert (d.sel, d.rcut, d.rcut_smth, d.neuron, d.axis_neuron, d.tebd_dim) == (
            "auto",
            6.0,
            0.5,
            (10, 20, 40),
            4,
            8,
        )
        assert (d.attn, d.attn_layer, d.attn_dotr, d.scaling_factor, d.normalize, d.temperature) == (
            128, 2, True, 1.0, True, None
        )  # fmt: skip
        assert (d.trainable_ln, d.ln_eps, d.concat_output_tebd, d.use_tebd_bias, d.type_one_side) == (
            True, None, True, False, False
        )  # fmt: skip
    assert (v1.input_mode, v1.smooth, v1.set_davg_zero) == ("concat", False, True)
    assert (v2.input_mode, v2.smooth, v2.set_davg_zero) == ("strip", True, False)
    hyper = ModelHyper.from_config(
        model_config_from_dict({"type_map": ["O", "H"], "descriptor": {"type": "dpa1"}, "fitting_net": {}}), (90,)
    )
    assert isinstance(hyper.descriptor, SeAtten) and hyper.sel == (90,) and hyper.descriptor.ln_eps == 1e-5
    assert isinstance(hyper.fitting, MixedFittingHyper) and hyper.fitting.neuron == (120, 120, 120)


@pytest.mark.parametrize(
    "descriptor,field,value",
    [
        ({"type": "dpa1"}, "type", "se_atten"),
        ({"type": "se_atten", "sel": [10, 30]}, "sel", 40),  # DeePMD-kit reads a list's sum
        ({"type": "se_atten", "stripped_type_embedding": True}, "input_mode", "strip"),
        ({"type": "se_atten", "tebd_input_mode": "strip", "stripped_type_embedding": False}, "input_mode", "concat"),
        ({"type": "se_atten", "smooth_type_embdding": True}, "smooth", True),  # DeePMD-kit's misspelt alias
        ({"type": "se_atten_v2", "n_axis_neuron": 2}, "axis_neuron", 2),
    ],
)
def test_keys_as_deepmd_kit_reads_them(descriptor, field, value):
    d = model_config_from_dict({"type_map": ["O", "H"], "descriptor": descriptor, "fitting_net": {}}).descriptor
    assert getattr(d, field) == value


@pytest.mark.parametrize(
    "descriptor,key,fragment",
    [
        ({"type": "se_atten", "attn_mask": True}, "attn_mask", "only false"),
        ({"type": "se_atten_v2", "lmax": 2}, "lmax", "only 1"),
        ({"type": "se_atten", "use_econf_tebd": True}, "use_econf_tebd", "only false"),
        ({"type": "se_atten", "trainable": False}, "trainable", "only true"),
        ({"type": "se_atten", "env_protection": 0.1}, "env_protection", "only 0.0"),
        ({"type": "se_atten", "tebd_input_mode": "sum"}, "tebd_input_mode", "'strip'"),
        ({"type": "se_atten_v2", "tebd_input_mode": "concat"}, "tebd_input_mode", "not known"),
        ({"type": "se_atten_v2", "smooth_type_embedding": False}, "smooth_type_embedding", "not known"),
        ({"type": "se_atten", "exclude_types": [[0, 1, 2]]}, "exclude_types", "pair"),
        ({"type": "se_atten", "sel": 0}, "sel", "> 0"),
        ({"type": "se_atten", "attn_layer": -1}, "attn_layer", ">= 0"),
        ({"type": "se_e2_a", "attn": 8}, "attn", "not known"),
    ],
)
def test_refused_with_the_key(descriptor, key, fragment):
    with pytest.raises(InputError) as info:
        model_config_from_dict({"type_map": ["O", "H"], "descriptor": descriptor, "fitting_net": {}})
    msg = str(info.value)
    assert f"model.descriptor.{key}" in msg and fragment in msg and "\n" not in msg, msg


def test_overrides_reach_the_section_of_the_files_type(tmp_path):
    bench = require("water").parents[1] / "bench" / "water_se_atten_v2.json"
    from jaxmd_dp.config import load_config

    cfg = load_config(bench, ["model.descriptor.attn_layer=0", "model.descriptor.tebd_dim=4"])
    assert isinstance(cfg.model.descriptor, SeAttenV2Config)
    assert (cfg.model.descriptor.attn_layer, cfg.model.descriptor.tebd_dim, cfg.model.descriptor.sel) == (0, 4, 120)
    assert config_from_dict(cfg.to_dict()) == cfg  # out.json's dict reads back


def test_every_fixed_key_accepts_its_default_only():
    """The se_atten sections' keys of DeePMD-kit features we lack, as tests/test_config_keys.py checks the rest."""
    for cls, kind in ((SeAttenConfig, "se_atten"), (SeAttenV2Config, "se_atten_v2")):
        for key, fixed in cls._fixed.items():
            base = {"type_map": ["O", "H"], "descriptor": {"type": kind}, "fitting_net": {}}
            model_config_from_dict({**base, "descriptor": {"type": kind, key: fixed.default}})
            refused = 0
            for probe in (True, False, 0, 1, 2, 0.5, "x", [[0, 1]], None):
                if fixed.ok(probe):
                    continue
                with pytest.raises(InputError, match=f"model.descriptor.{key}"):
                    model_config_from_dict({**base, "descriptor": {"type": kind, key: probe}})
                refused += 1
            assert refused, key


# ------------------------------------------------------------------------------------------------ the model
@pytest.mark.parametrize("descriptor", [{"type": "se_atten_v2"}, {"type": "se_atten", "exclude_types": [[0, 1]]}])
def test_hyper_round_trips_and_sizes_its_weights(descriptor):
    hyper = model(descriptor)
    assert hyper.descriptor.mixed_types and hyper.sel == (40,) and hyper.nnei == 40
    assert ModelHyper.from_dict(hyper.to_dict()) == hyper
    assert hyper.dim_descriptor == 8 * 2 + 3
    shapes = param_shapes(hyper)
    assert shapes["fitting"]["fit_0"]["layer_0"]["matrix"].shape == (19, 8)
    assert set(shapes["descriptor"]) >= {"type_embedding", "embedding", "attention_0", "attention_1"}
    f32 = hyper.replace(precision="float32", fit_precision="float32")
    assert f32.descriptor.precision == "float32" and type(f32.descriptor) is type(hyper.descriptor)
    with pytest.raises(ValueError, match="se_atten_v2"):
        SeAttenV2(**{**vars(model({"type": "se_atten"}).descriptor), "tebd_input_mode": "concat"})


def _water(nframes=2):
    w = require("water/data_3")
    coord = np.load(w / "set.000" / "coord.npy")[:nframes].reshape(nframes, -1, 3).astype(np.float64)
    box = np.load(w / "set.000" / "box.npy")[:nframes].reshape(nframes, 3, 3).astype(np.float64)
    atype = np.loadtxt(w / "type.raw", dtype=np.int64)
    return coord, box, atype


@functools.cache
def _setup(kind: str):
    descriptor = {
        "v2": {"type": "se_atten_v2", "set_davg_zero": False},
        "concat": {"type": "se_atten", "set_davg_zero": False, "attn_dotr": False},
        "strip_sharp": {"type": "se_atten", "tebd_input_mode": "strip", "attn_layer": 1},  # no smoothing
    }[kind]
    hyper = model(descriptor)
    params = init_params(hyper, seed=3)
    rng = np.random.default_rng(0)
    shape = hyper.descriptor.stat_shape(hyper.ntypes)
    davg = np.zeros(shape)
    davg[..., 0] = rng.uniform(0.1, 0.3, (hyper.ntypes, 1))
    dstd = np.broadcast_to(rng.uniform(0.5, 1.5, (hyper.ntypes, 1, 1)) * [1.0, 2.0, 2.0, 2.0], shape).copy()
    stats = Stats(davg, dstd, np.array([-90.0, -180.0]))
    return hyper, params, stats


_jit_predict = jax.jit(predict, static_argnums=0, static_argnames="plan")


def _predict(hyper, params, stats, coord, box, atype, spec=None):
    spec = spec or allocate(coord, box, hyper.rcut, hyper.sel, method="brute")
    nl = build(spec, coord, box, atype)
    run = predict if isinstance(coord, jax.core.Tracer) else _jit_predict
    return run(hyper, params, stats, jnp.asarray(coord), jnp.asarray(box), jnp.asarray(atype), nl)


@functools.cache
def _energy_fn(kind: str):
    """jitted energy of coordinates and box of water's first frame (its spec, brute force)."""
    hyper, params, stats = _setup(kind)
    coord, box, atype = _water(1)
    spec = allocate(coord, box, hyper.rcut, hyper.sel, method="brute")
    return jax.jit(lambda c, b: _predict(hyper, params, stats, c, b, atype, spec).energy[0])


@pytest.mark.parametrize("kind", ["v2", "concat"])
def test_forces_and_virial_are_the_derivatives(kind):
    hyper, params, stats = _setup(kind)
    coord, box, atype = _water(1)
    out = _predict(hyper, params, stats, coord, box, atype)
    energy = _energy_fn(kind)
    h = 1e-5
    for i, k in ((0, 0), (5, 1), (100, 2)):
        cp, cm = coord.copy(), coord.copy()
        cp[0, i, k] += h
        cm[0, i, k] -= h
        fd = -(float(energy(cp, box)) - float(energy(cm, box))) / (2 * h)
        assert abs(fd - float(out.force[0, i, k])) < 1e-6 * max(1.0, abs(fd))
    for a, b in ((0, 1), (2, 2)):
        eps = np.zeros((3, 3))
        eps[a, b] = h
        ep = float(energy(coord @ (np.eye(3) + eps), box @ (np.eye(3) + eps)))
        em = float(energy(coord @ (np.eye(3) - eps), box @ (np.eye(3) - eps)))
        scale = max(1.0, float(jnp.abs(out.virial).max()))
        assert abs(-(ep - em) / (2 * h) - float(out.virial[0, 3 * b + a])) < 1e-6 * scale


def test_energy_invariant_under_rotation_and_permutation():
    """se_atten_v2: no empty slot reads the first atom's type (strip with smoothing), so relabelling the
    atoms changes nothing; rotating atoms and cell neither."""
    hyper, params, stats = _setup("v2")
    coord, box, atype = _water(1)
    out = _predict(hyper, params, stats, coord, box, atype)
    q, _ = np.linalg.qr(np.random.default_rng(1).normal(size=(3, 3)))
    rot = _predict(hyper, params, stats, coord @ q, box @ q, atype)
    np.testing.assert_allclose(rot.energy, out.energy, rtol=1e-12)
    np.testing.assert_allclose(rot.force, np.asarray(out.force) @ q, atol=1e-10)
    perm = np.random.default_rng(2).permutation(atype.size)
    per = _predict(hyper, params, stats, coord[:, perm], box, atype[perm])
    np.testing.assert_allclose(per.energy, out.energy, rtol=1e-12)
    np.testing.assert_allclose(per.atom_energy, np.asarray(out.atom_energy)[:, perm], rtol=1e-10, atol=1e-12)


def test_concat_empty_slots_read_the_first_atoms_type():
    """se_atten with concat and davg ≠ 0: as DeePMD-kit, an empty slot feeds its embedding net the type of the
    frame's first atom, so which atom comes first matters (and merged frames are refused)."""
    hyper, params, stats = _setup("concat")
    coord, box, atype = _water(1)
    out = _predict(hyper, params, stats, coord, box, atype)
    first_h = np.flatnonzero(atype == 1)[0]
    perm = np.r_[first_h, np.delete(np.arange(atype.size), first_h)]  # an H first
    per = _predict(hyper, params, stats, coord[:, perm], box, atype[perm])
    assert abs(float(per.energy[0] - out.energy[0])) > 1e-8
    assert not hyper.descriptor.fast_paths.merge and _setup("v2")[0].descriptor.fast_paths.merge


def test_merged_frames_give_each_frames_numbers():
    hyper, params, stats = _setup("v2")
    coord, box, atype = _water(2)
    out = _predict(hyper, params, stats, coord, box, atype)
    n = atype.size
    merged_atype = np.concatenate([atype, atype, [-1, -1]])[None]
    merged_coord = np.concatenate([coord[0], coord[1], np.zeros((2, 3))])[None]
    frame = np.r_[np.zeros(n, int), np.ones(n, int), [1, 1]]
    # each atom's neighbours within its own frame, indices into the merged list
    nl0 = build(allocate(coord, box, hyper.rcut, hyper.sel, method="brute"), coord, box, atype)
    idx = np.concatenate(
        [np.asarray(nl0.idx[0]), np.where(nl0.idx[1] >= 0, nl0.idx[1] + n, -1), -np.ones((2, 40), int)]
    )
    shift = np.concatenate([np.asarray(nl0.shift[0]), np.asarray(nl0.shift[1]), np.zeros((2, 40, 3))])

    nl = ModelNeighbors(jnp.asarray(idx[None]), jnp.asarray(shift[None]))
    got = jax.jit(predict_merged, static_argnums=(0, 8))(
        hyper,
        params,
        stats,
        jnp.asarray(merged_coord),
        jnp.asarray(box),
        jnp.asarray(merged_atype),
        jnp.asarray(frame),
        nl,
        2,
    )
    np.testing.assert_allclose(got.energy, out.energy, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(got.force[0, : 2 * n]).reshape(2, n, 3), out.force, atol=1e-10)
    np.testing.assert_allclose(got.virial, out.virial, rtol=1e-9, atol=1e-10)


def test_energy_smooth_across_rcut():
    """se_atten_v2 (smoothing on): a neighbour crossing rcut changes the energy continuously."""
    hyper, params, stats = _setup("v2")
    coord, box, atype = _water(1)
    c = coord[:, :2].copy()  # two atoms alone in a big box: move the second across rcut
    big = np.eye(3)[None] * 30.0
    direction = np.array([1.0, 0.0, 0.0])
    c[0, 1] = c[0, 0] + direction * (hyper.rcut - 1e-7)
    e_in = _predict(hyper, params, stats, c, big, atype[:2]).energy
    c[0, 1] = c[0, 0] + direction * (hyper.rcut + 1e-7)
    e_out = _predict(hyper, params, stats, c, big, atype[:2]).energy
    assert abs(float(e_in[0] - e_out[0])) < 1e-9


def test_statistics_of_the_mixed_list():
    """davg/dstd per centre type over the nearest sel neighbours of any type, as DeePMD-kit's EnvMatStatSe: the
    sums over candidates within rcut equal those over the built list's slots (no atom over sel), and the
    scan's sums stand in for a pass over the frames."""
    from jaxmd_dp.data.load import load_systems
    from jaxmd_dp.geometry.neighbor_stat import neighbor_stat
    from jaxmd_dp.geometry.stats import sample_stat_indices

    hyper = model({"type": "se_atten_v2", "sel": 60})
    systems = load_systems([str(require("water/data_3"))], ["O", "H"])
    frames = sample_stat_frames(systems, 2, seed=1, batch_size=1)
    davg, dstd = hyper.descriptor.env_stats(frames, 2, 0.01)
    idx = sample_stat_indices([s.nframes for s in systems], [1], 2, seed=1)
    scan = neighbor_stat(systems, hyper.rcut, 2, rcut_smth=hyper.rcut_smth, sum_frames=idx)
    assert scan.max_nbor_any_per_system.shape == (1, 1) and int(scan.max_nbor_any_per_system[0, 0]) <= 60
    assert int(scan.max_nbor_any_per_system[0, 0]) > int(scan.max_nbor_per_system.max())  # any type: more
    # the ranked profile: rank r's most neighbours over the frames, from every frame's built list
    s3 = systems[0]
    counts = np.asarray(
        build(allocate(s3.coord, s3.box, 4.0, (60,), method="brute"), s3.coord, s3.box, s3.atype).nneigh
    )
    ranked = (-np.sort(-counts.sum(axis=-1), axis=-1)).max(axis=0)
    np.testing.assert_array_equal(scan.ranked_nbor_per_system[0], ranked)
    assert ranked[0] == scan.max_nbor_any_per_system[0, 0] and np.all(np.diff(ranked) <= 0) and ranked[-1] < ranked[0]
    d2, s2 = hyper.descriptor.env_stats(frames, 2, 0.01, scan=scan)
    np.testing.assert_allclose(d2, davg, rtol=1e-12)
    np.testing.assert_allclose(s2, dstd, rtol=1e-12)
    assert np.all(davg[..., 1:] == 0) and np.all(davg[:, :1] == davg) and np.all(dstd[:, :1] == dstd)
    # with sel below the most neighbours, only the nearest sel of any type count: the pass over the built lists
    few = model({"type": "se_atten_v2", "sel": 24}).descriptor
    d4, _ = few.env_stats(frames, 2, 0.01, scan=scan)  # the scan's sums would count every neighbour: not used
    coord = np.concatenate([f["coord"] for f in frames])
    box = np.concatenate([f["box"] for f in frames])
    nl = build(allocate(coord, box, 4.0, (24,), method="brute"), coord, box, frames[0]["atype"])
    from jaxmd_dp.geometry.env_mat import env_rows, pair_vectors

    rows = np.asarray(env_rows(pair_vectors(coord, box, nl.idx, nl.shift), nl.idx >= 0, 4.0, 0.5))
    for t in (0, 1):
        s_t = rows[:, frames[0]["atype"] == t, :, 0]
        assert d4[t, 0, 0] == pytest.approx(s_t.mean(), rel=1e-12)


@pytest.mark.parametrize("kind", ["concat", "strip_sharp"])
def test_cut_list_changes_no_number(kind):
    """The list cut to the slots the frame fills: the cut slots' share (empty rows whose embedding reads the
    first atom's type, here) is added from the empty rows, the numbers unchanged."""
    hyper, params, stats = _setup(kind)
    coord, box, atype = _water(1)
    out = _predict(hyper, params, stats, coord, box, atype)
    nl = build(allocate(coord, box, hyper.rcut, (36,), method="brute"), coord, box, atype)
    assert int(np.asarray(nl.nneigh).max()) <= 36
    cut = _jit_predict(hyper, params, stats, coord, box, atype, nl, plan=ExecutionPlan(keep=(36,)))
    for key in ("energy", "force", "virial", "atom_energy"):
        np.testing.assert_allclose(getattr(cut, key), getattr(out, key), rtol=1e-10, atol=1e-10, err_msg=key)


# ------------------------------------------------------------------------------------------------ the training path
def _loss_and_grad(hyper, stats, coord, box, atype, nl, plan):
    """Energy, forces, virial and the weight gradient of a loss on energies and forces (the training step's
    derivatives: forces through the coordinates, then the weights)."""

    def loss(p):
        out = predict(hyper, p, stats, jnp.asarray(coord), jnp.asarray(box), jnp.asarray(atype), nl, plan=plan)
        return jnp.sum(out.energy**2) * 1e-6 + jnp.sum((out.force - 0.1) ** 2), out

    return jax.jit(jax.value_and_grad(loss, has_aux=True))


def _compare(got, want):
    (l1, o1), g1 = got
    (l0, o0), g0 = want
    for key in ("energy", "force", "virial", "atom_energy"):
        np.testing.assert_allclose(getattr(o1, key), getattr(o0, key), rtol=1e-10, atol=1e-10, err_msg=key)
    for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(g0), jax.tree_util.tree_leaves(g1)):
        np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-12 * float(np.abs(a).max()), err_msg=str(path))


@functools.cache
def _exact_v2():
    """v2 on two water frames, the full list: (values and weight gradient of the plain path), the inputs."""
    hyper, params, stats = _setup("v2")
    coord, box, atype = _water(2)
    nl = build(allocate(coord, box, hyper.rcut, hyper.sel, method="brute"), coord, box, atype)
    return _loss_and_grad(hyper, stats, coord, box, atype, nl, ExecutionPlan())(params), (coord, box, atype)


def test_training_path_in_tiers_changes_no_number():
    """The training step's path (the list cut to the slots the frames fill, the embedding net's slope, the
    written-out products) with the atoms in tiers of fewer slots (ExecutionPlan.tiers, sorted by their
    neighbour count; tier_sizes from the frames' ranked counts): the plain path's energies, forces, virial
    and weight gradient, in float64. And tiers that leave an atom out of its slots do change them."""
    from jaxmd_dp.model.plan import tier_sizes

    hyper, params, stats = _setup("v2")
    want, (coord, box, atype) = _exact_v2()
    counts = np.asarray(build(allocate(coord, box, hyper.rcut, hyper.sel, method="brute"), coord, box, atype).nneigh)
    ranked = (-np.sort(-counts.sum(axis=-1), axis=-1)).max(axis=0)
    keep = (int(ranked[0]),)  # the slots the frames fill
    assert keep[0] < hyper.nnei
    nl = build(allocate(coord, box, hyper.rcut, keep, method="brute"), coord, box, atype)
    tiers = tier_sizes(hyper, ranked, keep, most=3)
    assert tiers is not None and len(tiers) >= 2 and sum(a for a, _ in tiers) == atype.size
    start = np.cumsum([0] + [a for a, _ in tiers])
    assert all(ranked[start[g]] <= k for g, (_, k) in enumerate(tiers))  # every atom within its tier's slots
    for plan in (ExecutionPlan(keep=keep), ExecutionPlan(keep=keep, tiers=tiers)):
        _compare(_loss_and_grad(hyper, stats, coord, box, atype, nl, plan)(params), want)
    short = ((tiers[0][0], keep[0]), (atype.size - tiers[0][0], 8))  # the second tier's atoms hold more
    (_, bad), _ = _loss_and_grad(hyper, stats, coord, box, atype, nl, ExecutionPlan(keep=keep, tiers=short))(params)
    assert float(np.abs(np.asarray(bad.force) - np.asarray(want[0][1].force)).max()) > 1e-6


def test_tier_sizes():
    """Tiers of whole multiples of 8 atoms and slots, every rank within its tier's slots, the first tier the
    list's; none for a profile that one tier serves as well, nor for se_e2_a."""
    from jaxmd_dp.model.plan import tier_sizes

    hyper = model({"type": "se_atten_v2", "sel": 120})
    ranked = np.concatenate([[108, 104, 101], np.linspace(100, 75, 189).astype(int)])
    for most in (2, 3, 4):
        tiers = tier_sizes(hyper, ranked, (112,), most)
        assert 2 <= len(tiers) <= most and tiers[0][1] == 112 and sum(a for a, _ in tiers) == 192
        start = np.cumsum([0] + [a for a, _ in tiers])
        assert all(a % 8 == 0 and k % 8 == 0 for a, k in tiers)
        assert all(ranked[start[g] :].max() <= k for g, (_, k) in enumerate(tiers))
        assert [k for _, k in tiers] == sorted({k for _, k in tiers}, reverse=True)
    assert tier_sizes(hyper, np.full(192, 110), (112,)) is None  # every atom fills the slots
    assert tier_sizes(hyper, ranked, (112,), most=1) is None
    se_e2_a = ModelHyper.from_deepmd(
        {"type_map": ["O", "H"], "descriptor": {"type": "se_e2_a", "sel": [46, 92], "rcut": 6.0}, "fitting_net": {}}
    )
    assert tier_sizes(se_e2_a, ranked, (112,)) is None
