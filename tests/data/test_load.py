"""A data section's keys as DeePMD-kit reads them: ``set_prefix`` (the frame-set directories),
``rglob_patterns`` (which directories are systems) and ``min_pair_dist`` (training frames with two atoms
too close left out, and counted). Systems are laid out in tmp_path from a copied shared Cu system."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).absolute().parents[1]))
from shared_paths import require  # noqa: E402

from jaxmd_dp.data.load import drop_close_frames, load_systems, min_pair_distance  # noqa: E402
from jaxmd_dp.data.sampler import DataSampler, find_systems, system_paths  # noqa: E402
from jaxmd_dp.data.system import load_system, select_frames  # noqa: E402
from jaxmd_dp.errors import InputError  # noqa: E402

CU = "cu_asc22/iter.000000/02.fp/data.000"
LABELS = ("coord", "box", "energy", "force", "virial")


def cu_system(dst: Path, sets=(12, 8), prefix: str = "set", first: int = 0, close: dict | None = None) -> Path:
    """A copy of frames first.. of the shared 32-atom Cu system in ``sets`` frame-set directories
    ``<prefix>.000``, ...; ``close``: {frame: distance (Å)} moves atom 1 that close to atom 0 in those frames."""
    src = require(CU)
    dst.mkdir(parents=True)
    shutil.copy(src / "type.raw", dst / "type.raw")
    arrays = {k: np.load(src / "set.000" / f"{k}.npy")[first : first + sum(sets)].astype(np.float64) for k in LABELS}
    for frame, dist in (close or {}).items():
        c = arrays["coord"][frame].reshape(-1, 3)
        c[1] = c[0] + np.array([dist, 0.0, 0.0])
        arrays["coord"][frame] = c.reshape(-1)
    start = 0
    for k, n in enumerate(sets):
        d = dst / f"{prefix}.{k:03d}"
        d.mkdir()
        for name, a in arrays.items():
            np.save(d / f"{name}.npy", a[start : start + n])
        start += n
    return dst


# ----------------------------------------------------------------------------- set_prefix
def test_set_prefix_reads_frames_dirs(tmp_path):
    sys_dir = cu_system(tmp_path / "sys", prefix="frames")
    s = load_system(sys_dir, ["Cu"], set_prefix="frames")
    ref = load_system(require(CU), ["Cu"])
    assert s.nframes == 20 and s.set_nframes == (12, 8)
    np.testing.assert_array_equal(s.coord, ref.coord[:20])
    np.testing.assert_array_equal(s.virial, ref.virial[:20])
    with pytest.raises(InputError, match=r"no set\.\* directories"):
        load_system(sys_dir, ["Cu"])
    plain = cu_system(tmp_path / "plain")
    with pytest.raises(InputError, match=r"no frames\.\* directories.*set_prefix is 'frames'"):
        load_system(plain, ["Cu"], set_prefix="frames")


def test_set_prefix_in_a_searched_directory(tmp_path):
    cu_system(tmp_path / "root" / "a", prefix="frames")
    cu_system(tmp_path / "root" / "b", sets=(5,), prefix="frames")
    systems = load_systems(str(tmp_path / "root"), ["Cu"], set_prefix="frames")
    assert [Path(s.path).name for s in systems] == ["a", "b"]
    assert [s.set_nframes for s in systems] == [(12, 8), (5,)]


# ----------------------------------------------------------------------------- rglob_patterns
def _tree(root: Path) -> None:
    """Systems where DeePMD-kit's iterations keep them, and two more that the patterns below leave out."""
    for d in (
        "iter.000000/02.fp/data.000",
        "iter.000001/02.fp/data.003",
        "iter.000001/02.fp/data.001",
        "iter.000001/01.model/scratch",
        "other/sys",
    ):
        (root / d).mkdir(parents=True)
        (root / d / "type.raw").write_text("0\n")
    (root / "iter.000001" / "02.fp" / "data.notes").mkdir()  # matches a pattern, holds no type.raw


def test_rglob_patterns_find_only_matching_systems(tmp_path):
    _tree(tmp_path)
    rel = lambda paths: [Path(p).relative_to(tmp_path).as_posix() for p in paths]  # noqa: E731
    want = ["iter.000000/02.fp/data.000", "iter.000001/02.fp/data.001", "iter.000001/02.fp/data.003"]
    assert rel(find_systems(tmp_path, ["iter.*/02.fp/data.*"])) == want
    assert rel(find_systems(tmp_path, ["data.*"])) == want  # rglob: at any depth
    assert rel(find_systems(tmp_path, ["data.00[01]", "sys"])) == [*want[:2], "other/sys"]
    assert rel(find_systems(tmp_path, ["data.000", "iter.000000/*/data.000"])) == want[:1]  # each once
    assert len(find_systems(tmp_path)) == 5  # without patterns: every directory holding type.raw
    # a list: each entry searched by the patterns (DeePMD-kit's process_systems)
    assert rel(system_paths([str(tmp_path / "iter.000000"), str(tmp_path / "iter.000001")], ["data.*"])) == want
    with pytest.raises(InputError, match=r"rglob_patterns \['nothing\*'\]"):
        find_systems(tmp_path, ["nothing*"])


