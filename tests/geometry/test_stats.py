"""Data statistics (jaxmd_dp.geometry.stats) against an independent numpy computation and against
DeePMD-kit's own davg / dstd / out_bias stored in the reference fixtures."""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).absolute().parents[1]))
from fixture_models import fixture_dir  # noqa: E402
from shared_paths import require  # noqa: E402

from jaxmd_dp.cli.convert_deepmd import hyper_from_deepmd, load_state_dict  # noqa: E402
from jaxmd_dp.data.sampler import DataSampler, make_batch  # noqa: E402
from jaxmd_dp.data.system import System, load_system  # noqa: E402
from jaxmd_dp.geometry.stats import (  # noqa: E402
    energy_bias,
    env_mat_stats,
    env_mat_sums,
    sample_stat_frames,
    stats_from_sums,
)
from jaxmd_dp.model.energy import ModelHyper  # noqa: E402

WATER = ("O", "H")


def se_a_hyper(type_map, sel, rcut, rcut_smth) -> ModelHyper:
    """An se_e2_a model of these neighbour-list needs, DeePMD-kit's defaults for the rest."""
    return ModelHyper.from_deepmd(
        {
            "type_map": list(type_map),
            "fitting_net": {},
            "descriptor": {"type": "se_e2_a", "sel": list(sel), "rcut": rcut, "rcut_smth": rcut_smth},
        }
    )


# ----------------------------------------------------------------------------- numpy reference
def ref_switch(r, rcut_smth, rcut):
    u = (np.clip(r, rcut_smth, rcut) - rcut_smth) / (rcut - rcut_smth)
    return u**3 * (-6 * u**2 + 15 * u - 10) + 1


def ref_neighbours(coord, box, atype, i, rcut):
    """Brute force: every image of every atom within rcut of atom i, sorted by distance.
    Returns d (n, 3) = r_j − r_i, r (n,), neighbour types (n,)."""
    na = coord.shape[0]
    if box is None:
        offs = np.zeros((1, 3))
        pos = coord[None]
    else:
        vol = abs(np.linalg.det(box))
        widths = vol / np.linalg.norm(np.cross(box[[1, 2, 0]], box[[2, 0, 1]]), axis=1)
        frac = coord @ np.linalg.inv(box)
        wrapped = (frac - np.floor(frac)) @ box
        n = [int(np.ceil(rcut / w)) + 1 for w in widths]
        offs = np.array(list(itertools.product(*[range(-k, k + 1) for k in n])), dtype=float)
        pos = wrapped[None] + (offs @ box)[:, None, :]
        coord = wrapped
    d = (pos - coord[i]).reshape(-1, 3)
    j = np.tile(np.arange(na), len(offs))
    is_self = (j == i) & np.repeat(np.all(offs == 0, axis=1), na)
    r = np.linalg.norm(d, axis=1)
    keep = (r < rcut) & ~is_self & (atype[j] >= 0)
    order = np.argsort(r[keep], kind="stable")
    return d[keep][order], r[keep][order], atype[j][keep][order]


def ref_env_matrix(coord, box, atype, rcut, rcut_smth, sel):
    """(nf, natoms, sum(sel), 4) DeePMD rows w·[1/r, x/r², y/r², z/r²], empty slots 0.
    DeePMD-kit's rule: the sum(sel) nearest overall, then the nearest sel[t] of each type."""
    nf, na = coord.shape[:2]
    nnei = sum(sel)
    out = np.zeros((nf, na, nnei, 4))
    for f in range(nf):
        for i in range(na):
            if atype[i] < 0:
                continue
            d, r, t = ref_neighbours(coord[f], None if box is None else box[f], atype, i, rcut)
            d, r, t = d[:nnei], r[:nnei], t[:nnei]
            col = 0
            for ty, s in enumerate(sel):
                m = np.flatnonzero(t == ty)[:s]
                w = ref_switch(r[m], rcut_smth, rcut)
                out[f, i, col : col + len(m), 0] = w / r[m]
                out[f, i, col : col + len(m), 1:] = (w / r[m] ** 2)[:, None] * d[m]
                col += s
    return out


