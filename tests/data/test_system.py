"""load_system: the four shared datasets, type mapping, and every bad-input case."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).absolute().parents[1]))
from shared_paths import require  # noqa: E402

from jaxmd_dp.data.sampler import find_systems  # noqa: E402
from jaxmd_dp.data.system import System, load_system  # noqa: E402
from jaxmd_dp.errors import InputError  # noqa: E402


# ----------------------------------------------------------------------------- synthetic systems
def make_system(
    root: Path,
    types=(0, 1, 1, 0),
    type_map=("O", "H"),
    nframes=(3,),
    nopbc=False,
    labels=("energy", "force", "virial"),
    dtype=np.float32,
) -> Path:
    """A small valid system: one set per entry of ``nframes``, cubic 10 Å box."""
    rng = np.random.default_rng(0)
    root.mkdir(parents=True, exist_ok=True)
    na = len(types)
    (root / "type.raw").write_text("".join(f"{t}\n" for t in types))
    if type_map is not None:
        (root / "type_map.raw").write_text("".join(f"{n}\n" for n in type_map))
    if nopbc:
        (root / "nopbc").write_text("")
    for k, nf in enumerate(nframes):
        d = root / f"set.{k:03d}"
        d.mkdir()
        np.save(d / "coord.npy", (rng.random((nf, na * 3)) * 10).astype(dtype))
        if not nopbc:
            np.save(d / "box.npy", np.tile(np.eye(3).reshape(9) * 10, (nf, 1)).astype(dtype))
        if "energy" in labels:
            np.save(d / "energy.npy", rng.standard_normal(nf).astype(dtype))
        if "force" in labels:
            np.save(d / "force.npy", rng.standard_normal((nf, na * 3)).astype(dtype))
        if "virial" in labels:
            np.save(d / "virial.npy", rng.standard_normal((nf, 9)).astype(dtype))
    return root


def test_synthetic_roundtrip(tmp_path):
    root = make_system(tmp_path / "s", nframes=(3, 2), dtype=np.float64)
    s = load_system(root)
    assert isinstance(s, System)
    assert (s.natoms, s.nframes, s.set_nframes, s.pbc) == (4, 5, (3, 2), True)
    raw0 = np.load(root / "set.000" / "coord.npy")
    raw1 = np.load(root / "set.001" / "coord.npy")
    np.testing.assert_array_equal(s.coord.reshape(5, -1), np.concatenate([raw0, raw1]))
    assert s.coord.shape == (5, 4, 3) and s.box.shape == (5, 3, 3) and s.virial.shape == (5, 9)
    assert s.energy.shape == (5,) and s.force.shape == (5, 4, 3)
    assert s.atype.dtype == np.int32 and s.type_map == ["O", "H"]


def test_energy_column_and_flat_single_frame(tmp_path):
    root = make_system(tmp_path / "s", nframes=(1,), labels=("energy",))
    np.save(root / "set.000" / "energy.npy", np.array([[1.5]], np.float32))
    np.save(root / "set.000" / "coord.npy", np.arange(12, dtype=np.float32))  # one frame, flat
    np.save(root / "set.000" / "box.npy", (np.eye(3) * 10).reshape(9))
    s = load_system(root)
    assert s.energy.tolist() == [1.5] and s.coord.shape == (1, 4, 3) and s.force is None


def test_nopbc_ignores_box_file(tmp_path):
    root = make_system(tmp_path / "s", nopbc=True)
    np.save(root / "set.000" / "box.npy", np.zeros((3, 9)))  # ignored under nopbc
    s = load_system(root)
    assert s.pbc is False and s.box is None


def test_type_map_by_name_and_passthrough(tmp_path):
    root = make_system(tmp_path / "s", types=(0, 1, 1, 0), type_map=("O", "H"))
    assert load_system(root, ["H", "O"]).atype.tolist() == [1, 0, 0, 1]
    assert load_system(root, ["C", "H", "N", "O"]).atype.tolist() == [3, 1, 1, 3]
    assert load_system(root, ["C", "H", "N", "O"]).type_map == ["C", "H", "N", "O"]
    # an unused type_map.raw entry missing from the global map is fine
    root2 = make_system(tmp_path / "t", types=(0, 0), type_map=("Cu", "Zr"))
    assert load_system(root2, ["Cu"]).atype.tolist() == [0, 0]
    # without type_map.raw the indices are used as they are
    root3 = make_system(tmp_path / "u", types=(1, 0, 1), type_map=None)
    assert load_system(root3, ["A", "B"]).atype.tolist() == [1, 0, 1]
    assert load_system(root3).type_map is None


# ----------------------------------------------------------------------------- bad inputs
def _write(path: Path, text: str) -> None:
    path.write_text(text)


def _np(path: Path, arr) -> None:
    np.save(path, arr, allow_pickle=True)


def _npz(path: Path) -> None:
    with open(path, "wb") as fh:  # an .npz archive under a .npy name
        np.savez(fh, a=np.zeros(3))


def _box(root: Path, cell) -> None:
    np.save(root / "set.000" / "box.npy", np.tile(np.asarray(cell, float).reshape(9), (3, 1)))


S0 = "set.000"
BAD_CASES = {
    # name: (mutation(root), file named in the message, fragment of the message)
    "missing type.raw": (lambda r: (r / "type.raw").unlink(), "type.raw", "missing"),
    "empty type.raw": (lambda r: _write(r / "type.raw", "\n  \n"), "type.raw", "empty"),
    "non-integer type": (lambda r: _write(r / "type.raw", "0\n1\nO\n0\n"), "type.raw", "not an integer"),
    "float type": (lambda r: _write(r / "type.raw", "0 1 1.5 0"), "type.raw", "not an integer"),
    "negative type": (lambda r: _write(r / "type.raw", "0 1 -1 0"), "type.raw", "negative"),
    "type beyond type_map.raw": (lambda r: _write(r / "type.raw", "0 1 2 0"), "type.raw", "no entry in type_map.raw"),
    "duplicate type_map.raw": (lambda r: _write(r / "type_map.raw", "O\nO\n"), "type_map.raw", "more than once"),
    "empty type_map.raw": (lambda r: _write(r / "type_map.raw", ""), "type_map.raw", "empty"),
    "no sets": (lambda r: __import__("shutil").rmtree(r / S0), "s", "no set.* directories"),
    "missing coord": (lambda r: (r / S0 / "coord.npy").unlink(), "coord.npy", "missing"),
    "text as npy": (lambda r: _write(r / S0 / "coord.npy", "1 2 3\n"), "coord.npy", "not a .npy file"),
    "object array": (
        lambda r: _np(r / S0 / "energy.npy", np.array([{}, 1, "x"], dtype=object)),
        "energy.npy",
        "cannot be loaded",
    ),
    "string array": (lambda r: _np(r / S0 / "force.npy", np.array(["a", "b"])), "force.npy", "dtype"),
    "npz archive": (lambda r: _npz(r / S0 / "box.npy"), "box.npy", "npz"),
    "coord width": (
        lambda r: _np(r / S0 / "coord.npy", np.zeros((3, 11))),
        "coord.npy",
        "coord.npy has 11 values per frame, expected 4 atoms × 3 = 12 from type.raw",
    ),
    "force width": (lambda r: _np(r / S0 / "force.npy", np.zeros((3, 13))), "force.npy", "13 values per frame"),
    "box width": (lambda r: _np(r / S0 / "box.npy", np.ones((3, 6))), "box.npy", "6 values per frame"),
    "virial width": (lambda r: _np(r / S0 / "virial.npy", np.zeros((3, 3))), "virial.npy", "3 values per frame"),
    "energy frames": (lambda r: _np(r / S0 / "energy.npy", np.zeros(2)), "energy.npy", "2 frames but coord.npy"),
    "box frames": (lambda r: _box_frames(r), "box.npy", "4 frames but coord.npy"),
    "zero frames": (lambda r: _np(r / S0 / "coord.npy", np.zeros((0, 12))), "coord.npy", "0 frames"),
    "scalar": (lambda r: _np(r / S0 / "energy.npy", np.float64(1.0)), "energy.npy", "scalar"),
    "missing box": (lambda r: (r / S0 / "box.npy").unlink(), "box.npy", "nopbc"),
    "nan coord": (lambda r: _poke(r / S0 / "coord.npy", np.nan), "coord.npy", "NaN or Inf (frame 1)"),
    "inf energy": (lambda r: _poke(r / S0 / "energy.npy", np.inf), "energy.npy", "NaN or Inf"),
    "nan force": (lambda r: _poke(r / S0 / "force.npy", np.nan), "force.npy", "NaN or Inf"),
    "nan virial": (lambda r: _poke(r / S0 / "virial.npy", -np.inf), "virial.npy", "NaN or Inf"),
    "nan box": (lambda r: _poke(r / S0 / "box.npy", np.nan), "box.npy", "NaN or Inf"),
    "singular box": (lambda r: _box(r, [[10, 0, 0], [0, 10, 0], [10, 10, 0]]), "box.npy", "non-positive volume"),
    "zero box": (lambda r: _box(r, np.zeros((3, 3))), "box.npy", "non-positive volume"),
    "left-handed box": (lambda r: _box(r, [[0, 10, 0], [10, 0, 0], [0, 0, 10]]), "box.npy", "non-positive volume"),
}


def _poke(file: Path, value: float) -> None:
    a = np.load(file)
    a.reshape(a.shape[0], -1)[1, 0] = value
    np.save(file, a)


def _box_frames(root: Path) -> None:
    np.save(root / S0 / "box.npy", np.tile(np.eye(3).reshape(9) * 10, (4, 1)))


@pytest.mark.parametrize("case", list(BAD_CASES))
def test_bad_input(tmp_path, case):
    mutate, file, fragment = BAD_CASES[case]
    root = make_system(tmp_path / "s")
    mutate(root)
    with pytest.raises(InputError) as info:
        load_system(root)
    msg = str(info.value)
    assert "\n" not in msg
    assert file in msg and fragment in msg, msg
    assert str(root) in msg  # the full path, not just the file name


def test_missing_dir_and_file_path(tmp_path):
    with pytest.raises(InputError, match="not found"):
        load_system(tmp_path / "nope")
    (tmp_path / "f").write_text("")
    with pytest.raises(InputError, match="found a file"):
        load_system(tmp_path / "f")


def test_label_in_some_sets_only(tmp_path):
    root = make_system(tmp_path / "s", nframes=(3, 2))
    (root / "set.001" / "virial.npy").unlink()
    with pytest.raises(InputError) as info:
        load_system(root)
    msg = str(info.value)
    assert "set.001/virial.npy" in msg and "set.000/virial.npy exists" in msg


def test_global_type_map_errors(tmp_path):
    root = make_system(tmp_path / "s", types=(0, 1), type_map=("O", "H"))
    with pytest.raises(InputError, match=r"type_map\.raw: element 'O' .* not in the type_map"):
        load_system(root, ["H", "C"])
    with pytest.raises(InputError, match="type_map: element 'H' is listed more than once"):
        load_system(root, ["H", "O", "H"])
    root2 = make_system(tmp_path / "t", types=(0, 2), type_map=None)
    with pytest.raises(InputError, match=r"type\.raw: atom type 2 has no entry in the type_map"):
        load_system(root2, ["A", "B"])


# ----------------------------------------------------------------------------- shared datasets
def test_water():
    root = require("water")
    s0 = load_system(root / "data_0")
    assert (s0.natoms, s0.nframes, s0.pbc, s0.type_map) == (192, 80, True, ["O", "H"])
    assert s0.coord.shape == (80, 192, 3) and s0.coord.dtype == np.float64
    assert s0.box.shape == (80, 3, 3) and s0.box.dtype == np.float64
    assert s0.energy.shape == (80,) and s0.force.shape == (80, 192, 3) and s0.virial is None
    assert s0.atype.dtype == np.int32 and np.bincount(s0.atype).tolist() == [64, 128]
    raw = np.load(root / "data_0" / "set.000" / "coord.npy")
    np.testing.assert_array_equal(s0.coord[5].reshape(-1), raw[5].astype(np.float64))
    s1 = load_system(root / "data_1")
    assert s1.nframes == 160 and s1.set_nframes == (80, 80)
    last = np.load(root / "data_1" / "set.001" / "energy.npy")
    np.testing.assert_array_equal(s1.energy[80:], last.astype(np.float64))
    # a global map in the other order reverses the types
    rev = load_system(root / "data_0", ["H", "O"])
    np.testing.assert_array_equal(rev.atype, 1 - s0.atype)
    assert rev.type_map == ["H", "O"]


def test_cu_asc22():
    root = require("cu_asc22")
    paths = find_systems(root)
    systems = [load_system(p, ["Cu"]) for p in paths]
    assert len(systems) == 169 and sum(s.nframes for s in systems) == 15566
    assert {s.natoms for s in systems} == {1, 12, 16, 32}
    assert sum(s.virial is not None for s in systems) == 166
    assert sum(s.nframes for s in systems if s.virial is not None) == 12566
    assert all(s.pbc and (s.atype == 0).all() for s in systems)
    vac = load_system(root / "vacuum", ["Cu"])
    assert (vac.natoms, vac.nframes, vac.virial.shape) == (1, 200, (200, 9))
    with pytest.raises(InputError, match="type_map.raw: element 'Cu'"):
        load_system(root / "vacuum", ["Ag"])


def test_almgcu():
    root = require("almgcu_jiang2021_subset")
    paths = find_systems(root)
    systems = [load_system(p, ["Mg", "Al", "Cu"]) for p in paths]
    assert len(systems) == 258 and sum(s.nframes for s in systems) == 7200
    assert {s.natoms for s in systems} == {12, 16, 20, 32}
    no_virial = sorted(Path(s.path).name for s in systems if s.virial is None)
    assert no_virial == ["init.001", "init.370", "init.371"]
    assert sum(s.nframes for s in systems if s.virial is not None) == 5175
    # mapping by name to another global order
    s = systems[0]
    other = load_system(s.path, ["Cu", "Mg", "Al"])
    lut = np.array([1, 2, 0])  # Mg->1, Al->2, Cu->0
    np.testing.assert_array_equal(other.atype, lut[s.atype])


def test_nopbc_cho():
    root = require("nopbc_cho_combustion")
    systems = [load_system(p, ["C", "H", "O"]) for p in find_systems(root)]
    assert [Path(s.path).name for s in systems] == ["C1H4O2", "C3H3O4", "C4H3O1"]
    assert [s.natoms for s in systems] == [7, 10, 8]
    assert sum(s.nframes for s in systems) == 2062
    for s in systems:
        assert s.pbc is False and s.box is None and s.virial is None
        assert s.coord.dtype == np.float64 and s.energy.shape == (s.nframes,)
    # C1H4O2: one C, four H, two O
    assert np.bincount(systems[0].atype, minlength=3).tolist() == [1, 4, 2]