def test_rglob_patterns_load(tmp_path):
    cu_system(tmp_path / "iter.000000" / "02.fp" / "data.000", sets=(4,))
    cu_system(tmp_path / "iter.000000" / "01.model" / "data.009", sets=(3,))
    systems = load_systems(str(tmp_path), ["Cu"], rglob_patterns=["*/02.fp/data.*"])
    assert [s.nframes for s in systems] == [4]


def test_a_list_entry_that_is_a_directory_of_systems_is_searched(tmp_path):
    """DeePMD-kit searches every entry of a list of systems; a system stays itself, and an entry with no
    system below it is left for reading to report."""
    _tree(tmp_path)
    assert system_paths([str(tmp_path / "other" / "sys")]) == [str(tmp_path / "other" / "sys")]
    assert len(system_paths([str(tmp_path / "iter.000001")])) == 3
    (tmp_path / "empty").mkdir()
    assert system_paths([str(tmp_path / "empty"), "/nonexistent"]) == [str(tmp_path / "empty"), "/nonexistent"]


# ----------------------------------------------------------------------------- min_pair_dist
def test_min_pair_distance_minimum_image():
    box = np.diag([10.0, 10.0, 10.0])[None]
    coord = np.array([[[0.2, 0.0, 0.0], [9.7, 0.0, 0.0], [5.0, 5.0, 5.0]]])
    np.testing.assert_allclose(min_pair_distance(coord, box), [0.5])  # across the boundary
    np.testing.assert_allclose(min_pair_distance(coord, None), [np.sqrt(4.7**2 + 50)])  # no PBC
    assert min_pair_distance(coord[:, :1], box)[0] == np.inf
    s = load_system(require(CU), ["Cu"])
    d = min_pair_distance(s.coord[:5], s.box[:5])
    brute = []
    for c, b in zip(s.coord[:5], s.box[:5]):
        f = (c[:, None] - c[None]) @ np.linalg.inv(b)  # (32, 32, 3) fractional differences
        r = np.linalg.norm((f - np.round(f)) @ b, axis=-1)
        brute.append(r[~np.eye(32, dtype=bool)].min())
    np.testing.assert_allclose(d, brute, rtol=1e-12)


def test_min_pair_dist_drops_the_close_frames_and_counts_them(tmp_path):
    sys_dir = cu_system(tmp_path / "sys", close={3: 0.9, 7: 1.2, 15: 1.45})
    systems = load_systems([str(sys_dir)], ["Cu"], min_pair_dist=1.3)
    (s,) = systems
    assert s.nframes == 18 and s.dropped == 2 and s.set_nframes == (10, 8)
    ref = load_system(sys_dir, ["Cu"])
    kept = [i for i in range(20) if i not in (3, 7)]
    for key in ("coord", "box", "energy", "force", "virial"):
        np.testing.assert_array_equal(getattr(s, key), getattr(ref, key)[kept])
    assert load_systems([str(sys_dir)], ["Cu"], min_pair_dist=1.5)[0].dropped == 3
    assert load_systems([str(sys_dir)], ["Cu"])[0].dropped is None  # 0: off
    assert load_systems([str(sys_dir)], ["Cu"], min_pair_dist=0.5)[0].dropped == 0

    table = DataSampler(systems + [load_system(require(CU), ["Cu"])], batch_size=1).summary_table("training")
    lines = table.splitlines()
    assert lines[2].split()[-1] == "dropped"
    assert lines[3].split()[-1] == "2" and lines[4].split()[-1] == "0"
    assert "min_pair_dist: 2 of 320 frames dropped" in table
    plain = DataSampler([ref], batch_size=1).summary_table("training")
    assert "dropped" not in plain and plain.splitlines()[2].split()[-1] == "pbc"


def test_min_pair_dist_whole_set_dropped(tmp_path):
    sys_dir = cu_system(tmp_path / "sys", sets=(2, 3), close={0: 1.0, 1: 1.0})
    (s,) = load_systems([str(sys_dir)], ["Cu"], min_pair_dist=1.1)
    assert s.nframes == 3 and s.set_nframes == (3,) and s.dropped == 2


def test_min_pair_dist_no_frame_left_is_one_line(tmp_path):
    sys_dir = cu_system(tmp_path / "sys", sets=(3,))
    with pytest.raises(InputError) as info:
        load_systems([str(sys_dir)], ["Cu"], min_pair_dist=50.0)
    msg = str(info.value)
    assert "\n" not in msg and "training.training_data.min_pair_dist" in msg and str(sys_dir) in msg
    with pytest.raises(InputError, match="no frame of it is left"):
        drop_close_frames(load_system(sys_dir, ["Cu"]), 50.0)


def test_select_frames_keeps_order_and_sets():
    s = load_system(require("water/data_1"), ["O", "H"])
    keep = np.zeros(s.nframes, bool)
    keep[[0, 5, 81, 159]] = True
    t = select_frames(s, keep)
    assert t.set_nframes == (2, 2) and t.dropped == 156 and t.nframes == 4
    np.testing.assert_array_equal(t.energy, s.energy[[0, 5, 81, 159]])
    assert select_frames(t, np.array([True, False, True, True])).dropped == 157
