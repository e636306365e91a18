"""Who trains: this process alone, or one of several data-parallel workers.

Data parallelism has one rule everywhere: every worker draws its own batch (its own sampler, seeded by
its worker index), the gradients are averaged over all workers, and every worker applies the same
update, so the parameters stay identical. The global batch is the per-worker batch × the number of
workers, and the learning rate is scaled by the total worker count (``scale_by_worker``).

A worker is one device. A :class:`Workers` describes them for the :class:`~jaxmd_dp.train.loop.Trainer`:

- :func:`local_workers`: this process alone, with all its local devices (one worker per device, one
  jitted ``shard_map`` step over a 1-D mesh, gradients averaged with ``lax.pmean``). With one device
  this is the plain single-device step.
- :func:`mpi_workers`: one worker per MPI process (``mpirun -np N python -m jaxmd_dp.train CONFIG``),
  gradients averaged by an mpi4jax all-reduce inside the jitted step (``grad_reduce``). Needs the
  ``mpi`` extra (mpi4py, mpi4jax).
- :func:`jax_distributed_workers`: several processes/hosts without MPI, through
  ``jax.distributed.initialize``: one global mesh over every process's devices, the same
  ``shard_map`` step as in one process (XLA's collectives do the cross-process average).
- :func:`init_workers`: picks one of these from the launcher (:func:`detect_launcher`): MPI environment
  variables, or a coordinator address (``--coordinator`` / ``JAX_COORDINATOR_ADDRESS``); no config key.

Within one jitted step all workers must see arrays of one shape. Each step, :class:`WorkerBatches`
therefore draws the workers' batches from one *shape group* (systems with the same natoms, pbc and
batch size): the group is drawn with the group's total probability by a generator every worker shares,
then each worker draws a system inside the group with its own generator. Each worker's batch thus
follows exactly the sampler's system probabilities (only batches of one step are correlated in
shape), and no atoms are padded. MPI workers run separate programs and simply draw independently.

Only rank 0 writes files (``is_writer``); statistics are computed on rank 0 and broadcast
(``broadcast``); sampler states of all workers are gathered to rank 0 for checkpoints (``gather``).
"""

from __future__ import annotations

import functools
import os
import pickle
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jaxmd_dp.errors import InputError
from jaxmd_dp.runtime import hugepages

AXIS = "workers"  # the mesh axis that workers are spread over
SEED_STRIDE = 1000003  # worker w's sampler seed: seed + SEED_STRIDE · w
LOG_MODES = ("master", "collect", "workers")

# environment variables that MPI launchers set: world size (first found wins)
MPI_SIZE_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS")
JAX_COORDINATOR_VAR = "JAX_COORDINATOR_ADDRESS"
JAX_NUM_PROCESSES_VAR = "JAX_NUM_PROCESSES"
JAX_PROCESS_ID_VAR = "JAX_PROCESS_ID"


def _to_host(tree):
    """Arrays → numpy (picklable, device-free); other leaves unchanged."""
    return jax.tree_util.tree_map(lambda x: np.asarray(x) if isinstance(x, jax.Array) else x, tree)


def _identity(x):
    return x


def _gather_one(x):
    return [x]


def _noop():
    return None