def ref_stats(batches, hyper, protect=0.01):
    """davg, dstd from the full padded environment matrices (np.mean / np.std per centre type)."""
    per_type = {t: [] for t in range(hyper.ntypes)}
    for b in batches:
        box = b["box"] if b.get("pbc", True) else None
        env = ref_env_matrix(b["coord"], box, b["atype"], hyper.rcut, hyper.rcut_smth, hyper.sel)
        for t in range(hyper.ntypes):
            per_type[t].append(env[:, b["atype"] == t].reshape(-1, 4))
    davg = np.zeros((hyper.ntypes, hyper.nnei, 4))
    dstd = np.zeros((hyper.ntypes, hyper.nnei, 4))
    for t, rows in per_type.items():
        rows = np.concatenate(rows)
        if rows.size == 0:
            dstd[t] = 0.1
            continue
        davg[t, :, 0] = rows[:, 0].mean()
        dstd[t, :, 0] = max(rows[:, 0].std(), protect)
        dstd[t, :, 1:] = max(rows[:, 1:].std(), protect)
    return davg, dstd


def ref_counts(coord, box, atype, rcut, ntypes):
    """(natoms, ntypes) neighbours of each type within rcut, frame-wise max."""
    out = np.zeros((coord.shape[1], ntypes), int)
    for f in range(coord.shape[0]):
        for i in range(coord.shape[1]):
            if atype[i] >= 0:
                _, _, t = ref_neighbours(coord[f], None if box is None else box[f], atype, i, rcut)
                out[i] = np.maximum(out[i], np.bincount(t, minlength=ntypes))
    return out


# ----------------------------------------------------------------------------- synthetic frames
def random_coords(rng, nf, na, box, dmin=0.9):
    """Frames of na atoms spread over ``box`` (or a 5 Å cube), no two closer than dmin (min image);
    some atoms shifted by whole cell vectors (unwrapped coordinates)."""
    cell = box if box is not None else np.eye(3) * 5.0
    frames = []
    for _ in range(nf):
        pts = []
        while len(pts) < na:
            p = rng.random(3)
            ok = True
            for q in pts:
                df = p - q
                if box is not None:
                    df -= np.round(df)
                if np.linalg.norm(df @ cell) < dmin:
                    ok = False
                    break
            if ok:
                pts.append(p)
        frac = np.array(pts)
        if box is not None:
            frac = frac + rng.integers(-1, 2, size=frac.shape) * (rng.random((na, 1)) < 0.3)
        frames.append(frac @ cell)
    return np.array(frames)


def synthetic_batches():
    """Three batches: a small triclinic periodic cell (rcut > half the cell), a second periodic
    cell with a padding atom (type −1), and a non-periodic cluster; two types."""
    rng = np.random.default_rng(7)
    box1 = np.array([[6.5, 0.0, 0.0], [1.2, 6.8, 0.0], [-0.7, 0.9, 7.1]])
    t1 = np.array([0, 1, 1, 0, 1, 1, 0, 1, 1, 0, 1, 1, 1, 0], np.int32)
    c1 = random_coords(rng, 3, len(t1), box1)
    box2 = np.diag([7.5, 7.0, 8.0])
    t2 = np.array([1, 1, 0, 1, -1, 1, 0, 1, 1], np.int32)
    c2 = random_coords(rng, 2, len(t2), box2)
    t3 = np.array([0, 1, 1, 1, 0, 1], np.int32)
    c3 = random_coords(rng, 2, len(t3), None)
    e = lambda nf: rng.normal(-50.0, 3.0, nf)  # noqa: E731
    return [
        {"coord": c1, "box": np.repeat(box1[None], 3, 0), "atype": t1, "pbc": True, "energy": e(3), "find_energy": 1.0},
        {"coord": c2, "box": np.repeat(box2[None], 2, 0), "atype": t2, "pbc": True, "energy": e(2), "find_energy": 1.0},
        {"coord": c3, "box": np.zeros((2, 3, 3)), "atype": t3, "pbc": False, "energy": e(2), "find_energy": 1.0},
    ]


