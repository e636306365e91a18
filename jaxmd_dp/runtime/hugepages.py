"""Transparent huge pages for XLA's CPU buffers, through glibc's ``glibc.malloc.hugetlb=1`` tunable; and the
buffer kept in malloc's heaps between steps (:func:`keep_freed_blocks`).

XLA:CPU allocates a program's temporary buffer with ``malloc`` on every run and frees it afterwards (tens
of MB for a training step). glibc serves a block that large from a fresh ``mmap`` each time, so every step
page-faulted its 4-KiB pages in again (a large share of the step in kernel time) and then walked the step's
reads and writes through 4-KiB TLB entries. With the tunable, glibc advises the kernel to back such
blocks with 2-MiB pages (``madvise(MADV_HUGEPAGE)``), which the kernel's default THP mode, ``madvise``,
honours: far fewer faults and TLB misses (figures: docs/performance.md).

glibc reads its tunables only when a process starts. So our command-line tools (``python -m jaxmd_dp.<tool>``
and ``jaxmd-dp``) start over once, with the tunable added to ``GLIBC_TUNABLES``, before anything heavy is
imported (:func:`reexec_with_hugepages`, called by the package's ``__init__``; it costs one interpreter
start). Nothing else is touched: a notebook or a script that imports jaxmd_dp keeps its process as it is,
and the training summary says whether huge pages are on (:func:`status`). ``JAXMD_DP_HUGEPAGES=0`` turns the
restart off; a ``glibc.malloc.hugetlb`` the user set is kept as it is.

Huge pages still leave the block mapped and unmapped on every step, each 2-MiB page faulted in and zeroed
again. Our tools therefore also tell glibc (``mallopt``, at start, :func:`keep_freed_blocks`) never to serve a
block from its own mapping and not to give freed memory back to the kernel: a block up to glibc's 64-MiB heap
size then comes from an arena's heap and stays there for the next step (water float32's buffer, Cu
float64's; docs/performance.md). Larger blocks are mapped as before. The cost: memory the process freed
stays with it until it ends, and each thread's arena keeps its own blocks (a higher peak RSS, which levels
off over a long run).
``JAXMD_DP_KEEP_BUFFERS=0`` turns this off.

This module imports nothing beyond the standard library: it runs before jax is loaded.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

TUNABLE = "glibc.malloc.hugetlb"
THP_MODE_FILE = "/sys/kernel/mm/transparent_hugepage/enabled"
OPT_OUT = "JAXMD_DP_HUGEPAGES"  # "0": never restart for it
RESTARTED = "_JAXMD_DP_HUGEPAGES_RESTARTED"  # set in the restarted process: never loop
MIN_GLIBC = (2, 35)  # the tunable's first release
KEEP_OPT_OUT = "JAXMD_DP_KEEP_BUFFERS"  # "0": leave glibc's malloc settings alone
M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # glibc's mallopt parameters (malloc.h)
TRIM_THRESHOLD = 1 << 30  # free memory at a heap's top kept up to this (bytes): in practice, all of it
_kept = False  # whether keep_freed_blocks() changed this process's malloc settings
KEPT = "kept in malloc's heaps between steps (mallopt M_MMAP_MAX 0)"  # buffers_status() when they are


def thp_mode(path: str = THP_MODE_FILE) -> str | None:
    """The kernel's transparent-huge-page mode: ``always``, ``madvise`` or ``never`` (None when unknown)."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    start, end = text.find("["), text.find("]")
    return text[start + 1 : end] if 0 <= start < end else None


def glibc_version() -> tuple[int, int] | None:
    """(major, minor) of the C library when it is glibc, else None."""
    try:
        name, version = os.confstr("CS_GNU_LIBC_VERSION").split()
        major, minor = version.split(".")[:2]
        return (int(major), int(minor)) if name == "glibc" else None
    except (AttributeError, ValueError, OSError):  # not glibc, or no confstr (not on Linux)
        return None


def tunable_value(environ: Mapping[str, str]) -> str | None:
    """The value of ``glibc.malloc.hugetlb`` in ``environ['GLIBC_TUNABLES']``, None when not set there."""
    for item in environ.get("GLIBC_TUNABLES", "").split(":"):
        key, _, value = item.partition("=")
        if key == TUNABLE:
            return value
    return None


def is_our_tool(orig_argv: Sequence[str]) -> bool:
    """Whether the interpreter was started as one of our tools: ``python [options] -m jaxmd_dp[.x]`` or the
    ``jaxmd-dp`` script (``sys.orig_argv``)."""
    args = list(orig_argv[1:])
    with_value = {"-W", "-X", "--check-hash-based-pycs"}  # interpreter options that take the next argument
    i = 0
    while i < len(args):
        a = args[i]
        if a == "-m":
            return i + 1 < len(args) and args[i + 1].split(".")[0] == "jaxmd_dp"
        if a.startswith("-m"):
            return a[2:].split(".")[0] == "jaxmd_dp"
        if a in ("-c", "-") or a.startswith("-c"):
            return False
        if not a.startswith("-"):  # the script
            return os.path.basename(a) == "jaxmd-dp"
        i += 2 if a in with_value else 1
    return False