@dataclass(frozen=True, eq=False)
class Workers:
    """The data-parallel context of this process.

    rank / nprocs: this process's index and the number of processes.
    size: the TOTAL number of workers (processes × workers per process); learning-rate scaling uses it.
    worker_ids: the global indices of this process's workers (one per device it drives).
    grad_reduce: mean over the processes' workers, traceable (used inside the jitted single-device step;
      None when there is nothing to reduce across processes, e.g. alone or on a mesh).
    mesh: a 1-D device mesh (axis ``AXIS``) when workers are spread over several devices with
      ``shard_map``; None for the single-device step.
    broadcast: host pytree from rank 0 to every process (others may pass None).
    gather: host object of every process → list on rank 0 (None on the others).
    barrier: wait for every process.
    launcher: "none" (one process), "mpi" or "jax" (jax.distributed).
    log_mode: ``--mpi-log``: "master" (only rank 0 logs), "collect" or "workers" (every rank logs).
    hosts: host name of every process, in rank order.
    """

    rank: int = 0
    size: int = 1
    nprocs: int = 1
    worker_ids: tuple[int, ...] = (0,)
    grad_reduce: Callable | None = None
    mesh: Any = None
    broadcast: Callable[[Any], Any] = field(default=_identity)
    gather: Callable[[Any], Any] = field(default=_gather_one)
    barrier: Callable[[], None] = field(default=_noop)
    launcher: str = "none"
    log_mode: str = "master"
    hosts: tuple[str, ...] = ()
    description: str = "single process"

    @property
    def is_writer(self) -> bool:
        return self.rank == 0

    @property
    def local_size(self) -> int:
        """Workers driven by this process."""
        return len(self.worker_ids)

    @property
    def distributed(self) -> bool:
        return self.size > 1

    @property
    def devices(self) -> list:
        """The devices this process computes on."""
        if self.mesh is not None:
            return [d for d in self.mesh.devices.flat if d.process_index == jax.process_index()]
        return [jax.config.jax_default_device or jax.local_devices()[0]]

    # ------------------------------------------------------------------ the step
    def make_train_step(self, hyper, prefs, schedule, optimizer, ema_decay: float | None = None) -> Callable:
        """``train_step(state, stats, batch, layout) -> (state, metrics)`` for these workers (``ema_decay``:
        with the weights' moving average, :func:`jaxmd_dp.train.step.make_train_step`).

        ``batch``: this process's batch, from :meth:`WorkerBatches.next` (arrays with a leading worker
        axis when the process drives several workers). The metrics are those of this process's first
        worker's batch (rank 0's are logged, as DeePMD-kit), except ``nneigh_max``, the maximum over the
        process's workers. The returned state is replicated on every worker.
        """
        from jaxmd_dp.train.step import make_train_step

        if self.mesh is None:
            return make_train_step(hyper, prefs, schedule, optimizer, grad_reduce=self.grad_reduce, ema_decay=ema_decay)
        return mesh_train_step(hyper, prefs, schedule, optimizer, self.mesh, ema_decay)

    @property
    def loops(self) -> bool:
        """Whether the training step may run several steps per dispatch (:mod:`jaxmd_dp.train.multi_step`): one
        worker per process (alone, or an MPI rank: the all-reduce is in each step of the loop); a mesh's step
        takes one step per call."""
        return self.mesh is None and self.local_size == 1

    def make_train_steps(self, hyper, prefs, schedule, optimizer, ema_decay: float | None = None) -> Callable:
        """The loop over training steps of :func:`jaxmd_dp.train.multi_step.make_train_steps` for these workers
        (with ``grad_reduce`` in every step); only where :attr:`loops`."""
        from jaxmd_dp.train.multi_step import make_train_steps

        if not self.loops:
            raise ValueError("several steps per dispatch need one worker per process")
        return make_train_steps(hyper, prefs, schedule, optimizer, ema_decay, self.grad_reduce)

    def batches(self, make_sampler: Callable[[int], Any], group_seed: int) -> WorkerBatches:
        """This process's batch source; ``make_sampler(w)`` builds global worker w's sampler (seed it
        with :func:`worker_seed`). ``group_seed`` must be the same on every process."""
        samplers = [make_sampler(w) for w in self.worker_ids]
        return WorkerBatches(samplers, group_seed, shared_groups=self.mesh is not None)

    def replicate(self, tree):
        """``tree`` (params, statistics, ...) placed for the step: replicated on the mesh, or unchanged."""
        if self.mesh is None:
            return tree
        return _place(tree, NamedSharding(self.mesh, P()))

    def summary(self) -> str:
        """DeePMD-kit's "Summary of the training" block."""
        return training_summary(self)


def worker_seed(seed: int, worker: int) -> int:
    """The data-sampling seed of global worker ``worker`` (worker 0: ``seed`` itself)."""
    return int(seed) + SEED_STRIDE * int(worker)


# ---------------------------------------------------------------------------- the mesh step
def _place(tree, sharding):
    """Each leaf as a global array with ``sharding`` (from this process's local data)."""

    def put(x):
        if isinstance(x, jax.Array) and x.sharding == sharding:
            return x
        if jax.process_count() == 1:
            return jax.device_put(x, sharding)
        return jax.make_array_from_process_local_data(sharding, np.asarray(x))

    return jax.tree_util.tree_map(put, tree)


def _pmean_workers(tree):
    """Mean over the mesh's workers (inside ``shard_map``)."""
    return jax.lax.pmean(tree, AXIS)