def synthetic_hyper(batches, rcut=4.0, rcut_smth=1.5):
    """sel chosen so that some atoms have more type-0 neighbours than sel[0] (the farthest are
    dropped) while no atom has more than sum(sel) neighbours in all."""
    counts = np.concatenate(
        [ref_counts(b["coord"], b["box"] if b["pbc"] else None, b["atype"], rcut, 2) for b in batches]
    )
    s0 = int(counts[:, 0].max()) - 1
    s1 = int(counts.sum(1).max()) - s0 + 1
    assert s0 >= 1 and (counts[:, 0] > s0).any() and (counts.sum(1) <= s0 + s1).all()
    return se_a_hyper(WATER, (s0, s1), rcut, rcut_smth)


def test_env_mat_stats_synthetic_matches_numpy():
    batches = synthetic_batches()
    hyper = synthetic_hyper(batches)
    davg, dstd = env_mat_stats(batches, hyper)
    rdavg, rdstd = ref_stats(batches, hyper)
    assert davg.shape == dstd.shape == (2, hyper.nnei, 4)
    np.testing.assert_allclose(davg, rdavg, rtol=0, atol=1e-10)
    np.testing.assert_allclose(dstd, rdstd, rtol=0, atol=1e-10)
    assert np.all(davg[..., 1:] == 0) and np.all(np.ptp(davg, axis=1) == 0) and np.all(np.ptp(dstd, axis=1) == 0)
    # per-frame sums add up to the total; the order of the batches does not matter (sums are pooled)
    per = env_mat_sums(batches, hyper, per_frame=True)
    assert per.shape == (7, 2, 5)
    np.testing.assert_allclose(per.sum(0), env_mat_sums(batches[::-1], hyper), rtol=1e-12)
    # a large protection floors every std
    _, dstd_p = env_mat_stats(batches, hyper, protect=1.0)
    np.testing.assert_array_equal(dstd_p, np.ones_like(dstd_p))


def test_candidate_sums_equal_slot_sums_and_flag_overflow():
    """The fast path (sums straight from the candidate pairs) equals the slot path when no type
    overflows its sel, and reports an overflow (so env_mat_sums takes the slot path) when one does."""
    from jaxmd_dp.geometry.neighbor import allocate
    from jaxmd_dp.geometry.stats import _chunk_sums, _chunk_sums_candidates

    b = synthetic_batches()[0]
    tight = synthetic_hyper(synthetic_batches())
    for sel, overflows in (((40, 80), False), (tight.sel, True)):
        spec = allocate(b["coord"], b["box"], 4.0, sel)
        args = (spec, 1.5, 2, True, b["coord"], b["box"], np.broadcast_to(b["atype"], b["coord"].shape[:2]))
        fast, over = _chunk_sums_candidates(*args)
        assert bool(over) == overflows
        if not overflows:
            np.testing.assert_allclose(np.asarray(fast), np.asarray(_chunk_sums(*args)), rtol=1e-12, atol=1e-14)


def test_env_mat_stats_absent_type_defaults():
    """A centre type that never occurs: davg 0, dstd 0.1 (DeePMD-kit's StatItem defaults)."""
    b = synthetic_batches()[1]
    b = dict(b, atype=np.where(b["atype"] == 0, 1, b["atype"]))  # only type 1 (and padding)
    hyper = se_a_hyper(WATER, (4, 12), 4.0, 1.5)
    davg, dstd = env_mat_stats([b], hyper)
    assert np.all(davg[0] == 0) and np.all(dstd[0] == 0.1)
    rdavg, rdstd = ref_stats([b], hyper)
    np.testing.assert_allclose(davg, rdavg, atol=1e-10)
    np.testing.assert_allclose(dstd, rdstd, atol=1e-10)


