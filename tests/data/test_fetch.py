"""ensure_water_data via JAXMD_DP_DATA_MIRROR (local dir or file:// URL); never the network."""

from __future__ import annotations

import hashlib
import re
import shutil
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).absolute().parents[1]))
from shared_paths import require, shared_dir  # noqa: E402

from jaxmd_dp.data import fetch  # noqa: E402
from jaxmd_dp.data.fetch import MIRROR_ENV, WATER_FILES, WATER_URL, ensure_water_data  # noqa: E402
from jaxmd_dp.data.system import load_system  # noqa: E402
from jaxmd_dp.errors import InputError  # noqa: E402


@pytest.fixture
def no_network(monkeypatch):
    """Any urlopen of a non-file URL fails as if offline."""
    real = urllib.request.urlopen

    def fake(url, *args, **kwargs):
        if not str(url).startswith("file:"):
            raise urllib.error.URLError("offline (test)")
        return real(url, *args, **kwargs)

    monkeypatch.setattr(urllib.request, "urlopen", fake)


def _siblings(dest: Path) -> list[str]:
    return sorted(p.name for p in dest.parent.iterdir())


def test_checksums_match_shared_water():
    water = require("water")
    on_disk = {p.relative_to(water).as_posix() for p in water.rglob("*") if p.is_file()}
    assert on_disk == set(WATER_FILES) and len(WATER_FILES) == 28
    for rel, sha in WATER_FILES.items():
        assert hashlib.sha256((water / rel).read_bytes()).hexdigest() == sha, rel
    assert re.search(r"/deepmd-kit/[0-9a-f]{40}/examples/water/data$", WATER_URL)


def test_mirror_directory(tmp_path, monkeypatch, no_network):
    require("water")
    monkeypatch.setenv(MIRROR_ENV, str(shared_dir()))
    dest = tmp_path / "data" / "water"
    assert ensure_water_data(dest) == str(dest)
    assert _siblings(dest) == ["water"]  # no temp dirs left behind
    assert fetch.water_data_complete(dest)
    s = load_system(dest / "data_1", ["O", "H"])
    assert (s.nframes, s.natoms) == (160, 192)
    # complete: returned as is, the mirror is not even looked at
    monkeypatch.setenv(MIRROR_ENV, str(tmp_path / "no-such-mirror"))
    assert ensure_water_data(str(dest)) == str(dest)


def test_mirror_url_and_repair(tmp_path, monkeypatch, no_network):
    require("water")
    monkeypatch.setenv(MIRROR_ENV, shared_dir().as_uri() + "/")
    dest = tmp_path / "water"
    dest.mkdir()
    (dest / "data_2").mkdir()
    (dest / "data_2" / "type.raw").write_text("garbage\n")  # a broken earlier copy
    (dest / "notes.txt").write_text("kept")
    ensure_water_data(dest)
    assert fetch.water_data_complete(dest)
    assert (dest / "notes.txt").read_text() == "kept"
    assert _siblings(dest) == ["water"]


def test_bad_checksum_leaves_nothing(tmp_path, monkeypatch, no_network):
    water = require("water")
    mirror = tmp_path / "mirror"
    shutil.copytree(water, mirror / "water")
    with open(mirror / "water" / "data_3" / "set.000" / "energy.npy", "r+b") as fh:
        fh.seek(-4, 2)
        fh.write(b"\0\0\0\0")
    monkeypatch.setenv(MIRROR_ENV, str(mirror))
    dest = tmp_path / "out" / "water"
    with pytest.raises(InputError) as info:
        ensure_water_data(dest)
    msg = str(info.value)
    assert "\n" not in msg and "data_3/set.000/energy.npy" in msg and "sha256" in msg
    assert not dest.exists() and _siblings(dest) == []


def test_offline_message(tmp_path, monkeypatch, no_network):
    monkeypatch.delenv(MIRROR_ENV, raising=False)
    dest = tmp_path / "water"
    with pytest.raises(InputError) as info:
        ensure_water_data(dest)
    msg = str(info.value)
    assert "\n" not in msg and WATER_URL in msg and MIRROR_ENV in msg and "offline" in msg
    assert not dest.exists() and _siblings(dest) == []


def test_missing_mirror_dir(tmp_path, monkeypatch, no_network):
    monkeypatch.setenv(MIRROR_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(InputError, match=f"{MIRROR_ENV}=.*directory not found"):
        ensure_water_data(tmp_path / "water")
    # a mirror directory without the files
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv(MIRROR_ENV, str(tmp_path / "empty"))
    with pytest.raises(InputError, match=r"empty/water/data_0/set.000/box.npy: cannot read"):
        ensure_water_data(tmp_path / "water")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]