@functools.lru_cache(maxsize=16)
def mesh_train_step(hyper, prefs, schedule, optimizer, mesh, ema_decay=None):
    """The train step of :func:`jaxmd_dp.train.step.make_train_step`, run by every worker of ``mesh`` on
    its own slice of the batch (``shard_map``), gradients averaged over the mesh with ``lax.pmean``.

    Returns ``step(state, stats, batch, layout)``; batch arrays carry a leading worker axis (this
    process's workers), state and stats are replicated (placed here if they are not yet).
    """
    from jaxmd_dp.train.step import device_batch, make_train_step, train_compiler_options

    inner = make_train_step(hyper, prefs, schedule, optimizer, grad_reduce=_pmean_workers, ema_decay=ema_decay)

    def per_worker(layout, state, stats, batch):
        new_state, metrics = inner(state, stats, jax.tree_util.tree_map(lambda x: x[0], batch), layout)
        return new_state, jax.tree_util.tree_map(lambda x: x[None], metrics)

    def step(state, stats, batch, layout):
        # check_vma=False: the gradient of replicated params stays per-worker, and pmean averages it
        # (with check_vma, jax would already sum it over workers). Every worker applies the same
        # averaged update, so the state is replicated (out spec P()).
        new_state, metrics = jax.shard_map(
            functools.partial(per_worker, layout),
            mesh=mesh,
            in_specs=(P(), P(), P(AXIS)),
            out_specs=(P(), P(AXIS)),
            check_vma=False,
        )(state, stats, batch)
        out = {k: jnp.max(v, axis=0) if k == "nneigh_max" else v[0] for k, v in metrics.items()}
        return new_state, out

    jitted = jax.jit(step, static_argnums=3, donate_argnums=0, compiler_options=train_compiler_options(hyper=hyper))
    replicated, by_worker = NamedSharding(mesh, P()), NamedSharding(mesh, P(AXIS))

    def placed(state, stats, batch, layout):
        local = jax.process_count() == 1  # device arrays (the neighbour cache's lists) are resharded on the devices
        batch = {k: v if local and isinstance(v, jax.Array) else np.asarray(v) for k, v in device_batch(batch).items()}
        return _place(state, replicated), _place(stats, replicated), _place(batch, by_worker), layout

    def train_step(state, stats, batch, layout):
        return jitted(*placed(state, stats, batch, layout))

    train_step.lower = lambda *args: jitted.lower(*placed(*args))  # as a jitted step's: XLA's cost analysis
    return train_step


# ---------------------------------------------------------------------------- batches
def stack_batches(batches: Sequence[dict]) -> dict:
    """Batches of one shape (one per worker) → one batch whose arrays have a leading worker axis."""
    out = {}
    for k in ("coord", "box", "atype", "energy", "force", "virial"):
        out[k] = np.stack([np.asarray(b[k]) for b in batches])
    for k in ("find_energy", "find_force", "find_virial"):
        out[k] = np.asarray([b[k] for b in batches], dtype=np.float64)
    out["pbc"], out["natoms"] = batches[0]["pbc"], batches[0]["natoms"]
    out["sys_index"] = batches[0]["sys_index"]
    out["sys_indices"] = [b["sys_index"] for b in batches]
    out["frames"] = [b["frames"] for b in batches]
    return out


