"""Batches from many systems, following DeePMD-kit's ``DeepmdDataSystem``.

A batch is drawn in two steps: pick a system with probability ``probs[i]``, then take that system's
next ``batch_size[i]`` frames from a per-epoch shuffled order of its frames. All randomness comes
from one ``np.random.Generator`` (PCG64) owned by the sampler, so ``state_dict()`` /
``load_state_dict()`` reproduce the batch stream exactly.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from jaxmd_dp.data.system import System
from jaxmd_dp.errors import InputError

AUTO_BS_RULE = 32  # "auto" batch size: smallest bs with bs * natoms >= 32


# ----------------------------------------------------------------------------- batch sizes
def resolve_batch_sizes(spec: int | str | Sequence[int], natoms: Sequence[int]) -> list[int]:
    """Batch size per system from a config ``batch_size``.

    spec: int (every system); list of int (one per system); "auto" / "auto:N" (smallest bs with
    bs * natoms >= N, N = 32 by default); "max:N" (largest bs with bs * natoms <= N, at least 1).
    """
    n = len(natoms)
    if isinstance(spec, bool):
        raise InputError(f"batch_size: expected an int, a list or 'auto[:N]', got {spec!r}")
    if isinstance(spec, (int, np.integer)):
        if spec < 1:
            raise InputError(f"batch_size: must be >= 1, got {spec}")
        return [int(spec)] * n
    if isinstance(spec, str):
        words = spec.split(":")
        if words[0] not in ("auto", "max") or len(words) > 2:
            raise InputError(f"batch_size: unknown rule {spec!r}; expected an int, a list, 'auto', 'auto:N' or 'max:N'")
        if words[0] == "max" and len(words) == 1:
            raise InputError("batch_size: 'max' needs a number of atoms, e.g. 'max:256'")
        try:
            rule = int(words[1]) if len(words) == 2 else AUTO_BS_RULE
        except ValueError:
            raise InputError(f"batch_size: {spec!r}: {words[1]!r} is not an integer") from None
        if rule < 1:
            raise InputError(f"batch_size: {spec!r}: the number of atoms must be >= 1")
        if words[0] == "auto":
            return [-(-rule // int(na)) for na in natoms]  # ceil(rule / natoms)
        return [max(1, rule // int(na)) for na in natoms]
    if isinstance(spec, (list, tuple, np.ndarray)):
        if len(spec) != n:
            raise InputError(f"batch_size: list has {len(spec)} entries but there are {n} systems")
        out = []
        for b in spec:
            if isinstance(b, bool) or not isinstance(b, (int, np.integer)) or b < 1:
                raise InputError(f"batch_size: list entries must be integers >= 1, got {b!r}")
            out.append(int(b))
        return out
    raise InputError(f"batch_size: expected an int, a list or 'auto[:N]', got {spec!r}")


def num_batches(system: System, batch_size: int) -> int:
    """Batches per epoch of one system, as DeePMD-kit: sum over sets of max(1, set_frames // bs)."""
    sizes = system.set_nframes or (system.nframes,)
    return int(sum(max(1, nf // batch_size) for nf in sizes))


# ----------------------------------------------------------------------------- probabilities
def system_probs(
    nbatches: Sequence[int], auto_prob: str = "prob_sys_size", sys_probs: Sequence[float] | None = None
) -> np.ndarray:
    """(nsystems,) float64 probabilities of drawing each system; they sum to 1.

    sys_probs (when given, wins over auto_prob): explicit weights, normalised. As in DeePMD-kit, a
    negative entry means "automatic": the probability left over by the non-negative entries
    (which must then sum to <= 1) is shared among those systems in proportion to their batches.
    auto_prob: "prob_uniform"; "prob_sys_size" (proportional to batches per system);
    "prob_sys_size;stt:end:w;..." (systems [stt, end) share weight w, normalised over blocks,
    in proportion to their batches; systems in no block are never drawn).
    """
    nb = np.asarray(nbatches, dtype=np.float64)
    n = nb.shape[0]
    if n == 0:
        raise InputError("systems: no data systems given")
    if sys_probs is not None:
        return _explicit_probs(sys_probs, nb)
    if not isinstance(auto_prob, str):
        raise InputError(f"auto_prob: expected a string, got {auto_prob!r}")
    if auto_prob == "prob_uniform":
        return np.full(n, 1.0 / n)
    if auto_prob == "prob_sys_size":
        return nb / nb.sum()
    if auto_prob.startswith("prob_sys_size;"):
        return _block_probs(auto_prob, nb)
    raise InputError(
        f"auto_prob: unknown style {auto_prob!r}; expected 'prob_uniform', 'prob_sys_size' "
        "or 'prob_sys_size;stt:end:weight;...'"
    )


def _explicit_probs(sys_probs: Sequence[float], nb: np.ndarray) -> np.ndarray:
    n = nb.shape[0]
    try:
        p = np.asarray(sys_probs, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise InputError(f"sys_probs: expected a list of numbers, got {sys_probs!r}") from None
    if p.shape[0] != n:
        raise InputError(f"sys_probs: list has {p.shape[0]} entries but there are {n} systems")
    if not np.isfinite(p).all():
        raise InputError("sys_probs: contains NaN or Inf")
    auto = p < 0
    if not auto.any():
        if p.sum() <= 0:
            raise InputError("sys_probs: all entries are zero")
        return p / p.sum()
    assigned = p[~auto].sum()
    if assigned > 1.0 + 1e-8:
        raise InputError(
            f"sys_probs: non-negative entries sum to {assigned:.6g} > 1, leaving nothing for the "
            "negative (automatic) entries"
        )
    out = np.where(auto, 0.0, p)
    rest = max(0.0, 1.0 - assigned)
    out[auto] = rest * nb[auto] / nb[auto].sum()
    if out.sum() <= 0:
        raise InputError("sys_probs: all probabilities are zero")
    return out / out.sum()


def _block_probs(style: str, nb: np.ndarray) -> np.ndarray:
    n = nb.shape[0]
    out = np.zeros(n)
    covered = np.zeros(n, dtype=bool)
    blocks = [b for b in style.split(";")[1:] if b.strip()]
    if not blocks:
        raise InputError(f"auto_prob: {style!r} has no stt:end:weight blocks")
    parsed = []
    for b in blocks:
        parts = b.split(":")
        try:
            if len(parts) != 3:
                raise ValueError
            stt, end, w = int(parts[0]), int(parts[1]), float(parts[2])
        except ValueError:
            raise InputError(f"auto_prob: block {b!r} is not stt:end:weight (two integers, a number)") from None
        if not (0 <= stt < end <= n):
            raise InputError(f"auto_prob: block {b!r} must satisfy 0 <= stt < end <= {n} (number of systems)")
        if not np.isfinite(w) or w < 0:
            raise InputError(f"auto_prob: block {b!r} has a negative or non-finite weight")
        if covered[stt:end].any():
            raise InputError(f"auto_prob: block {b!r} overlaps an earlier block")
        covered[stt:end] = True
        parsed.append((stt, end, w))
    total = sum(w for _, _, w in parsed)
    if total <= 0:
        raise InputError(f"auto_prob: {style!r}: block weights sum to zero")
    for stt, end, w in parsed:
        out[stt:end] = (w / total) * nb[stt:end] / nb[stt:end].sum()
    return out


# ----------------------------------------------------------------------------- systems / batches
def find_systems(root: str | Path, rglob_patterns: Sequence[str] | None = None, set_prefix: str = "set") -> list[str]:
    """System directories under ``root``: root itself if it holds type.raw, else every directory
    below it (recursively, sorted) that holds type.raw — DeePMD-kit's string ``systems``
    (``expand_sys_str``); the frame-set directories (``<set_prefix>.*``) are not searched.

    rglob_patterns (``training_data.rglob_patterns``): DeePMD-kit's ``rglob_sys_str`` instead: every
    directory below root (not root itself) whose path matches one of the patterns in ``Path.rglob``
    (e.g. ``"sys.*"``, ``"iter.*/02.fp/data.*"``) and that holds type.raw, each once, sorted.
    """
    root = Path(root)
    if not root.is_dir():
        raise InputError(f"{root}: systems directory not found")
    if rglob_patterns is not None:
        return _rglob_systems(root, rglob_patterns)
    if (root / "type.raw").is_file():
        return [str(root)]
    found = _walk_systems(root, set_prefix)
    if not found:
        raise InputError(f"{root}: no systems found (no directory below it contains type.raw)")
    return found


def _walk_systems(root: Path, set_prefix: str) -> list[str]:
    """Every directory below ``root`` holding type.raw, sorted; ``<set_prefix>.*`` not searched."""
    found: list[str] = []
    seen: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        real = os.path.realpath(dirpath)
        if real in seen:
            dirnames[:] = []
            continue
        seen.add(real)
        if "type.raw" in filenames:
            found.append(dirpath)
        dirnames[:] = [d for d in dirnames if not d.startswith(f"{set_prefix}.")]
    return sorted(found, key=lambda d: Path(d).parts)


def _rglob_systems(root: Path, patterns: Sequence[str]) -> list[str]:
    if isinstance(patterns, str) or not patterns:
        raise InputError(f"rglob_patterns: expected a non-empty list of glob patterns, got {patterns!r}")
    found: set[Path] = set()
    for pattern in patterns:
        try:
            matches = list(root.rglob(pattern))
        except ValueError as e:  # e.g. an empty or absolute pattern
            raise InputError(f"rglob_patterns: {pattern!r} is not a valid pattern ({e})") from None
        found.update(d for d in matches if (d / "type.raw").is_file())
    if not found:
        raise InputError(
            f"{root}: no systems found (no directory below it matching rglob_patterns "
            f"{list(patterns)} contains type.raw)"
        )
    return [str(d) for d in sorted(found, key=lambda d: d.parts)]


def system_paths(
    systems: str | Sequence[str], rglob_patterns: Sequence[str] | None = None, set_prefix: str = "set"
) -> list[str]:
    """A config's ``systems`` as system directories, as DeePMD-kit's ``process_systems``: one directory,
    or each directory of a list, searched with :func:`find_systems` (a directory holding type.raw is
    itself a system; with ``rglob_patterns`` every list entry is searched by them). Without patterns, a
    list entry with no system in it is kept as given (reading it then says what is wrong)."""
    if isinstance(systems, (str, os.PathLike)):
        return find_systems(systems, rglob_patterns, set_prefix)
    out: list[str] = []
    for s in systems:
        p = Path(s)
        if rglob_patterns is not None:
            out += find_systems(p, rglob_patterns, set_prefix)
        elif p.is_dir() and not (p / "type.raw").is_file():
            out += _walk_systems(p, set_prefix) or [str(s)]
        else:
            out.append(str(s))
    return out


def make_batch(system: System, idx: np.ndarray, sys_index: int = 0) -> dict:
    """Frames ``idx`` of ``system`` as a batch dict (nb = len(idx)).

    coord (nb, natoms, 3) Å; box (nb, 3, 3) Å (zeros when nopbc); atype (natoms,) int32;
    energy (nb,) eV; force (nb, natoms, 3) eV/Å; virial (nb, 9) eV (zeros where absent);
    find_energy / find_force / find_virial 1.0 or 0.0; pbc bool; natoms int; sys_index int; frames (nb,)
    int, the frames' indices in the system.
    """
    idx = np.asarray(idx, dtype=np.int64)
    nb, na = idx.shape[0], system.natoms

    def take(arr: np.ndarray | None, shape: tuple[int, ...]) -> np.ndarray:
        if arr is None:
            return np.zeros(shape, dtype=np.float64)
        return np.ascontiguousarray(arr[idx], dtype=np.float64)

    return {
        "coord": take(system.coord, (nb, na, 3)),
        "box": take(system.box, (nb, 3, 3)),
        "atype": np.asarray(system.atype, dtype=np.int32),
        "energy": take(system.energy, (nb,)),
        "force": take(system.force, (nb, na, 3)),
        "virial": take(system.virial, (nb, 9)),
        "find_energy": 0.0 if system.energy is None else 1.0,
        "find_force": 0.0 if system.force is None else 1.0,
        "find_virial": 0.0 if system.virial is None else 1.0,
        "pbc": bool(system.pbc),
        "natoms": na,
        "sys_index": int(sys_index),
        "frames": idx,
    }


def iter_frames(system: System, batch_size: int, sys_index: int = 0) -> Iterator[dict]:
    """All frames of ``system`` in file order, ``batch_size`` at a time (the last may be shorter)."""
    if batch_size < 1:
        raise InputError(f"batch_size: must be >= 1, got {batch_size}")
    for start in range(0, system.nframes, batch_size):
        yield make_batch(system, np.arange(start, min(start + batch_size, system.nframes)), sys_index)


# ----------------------------------------------------------------------------- sampler
class DataSampler:
    """Draws training batches from several systems (DeePMD-kit's DeepmdDataSystem.get_batch).

    systems: loaded systems; batch_size: see :func:`resolve_batch_sizes`; auto_prob / sys_probs:
    see :func:`system_probs`; seed: seeds the sampler's own PCG64 generator (per-rank seeds are
    the caller's job). A system with fewer frames than its batch size yields all its frames
    (a shorter batch), as DeePMD-kit does.
    """

    def __init__(
        self,
        systems: Sequence[System],
        batch_size: int | str | Sequence[int] = "auto",
        auto_prob: str = "prob_sys_size",
        sys_probs: Sequence[float] | None = None,
        seed: int = 0,
    ):
        if not systems:
            raise InputError("systems: no data systems given")
        self.systems = list(systems)
        self.batch_sizes = resolve_batch_sizes(batch_size, [s.natoms for s in self.systems])
        self.nbatches = [num_batches(s, b) for s, b in zip(self.systems, self.batch_sizes)]
        self.probs = system_probs(self.nbatches, auto_prob, sys_probs)
        self.rng = np.random.Generator(np.random.PCG64(seed))
        self._perm: list[np.ndarray | None] = [None] * len(self.systems)
        self._cursor = [0] * len(self.systems)

    @property
    def nsystems(self) -> int:
        return len(self.systems)

    def next_batch(self) -> dict:
        """Draw a system by probability, then its next batch_size frames (see class doc)."""
        i = int(self.rng.choice(self.nsystems, p=self.probs))
        return self.next_batch_from(i)

    def next_batch_from(self, i: int) -> dict:
        """The next batch of system ``i`` (reshuffles its frames when fewer than bs remain)."""
        sys, bs = self.systems[i], self.batch_sizes[i]
        perm = self._perm[i]
        if perm is None or self._cursor[i] + bs > perm.shape[0]:
            perm = self.rng.permutation(sys.nframes)
            self._perm[i], self._cursor[i] = perm, 0
        idx = perm[self._cursor[i] : self._cursor[i] + bs]
        self._cursor[i] += bs
        return make_batch(sys, idx, i)

    def state_dict(self) -> dict:
        """JSON-serialisable state: generator state, per-system permutations and cursors."""
        st = self.rng.bit_generator.state
        return {
            "rng": {
                "bit_generator": st["bit_generator"],
                "state": str(st["state"]["state"]),  # 128-bit ints as strings: portable JSON
                "inc": str(st["state"]["inc"]),
                "has_uint32": int(st["has_uint32"]),
                "uinteger": int(st["uinteger"]),
            },
            "perm": [None if p is None else [int(x) for x in p] for p in self._perm],
            "cursor": [int(c) for c in self._cursor],
            "nframes": [s.nframes for s in self.systems],
            "batch_size": list(self.batch_sizes),
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` output; InputError if it was saved for different data."""
        try:
            nframes, bsz = list(state["nframes"]), list(state["batch_size"])
            perm, cursor, rng = state["perm"], state["cursor"], state["rng"]
        except (KeyError, TypeError):
            raise InputError(
                "sampler state: malformed (expected keys rng, perm, cursor, nframes, batch_size)"
            ) from None
        ours = [s.nframes for s in self.systems]
        if nframes != ours or bsz != self.batch_sizes or len(perm) != self.nsystems:
            raise InputError(
                f"sampler state: saved for {len(nframes)} systems with frames {nframes[:4]}... and batch "
                f"sizes {bsz[:4]}..., but the data has {self.nsystems} systems with frames {ours[:4]}... "
                f"and batch sizes {self.batch_sizes[:4]}... (different training data or batch_size?)"
            )
        self.rng.bit_generator.state = {
            "bit_generator": rng["bit_generator"],
            "state": {"state": int(rng["state"]), "inc": int(rng["inc"])},
            "has_uint32": int(rng["has_uint32"]),
            "uinteger": int(rng["uinteger"]),
        }
        self._perm = [None if p is None else np.asarray(p, dtype=np.int64) for p in perm]
        self._cursor = [int(c) for c in cursor]

    def summary_table(self, name: str) -> str:
        """DeePMD-kit's DataSystem summary (name e.g. "training" or "validation"); with a column of the
        frames left out per system when some system was filtered (``training_data.min_pair_dist``)."""
        filtered = any(s.dropped is not None for s in self.systems)
        return summary_table(
            name,
            [s.path for s in self.systems],
            [s.natoms for s in self.systems],
            self.batch_sizes,
            self.nbatches,
            list(self.probs),
            [s.pbc for s in self.systems],
            [s.dropped or 0 for s in self.systems] if filtered else None,
            [s.nframes for s in self.systems],
        )


def _fit_name(name: str, width: int) -> str:
    """Right-align in ``width``; too long -> "-- " + the last width-3 characters."""
    return name.rjust(width) if len(name) <= width else "-- " + name[len(name) - (width - 3) :]


def summary_table(
    name: str,
    paths: Sequence[str],
    natoms: Sequence[int],
    batch_sizes: Sequence[int],
    nbatches: Sequence[int],
    probs: Sequence[float],
    pbc: Sequence[bool],
    dropped: Sequence[int] | None = None,
    nframes: Sequence[int] | None = None,
) -> str:
    """The DeePMD-kit (2.x) data summary table as one multi-line string (no trailing newline).

    dropped (with ``nframes``, the frames kept): frames left out of each system
    (``training_data.min_pair_dist``), shown in a column ``dropped`` and in a total line."""
    width = 42
    extra = dropped is not None
    lines = [
        f"---Summary of DataSystem: {name:13s}-----------------------------------------------",
        f"found {len(paths)} system(s):",
        f"{_fit_name('system', width)}  {'natoms':>6s}  {'bch_sz':>6s}  {'n_bch':>6s}  "
        f"{'prob':>5s}  {'pbc':>3s}" + (f"  {'dropped':>7s}" if extra else ""),
    ]
    for k, (p, na, bs, nb, pr, pb) in enumerate(zip(paths, natoms, batch_sizes, nbatches, probs, pbc)):
        lines.append(
            f"{_fit_name(str(p), width)}  {na:6d}  {bs:6d}  {nb:6d}  {pr:5.3f}  {'T' if pb else 'F':>3s}"
            + (f"  {dropped[k]:7d}" if extra else "")
        )
    if extra:
        total = sum(dropped)
        kept = sum(nframes) if nframes is not None else None
        of = f" of {total + kept}" if kept is not None else ""
        lines.append(f"min_pair_dist: {total}{of} frames dropped (two atoms closer than min_pair_dist)")
    lines.append("-" * 86)
    return "\n".join(lines)