def test_env_mat_stats_real_water_matches_numpy():
    root = require("water")
    s0 = load_system(root / "data_0", list(WATER))
    s1 = load_system(root / "data_1", list(WATER))
    batches = [make_batch(s0, [0, 41]), make_batch(s1, [5, 150])]
    hyper = se_a_hyper(WATER, (46, 92), 6.0, 0.5)
    davg, dstd = env_mat_stats(batches, hyper)
    rdavg, rdstd = ref_stats(batches, hyper)
    np.testing.assert_allclose(davg, rdavg, rtol=0, atol=1e-10)
    np.testing.assert_allclose(dstd, rdstd, rtol=0, atol=1e-10)
    eb = energy_bias(batches, 2)
    counts = np.tile(np.bincount(s0.atype, minlength=2), (4, 1)).astype(float)
    energies = np.concatenate([b["energy"] for b in batches])
    np.testing.assert_allclose(eb, np.linalg.lstsq(counts, energies, rcond=None)[0], rtol=0, atol=1e-10)


# ----------------------------------------------------------------------------- energy bias
def test_energy_bias_matches_lstsq_and_skips_unlabelled():
    rng = np.random.default_rng(3)
    true = np.array([-93.5, -187.1 / 2])
    batches, counts, energies = [], [], []
    for types in ([0, 1, 1], [0, 0, 1, 1, 1, 1], [1, 1, 0, 1, 0]):
        t = np.array(types, np.int32)
        e = (np.bincount(t, minlength=2) @ true) + rng.normal(0, 0.3, 4)
        batches.append({"atype": t, "energy": e, "find_energy": 1.0})
        counts.append(np.tile(np.bincount(t, minlength=2), (4, 1)))
        energies.append(e)
    batches.append({"atype": np.array([0, 1], np.int32), "energy": np.zeros(3), "find_energy": 0.0})
    batches.append({"atype": np.array([0, 1], np.int32), "energy": None, "find_energy": 1.0})
    expect = np.linalg.lstsq(np.concatenate(counts).astype(float), np.concatenate(energies), rcond=None)[0]
    np.testing.assert_allclose(energy_bias(batches, 2), expect, rtol=0, atol=1e-10)
    # padding atoms (−1) are not counted; per-frame atype works too
    padded = [dict(b, atype=np.append(b["atype"], -1)) for b in batches[:3]]
    np.testing.assert_allclose(energy_bias(padded, 2), expect, rtol=0, atol=1e-10)
    per_frame = [dict(b, atype=np.tile(b["atype"], (4, 1))) for b in batches[:3]]
    np.testing.assert_allclose(energy_bias(per_frame, 2), expect, rtol=0, atol=1e-10)


def test_energy_bias_singular_single_type_and_absent_type():
    t = np.array([0, 1, 1] * 4, np.int32)
    e = np.array([-10.0, -11.0, -12.5])
    # one composition only: lstsq's minimum-norm solution, c·b = mean energy
    b = energy_bias([{"atype": t, "energy": e, "find_energy": 1.0}], 2)
    c = np.array([4.0, 8.0])
    np.testing.assert_allclose(b, c * e.mean() / (c @ c), atol=1e-12)
    # one type: Σ nE / Σ n²
    one = [
        {"atype": np.zeros(4, np.int32), "energy": e, "find_energy": 1.0},
        {"atype": np.zeros(6, np.int32), "energy": np.array([-20.0]), "find_energy": 1.0},
    ]
    n = np.array([4, 4, 4, 6.0])
    ee = np.append(e, -20.0)
    np.testing.assert_allclose(energy_bias(one, 1), [n @ ee / (n @ n)], atol=1e-12)
    # a type absent from every frame gets 0
    b3 = energy_bias(one, 3)
    assert b3.shape == (3,) and b3[1] == 0 and b3[2] == 0
    with pytest.raises(ValueError, match="energy label"):
        energy_bias([{"atype": t, "energy": e, "find_energy": 0.0}], 2)


# ----------------------------------------------------------------------------- frame sampling
def _system(nf, na, seed):
    rng = np.random.default_rng(seed)
    return System(
        path=f"s{seed}",
        atype=np.zeros(na, np.int32),
        pbc=True,
        coord=rng.random((nf, na, 3)) * 5,
        box=np.repeat(np.eye(3)[None] * 5, nf, 0),
        energy=np.arange(nf, dtype=float) + 100 * seed,
        force=None,
        virial=None,
        set_nframes=(nf,),
    )