class WorkerBatches:
    """The batches of this process's workers, one draw per step (see the module doc).

    samplers: one :class:`~jaxmd_dp.data.sampler.DataSampler` per worker of this process (same systems,
    own seeds). shared_groups: draw all workers' batches from one shape group per step (needed when
    the workers share one jitted program, i.e. a mesh); otherwise, with one sampler, ``next()`` is
    exactly that sampler's ``next_batch()``.
    """

    def __init__(self, samplers: Sequence, group_seed: int, shared_groups: bool):
        self.samplers = list(samplers)
        self.plain = len(self.samplers) == 1 and not shared_groups
        s0 = self.samplers[0]
        groups: dict = {}
        for i, (s, bs) in enumerate(zip(s0.systems, s0.batch_sizes)):
            groups.setdefault((s.natoms, bool(s.pbc), min(int(bs), s.nframes)), []).append(i)
        self.groups = [np.asarray(m) for m in groups.values()]
        self.group_probs = np.asarray([s0.probs[m].sum() for m in self.groups])
        self.group_probs = self.group_probs / self.group_probs.sum()
        self.rng = np.random.Generator(np.random.PCG64(int(group_seed)))

    def next(self) -> dict:
        """This step's batch: a sampler batch (one worker), or the workers' batches stacked."""
        if self.plain:
            return self.samplers[0].next_batch()
        g = 0 if len(self.groups) == 1 else int(self.rng.choice(len(self.groups), p=self.group_probs))
        members = self.groups[g]
        p = self.samplers[0].probs[members]
        p = p / p.sum()
        batches = []
        for s in self.samplers:
            i = int(members[0]) if len(members) == 1 else int(members[s.rng.choice(len(members), p=p)])
            batches.append(s.next_batch_from(i))
        return stack_batches(batches)

    # ------------------------------------------------------------------ checkpoints
    def local_state(self) -> dict:
        return {"samplers": [s.state_dict() for s in self.samplers], "group_rng": _rng_state(self.rng)}

    def gather_state(self, workers: Workers) -> dict | None:
        """Collective: every worker's sampler state, in global worker order, on rank 0 (None elsewhere):
        ``{"worker_samplers": [...], "group_rng": ...}``."""
        parts = workers.gather(self.local_state())
        if parts is None:
            return None
        return {"worker_samplers": [s for part in parts for s in part["samplers"]], "group_rng": parts[0]["group_rng"]}

    def load_state(self, meta: Mapping, worker_ids: Sequence[int]) -> None:
        """Restore from a checkpoint's meta written with the same number of workers. Checkpoints
        without per-worker states (single worker) restore worker 0 from ``train_sampler``."""
        states = meta.get("worker_samplers") or [meta["train_sampler"]]
        for s, w in zip(self.samplers, worker_ids):
            s.load_state_dict(states[w])
        if meta.get("group_rng") is not None:
            _set_rng_state(self.rng, meta["group_rng"])

    def reseed(self, seed: int, step: int, worker_ids: Sequence[int]) -> None:
        """A fresh sequence (restart with a different number of workers): seeded by (seed, worker, step),
        so it neither repeats the sequence of step 0 nor coincides between workers."""
        for s, w in zip(self.samplers, worker_ids):
            s.rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(seed), int(w), int(step)])))
            s._perm = [None] * s.nsystems
            s._cursor = [0] * s.nsystems
        self.rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(seed), 1 << 30, int(step)])))


def _rng_state(rng: np.random.Generator) -> dict:
    st = rng.bit_generator.state
    return {
        "state": str(st["state"]["state"]),
        "inc": str(st["state"]["inc"]),
        "has_uint32": int(st["has_uint32"]),
        "uinteger": int(st["uinteger"]),
    }


def _set_rng_state(rng: np.random.Generator, d: Mapping) -> None:
    rng.bit_generator.state = {
        "bit_generator": "PCG64",
        "state": {"state": int(d["state"]), "inc": int(d["inc"])},
        "has_uint32": int(d["has_uint32"]),
        "uinteger": int(d["uinteger"]),
    }


# ---------------------------------------------------------------------------- constructors
def local_workers(devices: Sequence | None = None, log_mode: str = "master") -> Workers:
    """This process alone, one worker per device (default: all local devices)."""
    devices = list(jax.local_devices() if devices is None else devices)
    host = socket.gethostname()
    if len(devices) == 1:
        return Workers(hosts=(host,), log_mode=log_mode)
    mesh = jax.sharding.Mesh(np.asarray(devices), (AXIS,))
    return Workers(
        size=len(devices),
        worker_ids=tuple(range(len(devices))),
        mesh=mesh,
        hosts=(host,),
        log_mode=log_mode,
        description=f"one process, {len(devices)} devices (shard_map)",
    )


_MPI_REDUCE: dict = {}  # one grad_reduce per communicator: the compiled step is cached on it


def _mpi_mean(comm, n: int):
    import mpi4jax
    from jax.flatten_util import ravel_pytree
    from mpi4py import MPI

    key = (comm.py2f(), n)
    if key not in _MPI_REDUCE:

        def grad_reduce(grads):
            flat, unravel = ravel_pytree(grads)  # one all-reduce for the whole tree
            return unravel(mpi4jax.allreduce(flat, op=MPI.SUM, comm=comm) / n)

        _MPI_REDUCE[key] = grad_reduce
    return _MPI_REDUCE[key]


