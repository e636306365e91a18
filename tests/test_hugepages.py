"""glibc huge pages for XLA's CPU buffers: when our tools start over with the tunable, and what they report."""

import os
import sys

import pytest

from jaxmd_dp.runtime import hugepages as hp

CLI = ["/v/bin/python", "-m", "jaxmd_dp.train", "input.json"]
NEW_GLIBC = (2, 36)


def restart(environ=None, argv=CLI, platform="linux", glibc=NEW_GLIBC, mode="madvise"):
    return hp.restart_environ({} if environ is None else environ, argv, platform, glibc, mode)


@pytest.mark.parametrize(
    "argv, ours",
    [
        (["py", "-m", "jaxmd_dp.train", "x.json"], True),
        (["py", "-u", "-X", "importtime", "-m", "jaxmd_dp.test", "-m", "m"], True),
        (["py", "-mjaxmd_dp.freeze"], True),
        (["py", "/venv/bin/jaxmd-dp", "train", "x.json"], True),
        (["py", "-W", "ignore", "-m", "pytest", "-m", "jaxmd_dp"], False),
        (["py", "--check-hash-based-pycs", "never", "-m", "jaxmd_dp.train"], True),
        (["py", "-m", "jaxmd_dp_other"], False),
        (["py", "-c", "import jaxmd_dp"], False),
        (["py", "train.py", "-m", "jaxmd_dp.train"], False),
        (["py"], False),
    ],
)
def test_is_our_tool(argv, ours):
    assert hp.is_our_tool(argv) is ours


def test_restart_adds_the_tunable_once():
    env = restart({"PATH": "/bin"})
    assert env["GLIBC_TUNABLES"] == "glibc.malloc.hugetlb=1" and env["PATH"] == "/bin"
    assert restart(env) is None  # the restarted process goes on
    kept = restart({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"})["GLIBC_TUNABLES"]
    assert kept == "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"


@pytest.mark.parametrize(
    "kw",
    [
        {"environ": {"JAXMD_DP_HUGEPAGES": "0"}},  # the user's opt-out
        {"environ": {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}},  # the user's own setting is kept
        {"argv": ["py", "-m", "ipykernel_launcher"]},  # not our tool: a notebook keeps its process
        {"platform": "darwin"},
        {"glibc": None},  # musl, or no glibc
        {"glibc": (2, 34)},  # before the tunable existed
        {"mode": "always"},  # huge pages without it
        {"mode": "never"},  # none at all
        {"mode": None},  # no THP setting readable
    ],
)
def test_no_restart(kw):
    assert restart(**kw) is None


def test_thp_mode_and_tunable_value(tmp_path):
    f = tmp_path / "enabled"
    f.write_text("always [madvise] never\n")
    assert hp.thp_mode(str(f)) == "madvise"
    assert hp.thp_mode(str(tmp_path / "missing")) is None
    assert hp.tunable_value({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1:glibc.malloc.mmap_max=0"}) == "1"
    assert hp.tunable_value({"GLIBC_TUNABLES": "glibc.malloc.mmap_max=0"}) is None
    assert hp.tunable_value({}) is None


def test_status_names_how_to_turn_it_on():
    if sys.platform != "linux" or hp.thp_mode() != "madvise" or (hp.glibc_version() or (0, 0)) < hp.MIN_GLIBC:
        pytest.skip("this host's huge pages do not depend on the tunable")
    assert hp.status({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}).startswith("on (")
    off = hp.status({})
    assert off.startswith("off:") and "GLIBC_TUNABLES=glibc.malloc.hugetlb=1" in off


def expected_on_in_cli(env) -> bool:
    """Whether a CLI started with ``env`` has huge pages on: the status of the environment it restarts with."""
    restarted = restart(env, glibc=hp.glibc_version(), mode=hp.thp_mode(), platform=sys.platform)
    return hp.status(restarted or env).startswith("on")


def test_cli_starts_over_with_huge_pages():
    """The real restart: ``python -m jaxmd_dp.cli --version`` from an environment without the tunable."""
    import subprocess

    env = {
        k: v for k, v in os.environ.items() if k not in (hp.RESTARTED, "GLIBC_TUNABLES", hp.OPT_OUT, hp.KEEP_OPT_OUT)
    }
    r = subprocess.run(
        [sys.executable, "-m", "jaxmd_dp.cli", "--version"], env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr[-2000:]
    line = next((x for x in r.stdout.splitlines() if x.startswith("huge pages for XLA's CPU buffers: ")), "")
    assert line, r.stdout
    if expected_on_in_cli(env):
        assert ": on (" in line, line
    if sys.platform == "linux" and hp.glibc_version():  # and the step's buffer kept between steps
        assert r.stdout.splitlines()[-1] == "freed CPU buffers: " + hp.KEPT, r.stdout
    off = subprocess.run(
        [sys.executable, "-m", "jaxmd_dp.cli", "--version"],
        env={**env, hp.OPT_OUT: "0"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert off.returncode == 0, off.stderr[-2000:]
    if hp.thp_mode() == "madvise":  # opted out: no restart, so no tunable
        assert ": off" in off.stdout.splitlines()[-2], off.stdout


KEEP_PROBE = """
import ctypes, sys
from jaxmd_dp.runtime import hugepages as hp
kept = hp.keep_freed_blocks(orig_argv=sys.argv[1:], only_tools=sys.argv[1] != "any")
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
p = libc.malloc(48 << 20)  # larger than glibc's largest mmap threshold (32 MiB)
header = ctypes.c_size_t.from_address(p - ctypes.sizeof(ctypes.c_size_t)).value
print(kept, bool(header & 2), hp.buffers_status())  # bit 1 of a glibc chunk's size: IS_MMAPPED
"""


@pytest.mark.skipif(sys.platform != "linux" or hp.glibc_version() is None, reason="glibc's malloc only")
@pytest.mark.parametrize(
    "argv, env, kept",
    [
        (["any"], {}, True),  # a benchmark's explicit call
        (["py", "-m", "jaxmd_dp.train", "x.json"], {}, True),  # one of our tools
        (["py", "script.py"], {}, False),  # a script or notebook keeps glibc's defaults
        (["any"], {hp.KEEP_OPT_OUT: "0"}, False),  # opted out
    ],
)
def test_keep_freed_blocks_serves_large_blocks_from_the_heap(argv, env, kept):
    """In a fresh process: after keep_freed_blocks, a 48-MiB malloc is not a fresh mapping (glibc's chunk
    header says so), so XLA's per-step buffer can be reused in place; without it, it is mapped."""
    import subprocess

    base = {k: v for k, v in os.environ.items() if k != hp.KEEP_OPT_OUT}
    r = subprocess.run(
        [sys.executable, "-c", KEEP_PROBE, *argv], env={**base, **env}, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr[-2000:]
    said_kept, mapped, status = r.stdout.split(maxsplit=2)
    assert said_kept == str(kept) and mapped == str(not kept), r.stdout
    assert status.startswith("kept in malloc's heaps" if kept else "glibc's default"), status