def test_sample_stat_frames_follows_make_stat_input():
    systems = [_system(10, 3, 0), _system(7, 5, 1), _system(3, 2, 2)]
    out = sample_stat_frames(systems, nbatch=2, seed=5, batch_size=[3, 2, 2])
    # min(nbatch, ceil(nf / bs)) batches of bs frames, without replacement
    assert [len(b["energy"]) for b in out] == [6, 4, 3]
    for b, s in zip(out, systems):
        assert len(set(b["energy"])) == len(b["energy"])
        assert set(b["energy"]) <= set(s.energy)
        assert b["coord"].shape[1:] == (s.natoms, 3)
    again = sample_stat_frames(systems, nbatch=2, seed=5, batch_size=[3, 2, 2])
    assert all(np.array_equal(a["energy"], b["energy"]) for a, b in zip(out, again))
    assert [len(b["energy"]) for b in sample_stat_frames(systems, 100, batch_size=4)] == [10, 7, 3]
    # from a DataSampler: its batch sizes, and its own random stream untouched
    sampler = DataSampler(systems, batch_size=[1, 3, 1], seed=1)
    state = sampler.state_dict()
    out = sample_stat_frames(sampler, nbatch=3, seed=0)
    assert [len(b["energy"]) for b in out] == [3, 7, 3]
    assert sampler.state_dict() == state
    with pytest.raises(ValueError):
        sample_stat_frames(systems, nbatch=0)


# ----------------------------------------------------------------------------- DeePMD-kit's values
def deepmd_stats(name):
    """(hyper, davg, dstd, energy_bias, out.json) of a fixture: DeePMD-kit's own values from params.npz,
    mapped as ``load_fixture``'s ``stats`` (mean, stddev, out_bias + bias_atom_e) without building
    the network weights (which costs ~10 s)."""
    d = fixture_dir(name)
    cfg = json.loads((d / "out.json").read_text())
    hyper = hyper_from_deepmd(cfg["model"], str(d))
    sd = load_state_dict(d / "params.npz")
    pre = "model.Default.atomic_model."
    bias = sd[pre + "out_bias"][0, :, 0] + sd[pre + "fitting_net.bias_atom_e"][:, 0]
    return hyper, sd[pre + "descriptor.sea.mean"], sd[pre + "descriptor.sea.stddev"], bias, cfg


def _bootstrap_se(per, batches, ntypes, nnei, nrep=300, seed=0):
    """Standard error, from resampling frames within each system, of davg[:, 0], dstd[:, 0], dstd[:, 1]
    (ntypes, 3) and of the energy bias (ntypes,)."""
    rng = np.random.default_rng(seed)
    lengths = [len(b["coord"]) for b in batches]
    parts = np.split(per, np.cumsum(lengths)[:-1])
    env, bias = [], []
    for _ in range(nrep):
        picks = [rng.integers(0, n, n) for n in lengths]
        davg, dstd = stats_from_sums(sum(p[k].sum(0) for p, k in zip(parts, picks)), nnei)
        env.append(np.stack([davg[:, 0, 0], dstd[:, 0, 0], dstd[:, 0, 1]], 1))
        bias.append(energy_bias([dict(b, energy=b["energy"][k]) for b, k in zip(batches, picks)], ntypes))
    return np.std(env, axis=0), np.std(bias, axis=0)