def mpi_workers(comm=None, log_mode: str = "master") -> Workers:
    """One worker per MPI process (``comm``: default ``MPI.COMM_WORLD``). With several local devices,
    each process computes on the one of index (local rank mod devices)."""
    try:
        import mpi4jax  # noqa: F401
        from mpi4py import MPI
    except ImportError as e:
        raise InputError(
            f"started by an MPI launcher, but {e.name} cannot be imported: build mpi4jax "
            "against your MPI with bash .ci/install_mpi4jax.sh VENV (see the README)"
        ) from None
    comm = MPI.COMM_WORLD if comm is None else comm
    rank, n = comm.Get_rank(), comm.Get_size()
    local = jax.local_devices()
    if len(local) > 1:
        local_rank = comm.Split_type(MPI.COMM_TYPE_SHARED).Get_rank()
        jax.config.update("jax_default_device", local[local_rank % len(local)])
    hosts = tuple(comm.allgather(socket.gethostname()))

    def broadcast(x):
        return comm.bcast(_to_host(x) if rank == 0 else None, root=0)

    def gather(x):
        return comm.gather(_to_host(x), root=0)

    return Workers(
        rank=rank,
        size=n,
        nprocs=n,
        worker_ids=(rank,),
        grad_reduce=_mpi_mean(comm, n) if n > 1 else None,
        broadcast=broadcast,
        gather=gather,
        barrier=comm.Barrier,
        launcher="mpi",
        log_mode=log_mode,
        hosts=hosts,
        description=f"MPI, {n} processes (mpi4jax all-reduce)",
    )


def jax_distributed_workers(
    coordinator: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    log_mode: str = "master",
) -> Workers:
    """Several processes (hosts) through ``jax.distributed.initialize``: one global mesh over all their
    devices. Arguments left None are taken from JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES /
    JAX_PROCESS_ID, or left to jax's cluster auto-detection."""
    from jax.experimental import multihost_utils as mh

    env = os.environ
    coordinator = coordinator or env.get(JAX_COORDINATOR_VAR)
    if num_processes is None and env.get(JAX_NUM_PROCESSES_VAR):
        num_processes = int(env[JAX_NUM_PROCESSES_VAR])
    if process_id is None and env.get(JAX_PROCESS_ID_VAR):
        process_id = int(env[JAX_PROCESS_ID_VAR])
    if not jax.distributed.is_initialized():
        jax.distributed.initialize(coordinator, num_processes, process_id)
    rank, nprocs = jax.process_index(), jax.process_count()
    devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
    mesh = jax.sharding.Mesh(np.asarray(devices), (AXIS,))
    mine = tuple(i for i, d in enumerate(devices) if d.process_index == rank)

    def broadcast(x):
        data = np.frombuffer(pickle.dumps(_to_host(x)), np.uint8) if rank == 0 else np.zeros(0, np.uint8)
        n = int(mh.broadcast_one_to_all(np.int64(data.size)))
        buf = data if rank == 0 else np.zeros(n, np.uint8)
        return pickle.loads(np.asarray(mh.broadcast_one_to_all(buf)).tobytes())

    def gather(x):
        data = np.frombuffer(pickle.dumps(_to_host(x)), np.uint8)
        sizes = np.asarray(mh.process_allgather(np.int64(data.size))).reshape(-1)
        buf = np.zeros(int(sizes.max()), np.uint8)
        buf[: data.size] = data
        allbuf = np.asarray(mh.process_allgather(buf)).reshape(nprocs, -1)
        return [pickle.loads(allbuf[i, : sizes[i]].tobytes()) for i in range(nprocs)] if rank == 0 else None

    hosts = tuple(gather(socket.gethostname()) or ())
    hosts = tuple(broadcast(list(hosts) if rank == 0 else None))
    return Workers(
        rank=rank,
        size=len(devices),
        nprocs=nprocs,
        worker_ids=mine,
        mesh=mesh,
        broadcast=broadcast,
        gather=gather,
        barrier=lambda: mh.sync_global_devices("jaxmd_dp barrier"),
        launcher="jax",
        log_mode=log_mode,
        hosts=hosts,
        description=f"jax.distributed, {nprocs} processes, {len(devices)} devices (shard_map)",
    )


