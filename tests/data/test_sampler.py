"""DataSampler and helpers: batch sizes, system probabilities, determinism, state round trip."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).absolute().parents[1]))
from shared_paths import require  # noqa: E402

from jaxmd_dp.data.sampler import (  # noqa: E402
    DataSampler,
    find_systems,
    iter_frames,
    num_batches,
    resolve_batch_sizes,
    summary_table,
    system_probs,
)
from jaxmd_dp.data.system import System, load_system  # noqa: E402
from jaxmd_dp.errors import InputError  # noqa: E402


def fake_system(
    nframes: int, natoms: int = 3, pbc: bool = True, virial: bool = False, path: str = "sys", sets: tuple[int, ...] = ()
) -> System:
    """In-memory system whose energy of frame i is i (to identify frames in batches)."""
    coord = np.arange(nframes * natoms * 3, dtype=np.float64).reshape(nframes, natoms, 3)
    return System(
        path=path,
        atype=np.zeros(natoms, np.int32),
        pbc=pbc,
        coord=coord,
        box=np.tile(np.eye(3) * 10, (nframes, 1, 1)) if pbc else None,
        energy=np.arange(nframes, dtype=np.float64),
        force=-coord,
        virial=np.ones((nframes, 9)) if virial else None,
        set_nframes=sets,
    )


# ----------------------------------------------------------------------------- batch sizes
def test_batch_size_rules():
    natoms = [192, 1, 12, 16, 32, 7, 10, 8]
    assert resolve_batch_sizes(4, natoms) == [4] * 8
    assert resolve_batch_sizes("auto", natoms) == [1, 32, 3, 2, 1, 5, 4, 4]
    assert resolve_batch_sizes("auto:32", natoms) == [1, 32, 3, 2, 1, 5, 4, 4]
    assert resolve_batch_sizes("auto:100", natoms) == [1, 100, 9, 7, 4, 15, 10, 13]
    assert resolve_batch_sizes("max:64", natoms) == [1, 64, 5, 4, 2, 9, 6, 8]
    assert resolve_batch_sizes([1, 2, 3, 4, 5, 6, 7, 8], natoms) == [1, 2, 3, 4, 5, 6, 7, 8]


@pytest.mark.parametrize("spec", [0, -2, "auto:x", "auto:0", "mixed:4", "max", [1, 2], [1, 0, 1], True, 2.5])
def test_batch_size_errors(spec):
    with pytest.raises(InputError, match="batch_size"):
        resolve_batch_sizes(spec, [3, 4, 5])


def test_num_batches_per_set_as_deepmd():
    assert num_batches(fake_system(160, sets=(80, 80)), 3) == 26 + 26
    assert num_batches(fake_system(160), 3) == 53  # no set info: whole system
    assert num_batches(fake_system(2), 5) == 1  # at least one


# ----------------------------------------------------------------------------- probabilities
def test_probs_styles():
    nb = [1, 3, 2, 2]
    np.testing.assert_allclose(system_probs(nb, "prob_uniform"), [0.25] * 4)
    np.testing.assert_allclose(system_probs(nb, "prob_sys_size"), [1 / 8, 3 / 8, 2 / 8, 2 / 8])
    np.testing.assert_allclose(system_probs(nb), [1 / 8, 3 / 8, 2 / 8, 2 / 8])
    np.testing.assert_allclose(system_probs(nb, "prob_sys_size;0:2:0.8;2:4:0.2"), [0.2, 0.6, 0.1, 0.1])
    # block weights are normalised over blocks, uncovered systems get 0
    np.testing.assert_allclose(system_probs(nb, "prob_sys_size;0:2:4;2:4:1"), [0.2, 0.6, 0.1, 0.1])
    np.testing.assert_allclose(system_probs(nb, "prob_sys_size;1:3:1"), [0, 0.6, 0.4, 0])
    # explicit sys_probs win over auto_prob and are normalised
    np.testing.assert_allclose(system_probs(nb, "prob_uniform", [1, 1, 2, 0]), [0.25, 0.25, 0.5, 0])
    # negative entries: the rest in proportion to batches (DeePMD-kit's process_sys_probs)
    np.testing.assert_allclose(system_probs(nb, sys_probs=[0.5, -1, -1, 0.1]), [0.5, 0.24, 0.16, 0.1])


def test_probs_deepmd_block_example():
    nb = np.arange(1, 101)
    p = system_probs(nb, "prob_sys_size;0:57:0.8;57:100:0.2")
    np.testing.assert_allclose(p[:57], 0.8 * nb[:57] / nb[:57].sum())
    np.testing.assert_allclose(p[57:], 0.2 * nb[57:] / nb[57:].sum())
    assert p.sum() == pytest.approx(1.0)


@pytest.mark.parametrize(
    "auto_prob, sys_probs, key",
    [
        ("prob_size", None, "auto_prob"),
        ("prob_sys_size;", None, "auto_prob"),
        ("prob_sys_size;0:2", None, "auto_prob"),
        ("prob_sys_size;0:a:1", None, "auto_prob"),
        ("prob_sys_size;0:5:1", None, "auto_prob"),
        ("prob_sys_size;2:2:1", None, "auto_prob"),
        ("prob_sys_size;0:2:-1", None, "auto_prob"),
        ("prob_sys_size;0:3:1;2:4:1", None, "auto_prob"),
        ("prob_sys_size;0:2:0", None, "auto_prob"),
        ("prob_sys_size", [0.5, 0.5], "sys_probs"),
        ("prob_sys_size", [0.9, 0.3, -1, -1], "sys_probs"),
        ("prob_sys_size", [0, 0, 0, 0], "sys_probs"),
        ("prob_sys_size", [0.1, np.nan, 0.1, 0.1], "sys_probs"),
    ],
)
def test_probs_errors(auto_prob, sys_probs, key):
    with pytest.raises(InputError, match=key):
        system_probs([1, 3, 2, 2], auto_prob, sys_probs)


# ----------------------------------------------------------------------------- sampler
def test_batch_dict_contents():
    systems = [fake_system(6, natoms=2, pbc=False), fake_system(5, natoms=4, virial=True)]
    s = DataSampler(systems, batch_size=[3, 2], seed=0)
    b0 = s.next_batch_from(0)
    assert b0["coord"].shape == (3, 2, 3) and b0["box"].shape == (3, 3, 3) and not b0["box"].any()
    assert b0["virial"].shape == (3, 9) and not b0["virial"].any() and b0["find_virial"] == 0.0
    assert b0["find_energy"] == 1.0 and b0["find_force"] == 1.0
    assert (b0["pbc"], b0["natoms"], b0["sys_index"]) == (False, 2, 0)
    assert b0["atype"].dtype == np.int32 and b0["atype"].shape == (2,)
    for k in ("coord", "box", "energy", "force", "virial"):
        assert b0[k].dtype == np.float64
    i = b0["energy"].astype(int)  # frame ids
    np.testing.assert_array_equal(b0["coord"], systems[0].coord[i])
    np.testing.assert_array_equal(b0["force"], systems[0].force[i])
    b1 = s.next_batch_from(1)
    assert b1["find_virial"] == 1.0 and b1["pbc"] is True and b1["box"].shape == (2, 3, 3)
    assert isinstance(b1["find_energy"], float) and isinstance(b1["natoms"], int)


def test_epoch_coverage():
    s = DataSampler([fake_system(12)], batch_size=3, seed=5)
    for _ in range(3):  # three epochs: each frame exactly once per epoch
        frames = np.concatenate([s.next_batch()["energy"] for _ in range(4)]).astype(int)
        assert sorted(frames.tolist()) == list(range(12))
    # 10 frames, bs 3: 3 batches of distinct frames per epoch, then a reshuffle
    s = DataSampler([fake_system(10)], batch_size=3, seed=1)
    seen = np.concatenate([s.next_batch()["energy"] for _ in range(3)]).astype(int)
    assert len(set(seen.tolist())) == 9
    # a system smaller than its batch size gives all its frames
    s = DataSampler([fake_system(2)], batch_size=5, seed=1)
    assert sorted(s.next_batch()["energy"].tolist()) == [0.0, 1.0]


def test_system_draw_frequencies():
    systems = [fake_system(10), fake_system(30), fake_system(60)]
    s = DataSampler(systems, batch_size=1, seed=3)
    np.testing.assert_allclose(s.probs, [0.1, 0.3, 0.6])
    counts = np.bincount([s.next_batch()["sys_index"] for _ in range(4000)], minlength=3) / 4000
    np.testing.assert_allclose(counts, [0.1, 0.3, 0.6], atol=0.03)
    u = DataSampler(systems, batch_size=1, auto_prob="prob_uniform", seed=3)
    np.testing.assert_allclose(u.probs, [1 / 3] * 3)


def _stream(sampler: DataSampler, n: int) -> list[tuple[int, list[float]]]:
    return [(b["sys_index"], b["energy"].tolist()) for b in (sampler.next_batch() for _ in range(n))]


def test_determinism_and_seed():
    systems = [fake_system(7), fake_system(11), fake_system(4)]
    a = _stream(DataSampler(systems, batch_size=2, seed=42), 60)
    b = _stream(DataSampler(systems, batch_size=2, seed=42), 60)
    c = _stream(DataSampler(systems, batch_size=2, seed=43), 60)
    assert a == b and a != c


def test_state_dict_roundtrip():
    systems = [fake_system(7), fake_system(11, virial=True), fake_system(4, pbc=False)]
    a = DataSampler(systems, batch_size=[2, 3, 5], seed=7)
    _stream(a, 23)
    state = json.loads(json.dumps(a.state_dict()))  # must survive JSON
    expected = _stream(a, 80)
    b = DataSampler(systems, batch_size=[2, 3, 5], seed=999)
    b.load_state_dict(state)
    assert _stream(b, 80) == expected
    # a fresh sampler's state (no permutations yet) also round-trips
    c, d = DataSampler(systems, 2, seed=1), DataSampler(systems, 2, seed=2)
    d.load_state_dict(json.loads(json.dumps(c.state_dict())))
    assert _stream(c, 30) == _stream(d, 30)


def test_state_dict_mismatch():
    a = DataSampler([fake_system(7), fake_system(11)], batch_size=2, seed=1)
    b = DataSampler([fake_system(7), fake_system(12)], batch_size=2, seed=1)
    with pytest.raises(InputError, match="sampler state"):
        b.load_state_dict(a.state_dict())
    with pytest.raises(InputError, match="sampler state"):
        b.load_state_dict({"rng": {}})


def test_iter_frames_in_order():
    sys_ = fake_system(7)
    batches = list(iter_frames(sys_, 3, sys_index=2))
    assert [b["energy"].tolist() for b in batches] == [[0, 1, 2], [3, 4, 5], [6]]
    assert all(b["sys_index"] == 2 for b in batches)


def test_sampler_errors():
    with pytest.raises(InputError, match="systems"):
        DataSampler([], batch_size=1)
    with pytest.raises(InputError, match="batch_size"):
        DataSampler([fake_system(3)], batch_size=[1, 2])


# ----------------------------------------------------------------------------- summary, find_systems
def test_summary_table_format():
    long = "/very/long/path/to/some/data/directory/with/many/levels/sys-0001"
    systems = [fake_system(80, natoms=192, path="data_0"), fake_system(10, natoms=7, pbc=False, path=long)]
    text = DataSampler(systems, batch_size="auto", seed=0).summary_table("training")
    lines = text.splitlines()
    assert lines[0].startswith("---Summary of DataSystem: training ")
    assert lines[1] == "found 2 system(s):"
    assert lines[2].split() == ["system", "natoms", "bch_sz", "n_bch", "prob", "pbc"]
    assert lines[3].split() == ["data_0", "192", "1", "80", "0.976", "T"]  # 80 / 82 batches
    assert lines[4].split() == ["--", long[-39:], "7", "5", "2", "0.024", "F"]
    assert lines[4].startswith("-- ") and len(lines[4].split("  ")[0]) == 42
    assert lines[3].index("data_0") + len("data_0") == 42  # right-aligned in 42 columns
    assert set(lines[-1]) == {"-"}
    assert summary_table("x", [], [], [], [], [], []).splitlines()[1] == "found 0 system(s):"


def test_find_systems(tmp_path):
    for d in ["b/sys2", "a/sys1", "a/sys1.extra", "c/deep/er/sys3"]:
        (tmp_path / d).mkdir(parents=True)
        (tmp_path / d / "type.raw").write_text("0\n")
    (tmp_path / "a" / "sys1" / "set.000").mkdir()
    found = [Path(p).relative_to(tmp_path).as_posix() for p in find_systems(tmp_path)]
    assert found == ["a/sys1", "a/sys1.extra", "b/sys2", "c/deep/er/sys3"]
    assert find_systems(tmp_path / "a" / "sys1") == [str(tmp_path / "a" / "sys1")]
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no systems found"):
        find_systems(tmp_path / "empty")
    with pytest.raises(InputError, match="not found"):
        find_systems(tmp_path / "missing")


def test_water_sampler_end_to_end():
    root = require("water")
    paths = find_systems(root)
    assert [Path(p).name for p in paths] == ["data_0", "data_1", "data_2", "data_3"]
    systems = [load_system(p, ["O", "H"]) for p in paths[:3]]
    s = DataSampler(systems, batch_size="auto", seed=0)
    assert s.batch_sizes == [1, 1, 1] and s.nbatches == [80, 160, 80]
    np.testing.assert_allclose(s.probs, [0.25, 0.5, 0.25])
    text = s.summary_table("training")
    assert "found 3 system(s):" in text and text.count(" T\n") + text.endswith(" T") == 3
    assert "0.500" in text and "0.250" in text
    b = s.next_batch()
    assert b["coord"].shape == (1, 192, 3) and b["find_virial"] == 0.0 and b["pbc"] is True
    # a validation sampler with its own seed, and in-order evaluation chunks
    v = DataSampler([load_system(paths[3], ["O", "H"])], batch_size=1, seed=1)
    assert v.next_batch()["sys_index"] == 0
    assert sum(len(b["energy"]) for b in iter_frames(v.systems[0], 16)) == 80