@pytest.mark.parametrize("name", ["water_se_e2_a", "cu_virial"])
def test_stats_agree_with_deepmd_fixture(name):
    """Our statistics on frames sampled as DeePMD-kit does (data_stat_nbatch batches per training
    system) against DeePMD-kit's own mean/stddev/out_bias. DeePMD-kit's frames came from its torch
    RNG and cannot be reproduced, so the two samples differ: the tolerance is the larger of 2 % /
    1e-3 eV and 4·√2 standard errors of the sampling (bootstrap). Water: ~0.1 % / ~1e-3 eV apart;
    Cu (10 frames from each of 7 quite different systems): a few % and ~0.05 eV apart."""
    hyper, ref_davg, ref_dstd, ref_bias, cfg = deepmd_stats(name)
    d = fixture_dir(name)
    train = cfg["training"]["training_data"]
    systems = [load_system(require(d / p), list(hyper.type_map)) for p in train["systems"]]
    batches = sample_stat_frames(systems, cfg["model"]["data_stat_nbatch"], seed=0, batch_size=train["batch_size"])
    per = env_mat_sums(batches, hyper, per_frame=True)
    davg, dstd = stats_from_sums(per.sum(0), hyper.nnei)
    bias = energy_bias(batches, hyper.ntypes)

    # DeePMD-kit's arrays have the structure we produce: zero columns 1-3 of davg, one row per type
    assert np.all(ref_davg[..., 1:] == 0) and np.all(np.ptp(ref_davg, axis=1) == 0)
    assert np.all(np.ptp(ref_dstd, axis=1) == 0) and np.all(ref_dstd[..., 1] == ref_dstd[..., 3])
    ours = np.stack([davg[:, 0, 0], dstd[:, 0, 0], dstd[:, 0, 1]], 1)
    ref = np.stack([ref_davg[:, 0, 0], ref_dstd[:, 0, 0], ref_dstd[:, 0, 1]], 1)
    se_env, se_bias = _bootstrap_se(per, batches, hyper.ntypes, hyper.nnei)
    rel = np.abs(ours / ref - 1)
    tol_rel = np.maximum(0.02, 4 * np.sqrt(2) * se_env / np.abs(ref))
    dbias = np.abs(bias - ref_bias)
    tol_bias = np.maximum(1e-3, 4 * np.sqrt(2) * se_bias)
    print(
        f"\n{name}: rel diff [davg_s, dstd_s, dstd_a] per type {rel.tolist()} (tol {tol_rel.tolist()}); "
        f"bias diff {dbias.tolist()} eV (tol {tol_bias.tolist()})"
    )
    assert np.all(rel <= tol_rel), (rel, tol_rel)
    assert np.all(dbias <= tol_bias), (dbias, tol_bias)
    if name == "water_se_e2_a":  # the sampling noise is small here: the plain 2 % holds with room
        assert np.all(rel < 0.005), rel


@pytest.mark.parametrize(
    "data,names,sel,cut,all_summed",
    [
        ("water", ["data_0", "data_1"], (46, 92), (6.0, 0.5), True),  # 232 frames not sampled: all summed
        ("nopbc_cho_combustion", ["C1H4O2", "C3H3O4", "C4H3O1"], (16, 16, 16), (5.0, 1.0), False),  # 1,562 frames
    ],
)
def test_neighbor_scan_sums_equal_env_mat_sums(data, names, sel, cut, all_summed, monkeypatch):
    """The trainer's one pass: the neighbour scan sums the statistics' frames (sample_stat_indices) and
    scanned_sums adds them up as env_mat_sums does in its own pass; frames it did not sum give None."""
    from jaxmd_dp.geometry.neighbor_stat import neighbor_stat
    from jaxmd_dp.geometry.stats import sample_stat_indices, scanned_sums

    root = require(data)
    types = list(WATER) if data == "water" else ["C", "H", "O"]
    systems = [load_system(root / n, types) for n in names]
    hyper = se_a_hyper(types, sel, *cut)
    idx = sample_stat_indices([s.nframes for s in systems], [1] * len(systems), nbatch=4, seed=2)
    scan = neighbor_stat(systems, cut[0], len(types), rcut_smth=cut[1], sum_frames=idx, chunk=3)
    assert np.all(scan.max_nbor_per_system <= np.asarray(sel))  # no overflow: both sum every neighbour
    frames = sample_stat_frames(systems, 4, seed=2, batch_size=1)
    assert [list(f["frames"]) for f in frames] == [list(i) for i in idx]
    want = env_mat_sums(frames, hyper)
    np.testing.assert_allclose(scanned_sums(frames, scan.env_sums_per_system, hyper.nnei), want, rtol=1e-12)
    other = [
        make_batch(s, np.setdiff1d(np.arange(s.nframes), f["frames"])[:2], k)
        for k, (f, s) in enumerate(zip(frames, systems))
    ]
    if all_summed:  # few frames outside the sample (≤ SUM_ALL_FRAMES): all summed, one compile
        assert np.isfinite(scan.env_sums_per_system[0]).all()
        np.testing.assert_allclose(
            scanned_sums(other, scan.env_sums_per_system, hyper.nnei), env_mat_sums(other, hyper), rtol=1e-12
        )
    else:
        assert scanned_sums(other, scan.env_sums_per_system, hyper.nnei) is None
    import jaxmd_dp.geometry.neighbor_stat as ns

    monkeypatch.setattr(ns, "SUM_ALL_FRAMES", 0)  # only the sampled frames: the others are not summed
    scan = neighbor_stat(systems, cut[0], len(types), rcut_smth=cut[1], sum_frames=idx, chunk=3)
    np.testing.assert_allclose(scanned_sums(frames, scan.env_sums_per_system, hyper.nnei), want, rtol=1e-12)
    assert np.isnan(scan.env_sums_per_system[0]).any()
    assert scanned_sums(other, scan.env_sums_per_system, hyper.nnei) is None