def restart_environ(
    environ: Mapping[str, str], orig_argv: Sequence[str], platform: str, glibc: tuple[int, int] | None, mode: str | None
) -> dict[str, str] | None:
    """The environment to restart this process with so that glibc uses huge pages, or None to go on as is:
    only for our tools, on Linux with glibc ≥ :data:`MIN_GLIBC` and the kernel's THP mode
    ``madvise`` (``always`` gives huge pages without it, ``never`` none at all), when neither the user
    (``JAXMD_DP_HUGEPAGES=0``, or their own ``glibc.malloc.hugetlb``) nor an earlier restart decided."""
    if (
        platform != "linux"
        or glibc is None
        or glibc < MIN_GLIBC
        or mode != "madvise"
        or environ.get(OPT_OUT) == "0"
        or RESTARTED in environ
        or tunable_value(environ) is not None
        or not is_our_tool(orig_argv)
    ):
        return None
    tunables = environ.get("GLIBC_TUNABLES", "")
    return {**environ, "GLIBC_TUNABLES": f"{tunables}:{TUNABLE}=1" if tunables else f"{TUNABLE}=1", RESTARTED: "1"}


def reexec_with_hugepages() -> None:
    """Start this process over with glibc's huge pages on, when :func:`restart_environ` says so (the same
    interpreter, options and arguments, ``sys.orig_argv``; the same process id, so MPI launchers are not
    disturbed). Returns when no restart is needed or the restart fails."""
    orig_argv = getattr(sys, "orig_argv", None)
    if not orig_argv or "jax" in sys.modules:  # too late to start over cheaply: leave the process alone
        return
    env = restart_environ(os.environ, orig_argv, sys.platform, glibc_version(), thp_mode())
    if env is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    try:  # argv[0] the interpreter's own path, so a venv resolves as before
        os.execve(sys.executable, [sys.executable, *orig_argv[1:]], env)
    except OSError:
        pass


def _glibc_malloc() -> bool:
    """This process's malloc is glibc's, on Linux: the one :func:`keep_freed_blocks` knows how to set."""
    return sys.platform == "linux" and glibc_version() is not None


def keep_freed_blocks(orig_argv: Sequence[str] | None = None, only_tools: bool = True) -> bool:
    """With glibc, unless ``JAXMD_DP_KEEP_BUFFERS=0``: ``mallopt`` so that glibc serves every block from its
    heaps (``M_MMAP_MAX`` 0) and keeps freed memory (``M_TRIM_THRESHOLD`` 1 GiB), so XLA's per-step buffer is
    reused in place instead of mapped, faulted in and zeroed on every step. ``only_tools``: only in our
    command-line tools (:func:`is_our_tool` of ``orig_argv``, default ``sys.orig_argv``; a notebook or script
    that imports jaxmd_dp keeps glibc's defaults; benchmarks pass False). Returns whether the settings are made."""
    global _kept
    orig_argv = getattr(sys, "orig_argv", None) if orig_argv is None else orig_argv
    if (
        _kept
        or not _glibc_malloc()
        or os.environ.get(KEEP_OPT_OUT) == "0"
        or (only_tools and not (orig_argv and is_our_tool(orig_argv)))
    ):
        return _kept
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        _kept = bool(libc.mallopt(M_MMAP_MAX, 0)) and bool(libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    except (OSError, AttributeError):  # no mallopt in this process's C library
        _kept = False
    return _kept


def buffers_status() -> str:
    """One line for the training summary: whether freed CPU buffers stay in malloc's heaps
    (:func:`keep_freed_blocks`)."""
    if _kept:
        return KEPT
    if not _glibc_malloc():
        return "the C library's default (not glibc on Linux)"
    if os.environ.get(KEEP_OPT_OUT) == "0":
        why = "JAXMD_DP_KEEP_BUFFERS=0"
    elif is_our_tool(getattr(sys, "orig_argv", None) or []):
        why = "glibc refused the settings"
    else:
        why = "not a jaxmd_dp tool: jaxmd_dp.runtime.hugepages.keep_freed_blocks(only_tools=False) turns it on"
    return f"glibc's default, unmapped after each step ({why})"


def status(environ: Mapping[str, str] | None = None) -> str:
    """One line for the training summary: whether XLA's CPU buffers get huge pages in this process."""
    environ = os.environ if environ is None else environ
    if sys.platform != "linux":
        return "not on Linux"
    mode, value = thp_mode(), tunable_value(environ)
    if mode is None:
        return "unknown (no THP setting readable)"
    if mode == "always":
        return "on (the kernel's THP mode is always)"
    if mode == "never":
        return "off (the kernel's THP mode is never)"
    if value not in (None, "0") and (glibc_version() or (0, 0)) >= MIN_GLIBC:
        return f"on (GLIBC_TUNABLES {TUNABLE}={value})"
    return (
        f"off: start Python with GLIBC_TUNABLES={TUNABLE}=1 for faster CPU steps "
        "(the jaxmd_dp command-line tools do this themselves)"
    )