def mpi_world_size(env: Mapping[str, str] | None = None) -> int:
    """World size announced by an MPI launcher's environment variables (1 when none is set)."""
    env = os.environ if env is None else env
    for k in MPI_SIZE_VARS:
        v = env.get(k, "").strip()
        if v.isdigit():
            return int(v)
    return 1


def detect_launcher(env: Mapping[str, str] | None = None, coordinator: str | None = None) -> str:
    """ "jax" (a coordinator address is given, by flag or JAX_COORDINATOR_ADDRESS), "mpi" (an MPI
    launcher started more than one process), or "none"."""
    env = os.environ if env is None else env
    if coordinator:
        return "jax"
    if mpi_world_size(env) > 1:
        return "mpi"
    if env.get(JAX_COORDINATOR_VAR):
        return "jax"
    return "none"


def init_workers(
    coordinator: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    log_mode: str = "master",
    env: Mapping[str, str] | None = None,
) -> Workers:
    """The workers of this run, from the launcher (:func:`detect_launcher`). Call before any jax
    computation (jax.distributed must be initialised first)."""
    if log_mode not in LOG_MODES:
        raise InputError(f"--mpi-log must be one of {', '.join(LOG_MODES)}, got {log_mode!r}")
    kind = detect_launcher(env, coordinator)
    if kind == "mpi":
        return mpi_workers(log_mode=log_mode)
    if kind == "jax":
        return jax_distributed_workers(coordinator, num_processes, process_id, log_mode=log_mode)
    return local_workers(log_mode=log_mode)


# ---------------------------------------------------------------------------- logging
def rank_logger(workers: Workers, output_dir=None, log: Callable[[str], None] = print) -> Callable[[str], None]:
    """The console log of this rank under ``--mpi-log``: "master" → ``log`` (the trainer silences the
    other ranks); "collect" → every rank logs to the console (mpirun gathers them), lines prefixed
    ``[rank k]``; "workers" → rank 0 logs to the console, and every rank also to its own file
    ``<output_dir>/train.rank<k>.log``."""
    if workers.log_mode == "master" or workers.nprocs == 1:
        return log
    if workers.log_mode == "collect":
        prefix = f"[rank {workers.rank}] "
        return lambda msg: log("\n".join(prefix + ln for ln in str(msg).splitlines()))
    from pathlib import Path

    path = Path(output_dir or ".") / f"train.rank{workers.rank}.log"

    def to_file(msg):
        with open(path, "a") as f:
            f.write(f"{msg}\n")
        if workers.is_writer:
            log(msg)

    return to_file


def training_summary(workers: Workers) -> str:
    """DeePMD-kit's "Summary of the training" block (distribution, ranks, nodes, devices, threads)."""
    env = os.environ
    devs = workers.devices
    kinds = sorted({d.platform for d in devs})
    visible = [
        f"{k}={env[k]}" for k in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES") if k in env
    ]
    xla = env.get("XLA_FLAGS", "")
    threads = [f"OMP_NUM_THREADS={env.get('OMP_NUM_THREADS', 'unset')}"]
    for flag in ("intra_op_parallelism_threads", "xla_cpu_multi_thread_eigen", "xla_force_host_platform_device_count"):
        for word in xla.split():
            if flag in word:
                threads.append(word.lstrip("-"))
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count()
    hosts = list(workers.hosts) or [socket.gethostname()]
    lines = [
        "---Summary of the training---------------------------------------",
        f"distributed:          {'yes, ' + workers.description if workers.distributed else 'no'}",
        f"world size:           {workers.size} worker(s) = {workers.nprocs} process(es) × "
        f"{workers.local_size} device(s)",
        f"my rank:              {workers.rank}",
        f"node list:            {sorted(set(hosts))}",
        f"running on:           {socket.gethostname()}",
        f"computing device(s):  {', '.join(f'{d.platform}:{d.id}' for d in devs)} ({'/'.join(kinds)})",
        f"visible devices:      {jax.local_device_count()} local, {jax.device_count()} in all"
        + (f" ({', '.join(visible)})" if visible else ""),
        f"threads:              {cores} core(s) usable; {', '.join(threads)}",
        f"huge pages:           {hugepages.status()}",
        f"CPU buffers:          {hugepages.buffers_status()}",
        "-----------------------------------------------------------------",
    ]
    return "\n".join(lines)