# ----------------------------------------------------------------------------- set_davg_zero
DAVG_ZERO = Path(__file__).absolute().parents[1] / "data" / "deepmd_set_davg_zero"


def test_set_davg_zero_keeps_dstd_and_zeroes_davg():
    """DeePMD-kit's compute_input_stats with set_davg_zero: the mean stays 0, the std is the one computed
    without it (around the data's mean, not around 0)."""
    hyper = SimpleNamespace(ntypes=2, sel=(46, 92), nnei=138, rcut=6.0, rcut_smth=0.5)
    frames = sample_stat_frames([load_system(require("water/data_0"), list(WATER))], 2, seed=3, batch_size=1)
    davg, dstd = env_mat_stats(frames, hyper)
    davg0, dstd0 = env_mat_stats(frames, hyper, set_davg_zero=True)
    assert np.all(davg[:, :, 0] > 0) and np.all(davg0 == 0.0)
    np.testing.assert_array_equal(dstd0, dstd)
    sums = env_mat_sums(frames, hyper)
    zero, std = stats_from_sums(sums, hyper.nnei, set_davg_zero=True)
    assert np.all(zero == 0.0)
    np.testing.assert_array_equal(std, dstd)


def test_set_davg_zero_matches_deepmd_kit_on_its_training_frames():
    """The fixture's statistics saw all 8 training frames (data_stat_nbatch 10 >= 8 batches of 1), so ours
    on the same frames are DeePMD-kit's: mean 0, stddev and energy bias to rounding."""
    cfg = json.loads((DAVG_ZERO / "input.json").read_text())
    hyper = hyper_from_deepmd(cfg["model"])
    sd = load_state_dict(DAVG_ZERO / "params.npz")
    key = "model.Default.atomic_model."
    ref_davg, ref_dstd = sd[key + "descriptor.sea.mean"], sd[key + "descriptor.sea.stddev"]
    ref_bias = sd[key + "out_bias"][0, :, 0]
    water = load_system(require("water/data_0"), list(hyper.type_map))
    with np.load(DAVG_ZERO / "predictions.npz") as z:
        train_frames = z["train_frames"]
    batch = make_batch(water, train_frames)
    davg, dstd = env_mat_stats([batch], hyper, cfg["model"].get("data_stat_protect", 0.01), set_davg_zero=True)
    assert np.all(ref_davg == 0.0) and np.all(davg == 0.0)
    assert np.max(np.abs(dstd - ref_dstd)) <= 1e-12 * np.max(ref_dstd)
    np.testing.assert_allclose(energy_bias([batch], hyper.ntypes), ref_bias, rtol=1e-12)
