"""Data-parallel training: 2 devices in one process (shard_map) and 2 MPI processes (mpi4jax).

Each multi-worker case runs this file as a script in a subprocess (``python test_parallel.py MODE WATER OUT``)
and checks the JSON it leaves: one step on a fixed global batch gives the gradient and the new parameters
of one worker on that whole batch (1e-12, float64); after 20 steps every worker holds the same parameters
(bit for bit); only rank 0 wrote files; the learning rate is scaled by the total worker count; a restart
with the same number of workers continues exactly. The MPI cases are skipped when mpi4jax cannot be
imported, unless ``JAXMD_DP_REQUIRE_MPI=1``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve()
REPO = HERE.parents[2]
NSTEPS = 20


def config_dict(water: str, numb_steps: int = NSTEPS, scale_by_worker: str = "linear", start_lr: float = 1e-3) -> dict:
    """A small water model (as test_training's) trained on water/data_0 and data_2 (no validation: quick)."""
    from tiny import small_water_model  # (tests/train: on the path in pytest and as a script)

    return {
        "model": small_water_model(),
        "learning_rate": {
            "type": "exp",
            "start_lr": start_lr,
            "stop_lr": start_lr / 100,
            "decay_steps": 5,
            "scale_by_worker": scale_by_worker,
        },
        "loss": {"start_pref_e": 0.02, "limit_pref_e": 1, "start_pref_f": 1000, "limit_pref_f": 1},
        "training": {
            "training_data": {"systems": [f"{water}/data_0", f"{water}/data_2"], "batch_size": 1},
            "numb_steps": numb_steps,
            "seed": 7,
            "disp_freq": 10,
            "save_freq": 10,
            "max_ckpt_keep": 3,
        },
    }


# ============================================================================ the worker (subprocess)
def _digest(tree) -> str:
    import jax

    h = hashlib.sha256()
    for leaf in jax.tree_util.tree_leaves(tree):
        h.update(np.ascontiguousarray(np.asarray(leaf, np.float64)).tobytes())
    return h.hexdigest()


def _rel_err(a, b) -> float:
    """max over leaves of max|a − b| / max|b|."""
    import jax

    errs = [
        np.max(np.abs(np.asarray(x) - np.asarray(y))) / max(np.max(np.abs(np.asarray(y))), 1e-300)
        for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b))
    ]
    return float(max(errs))


def worker(mode: str, water: str, out: str) -> None:
    """Train through the command line (as ``mpiexec -n 2 python -m jaxmd_dp.train``), then check what the
    parent test asserts; results go to ``OUT/result_rank<k>.json``."""
    import jax
    import jax.numpy as jnp

    import jaxmd_dp.train.loop as loop
    from jaxmd_dp.cli.train import main
    from jaxmd_dp.config import config_from_dict
    from jaxmd_dp.data.sampler import make_batch
    from jaxmd_dp.errors import InputError
    from jaxmd_dp.model.energy import init_params
    from jaxmd_dp.train.parallel import local_workers, stack_batches
    from jaxmd_dp.train.schedule import exp_decay, worker_scale
    from jaxmd_dp.train.step import device_batch, init_state, make_train_step

    out = Path(out)
    trainers = []

    class Recorded(loop.Trainer):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            trainers.append(self)

    loop.Trainer = Recorded  # the command line builds its trainer from jaxmd_dp.train.loop
    cfg = str(out / "in.json")
    rank = int(
        os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("JAX_PROCESS_ID", "0")))
    )

    # 20 steps: the parameters stay identical on every worker; only rank 0 writes
    run = out / f"run_rank{rank}"
    assert main([cfg, "-o", str(run), "--mpi-log", "collect"]) == 0
    tr = trainers[-1]
    workers = tr.workers
    assert workers.rank == rank
    res = {"rank": workers.rank, "size": workers.size, "launcher": workers.launcher, "nprocs": workers.nprocs}
    res["step"] = int(tr.state.step)
    res["digest"] = _digest(tr.state.params)
    res["steps_per_dispatch"], res["chunked_steps"] = tr.steps_per_dispatch, tr.chunked_steps
    if mode == "mpi":  # the same run one step per dispatch: the same lcurve and weights
        one = json.loads(Path(cfg).read_text())
        one["training"]["steps_per_dispatch"] = 1
        k1 = out / f"in_k1_rank{rank}.json"
        k1.write_text(json.dumps(one))
        assert main([str(k1), "-o", str(out / f"k1_rank{rank}"), "--mpi-log", "collect"]) == 0
        res["k1"] = {"digest": _digest(trainers[-1].state.params), "chunked_steps": trainers[-1].chunked_steps}
        if rank == 0:
            res["k1"]["same_lcurve"] = (out / "k1_rank0" / "lcurve.out").read_text() == (run / "lcurve.out").read_text()
    if workers.mesh is not None:  # every device's own copy of the replicated parameters
        leaves = jax.tree_util.tree_leaves(tr.state.params)
        res["device_digests"] = [
            _digest([np.asarray(leaf.addressable_shards[i].data) for leaf in leaves])
            for i in range(len(leaves[0].addressable_shards))
        ]

    # learning rate scaled by the TOTAL worker count: the trainer's (linear), and the three modes
    res["start_lr"] = {"trainer": tr.schedule.start_lr}
    for m in ("linear", "sqrt", "none"):
        res["start_lr"][m] = exp_decay(1e-3, 1e-5, 5, NSTEPS, scale=worker_scale(m, workers.size)).start_lr

    if workers.mesh is not None and workers.nprocs == 1:  # (restarts: launcher-independent code, one process suffices)
        # a mesh's step takes one step per call: more is refused with one line
        many = json.loads(Path(cfg).read_text())
        many["training"]["steps_per_dispatch"] = 2
        try:
            loop.Trainer(config_from_dict(many), out / "refused", log=lambda *a, **k: None)
            res["refused_k2"] = None
        except InputError as e:
            res["refused_k2"] = str(e)

        # restart with the same workers from step 10: the lcurve is that of 20 steps
        part = out / "part_rank0"
        shutil.copytree(run, part)
        shutil.rmtree(part / "model.ckpt" / str(NSTEPS))
        assert main([cfg, "-o", str(part), "--restart", str(part), "--mpi-log", "collect"]) == 0
        res["restart_exact"] = (part / "lcurve.out").read_text() == (run / "lcurve.out").read_text()

        # restart the 2-worker checkpoint on 1 worker (one device of this process) and go on 5 steps, keeping
        # the learning rate: start_lr 2e-3 unscaled (its step is then the reference step compiled below)
        lines = []
        shutil.copytree(run, out / "one")
        t1 = loop.Trainer(
            config_from_dict(config_dict(water, scale_by_worker="none", start_lr=2e-3)),
            out / "one",
            restart=out / "one",
            workers=local_workers(jax.local_devices()[:1]),
            log=lines.append,
        )
        res["one_worker"] = {
            "size": t1.workers.size,
            "step": int(t1.state.step),
            "start_lr": t1.schedule.start_lr,
            "same_schedule": t1.schedule == tr.schedule,
            "logged_reseed": any("checkpoint had 2" in ln for ln in lines),
        }
        t1.fit(NSTEPS + 5)
        res["one_worker"]["final_step"] = int(t1.state.step)

    # one step on a fixed global batch (4 frames; 2 per worker) = one worker on the whole batch
    system = tr.train_systems[0]
    whole = make_batch(system, np.arange(4))
    halves = [make_batch(system, np.arange(2 * w, 2 * w + 2)) for w in range(2)]
    mine = stack_batches([halves[w] for w in workers.worker_ids]) if workers.mesh is not None else halves[workers.rank]
    layout = tr.layout_for(whole)
    params0 = init_params(tr.hyper, 3)
    opt = tr.optimizer  # the trainer's Adam: the parallel step below is the trainer's compiled one

    def one_step(make, batch):
        state = init_state(jax.tree_util.tree_map(jnp.array, params0), opt)
        new, _ = make(tr.hyper, tr.prefs, tr.schedule, opt)(state, tr.stats, device_batch(batch), layout)
        adam = [
            s for s in jax.tree_util.tree_leaves(new.opt_state, is_leaf=lambda x: hasattr(x, "mu")) if hasattr(s, "mu")
        ][0]
        grads = jax.tree_util.tree_map(lambda m: np.asarray(m) / 0.1, adam.mu)  # first step: mu = (1 − b1) g
        return grads, jax.tree_util.tree_map(np.asarray, new.params)

    ref_g, ref_p = one_step(make_train_step, whole)
    par_g, par_p = one_step(workers.make_train_step, mine)
    res["grad_rel_err"] = _rel_err(par_g, ref_g)
    res["param_rel_err"] = _rel_err(par_p, ref_p)
    res["update_rel_err"] = _rel_err(
        jax.tree_util.tree_map(np.subtract, par_p, params0), jax.tree_util.tree_map(np.subtract, ref_p, params0)
    )
    res["grad_nonzero"] = bool(max(np.max(np.abs(g)) for g in jax.tree_util.tree_leaves(ref_g)) > 0)
    (out / f"result_rank{workers.rank}.json").write_text(json.dumps(res))


def signal_worker(water: str, out: str) -> None:
    """2 ranks train 200 steps; SIGTERM reaches rank 1 only, in its step 13. Both must stop together at the
    next agreed step (20), rank 0 saving a checkpoint there; results in OUT/signal_rank<k>.json."""
    import signal as _signal

    import jaxmd_dp.train.loop as loop
    from jaxmd_dp.cli.train import main

    out = Path(out)
    rank = int(os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))
    trainers = []

    class SignalledOnRank1(loop.Trainer):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            trainers.append(self)
            nxt, calls = self.batches.next, [0]

            def next_batch():
                calls[0] += 1
                if self.workers.rank == 1 and calls[0] == 13:
                    os.kill(os.getpid(), _signal.SIGTERM)
                return nxt()

            self.batches.next = next_batch

    loop.Trainer = SignalledOnRank1
    (out / "sig.json").write_text(json.dumps(config_dict(water, numb_steps=200)))
    rc = main([str(out / "sig.json"), "-o", str(out / f"sig_rank{rank}"), "--mpi-log", "collect"])
    tr = trainers[-1]
    ckpt = out / "sig_rank0" / "model.ckpt"
    (out / f"signal_rank{rank}.json").write_text(
        json.dumps(
            {
                "rc": rc,
                "step": int(tr.state.step),
                "checkpoints": sorted(p.name for p in ckpt.iterdir()) if rank == 0 else [],
            }
        )
    )


# ============================================================================ the tests
if __name__ != "__main__":
    import pytest
    from shared_paths import require

    from jaxmd_dp.train.multi_step import AUTO_K
    from jaxmd_dp.train.parallel import (
        WorkerBatches,
        Workers,
        detect_launcher,
        local_workers,
        mpi_world_size,
        rank_logger,
        training_summary,
        worker_seed,
    )

    REQUIRE_MPI = os.environ.get("JAXMD_DP_REQUIRE_MPI") == "1"

    def _mpiexec() -> str | None:
        """mpiexec of the venv (pip's mpich) or on PATH, when mpi4py and mpi4jax import; else skip/fail."""
        try:
            import mpi4jax  # noqa: F401
            import mpi4py  # noqa: F401
        except ImportError as e:
            msg = f"mpi4jax/mpi4py not importable ({e}); install them with bash .ci/install_mpi4jax.sh VENV"
            if REQUIRE_MPI:
                pytest.fail(msg + " and JAXMD_DP_REQUIRE_MPI=1", pytrace=False)
            pytest.skip(msg)
        exe = Path(sys.executable).parent / "mpiexec"
        found = str(exe) if exe.exists() else shutil.which("mpiexec")
        if found is None:
            if REQUIRE_MPI:
                pytest.fail("mpiexec not found and JAXMD_DP_REQUIRE_MPI=1", pytrace=False)
            pytest.skip("mpiexec not found")
        return found

    @pytest.fixture(scope="session")
    def jax_cache(tmp_path_factory) -> str:
        """A compilation cache that the subprocesses of this session share."""
        return str(tmp_path_factory.mktemp("jax_cache"))

    def _env(cache: str | None = None, **extra) -> dict:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMI_", "PMIX_", "MPI_LOCAL"))}
        env.pop("JAX_COORDINATOR_ADDRESS", None)
        env["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
        env["OMP_NUM_THREADS"] = "1"
        env["PYTHONPATH"] = os.pathsep.join([str(REPO / "tests"), str(REPO), env.get("PYTHONPATH", "")])
        if cache:
            env["JAX_COMPILATION_CACHE_DIR"] = cache
            env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
        env.update(extra)
        return env

    def _run(cmd, env, timeout=600):
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO)
        assert p.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{p.stdout[-3000:]}\n{p.stderr[-6000:]}"
        return p

    def _results(out: Path, n: int) -> list[dict]:
        return [json.loads((out / f"result_rank{r}.json").read_text()) for r in range(n)]

    def _launch(cmd_prefix, mode, out: Path, env) -> tuple[list[dict], str]:
        water = require("water")
        (out / "in.json").write_text(json.dumps(config_dict(str(water))))
        p = _run([*cmd_prefix, sys.executable, str(HERE), mode, str(water), str(out)], env)
        return _results(out, 2 if mode == "mpi" else 1), p.stdout

    def _free_port() -> int:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    def _launch_jax_distributed(out: Path, env) -> tuple[list[dict], str]:
        """Two processes joined by jax.distributed on 127.0.0.1 (no MPI), the launcher found from the env."""
        water = require("water")
        (out / "in.json").write_text(json.dumps(config_dict(str(water))))
        addr = f"127.0.0.1:{_free_port()}"
        procs = [
            subprocess.Popen(
                [sys.executable, str(HERE), "jax", str(water), str(out)],
                cwd=REPO,
                text=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env={**env, "JAX_COORDINATOR_ADDRESS": addr, "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": str(r)},
            )
            for r in range(2)
        ]
        outs = []
        try:
            for p in procs:
                outs.append(p.communicate(timeout=600))
        finally:
            for p in procs:
                p.kill()
        for p, (o, e) in zip(procs, outs):
            assert p.returncode == 0, f"jax.distributed rank failed:\n{o[-3000:]}\n{e[-6000:]}"
        return _results(out, 2), outs[0][0]

    def _check(results: list[dict], out: Path, launcher: str):
        r0 = results[0]
        assert r0["size"] == 2 and r0["launcher"] == launcher
        assert r0["step"] == NSTEPS
        # same gradient and same new parameters as one worker on the whole batch (float64)
        for r in results:
            assert r["grad_nonzero"]
            assert r["grad_rel_err"] < 1e-12, r
            assert r["update_rel_err"] < 1e-12, r
            assert r["param_rel_err"] < 1e-12, r
        # identical parameters on every worker after 20 steps
        digests = {r["digest"] for r in results} | {d for r in results for d in r.get("device_digests", [])}
        assert len(digests) == 1, results
        # lr scaled by the total number of workers (2)
        for r in results:
            assert r["start_lr"]["trainer"] == pytest.approx(2e-3, rel=1e-12)
            assert r["start_lr"]["linear"] == pytest.approx(2e-3, rel=1e-12)
            assert r["start_lr"]["sqrt"] == pytest.approx(math.sqrt(2) * 1e-3, rel=1e-12)
            assert r["start_lr"]["none"] == pytest.approx(1e-3, rel=1e-12)
        run0 = out / "run_rank0"
        lr_col = [
            float(ln.split()[-1]) for ln in (run0 / "lcurve.out").read_text().splitlines() if not ln.startswith("#")
        ]
        assert lr_col[0] == pytest.approx(2e-3, rel=1e-6)  # step 1 at the scaled start_lr
        # only rank 0 wrote files
        assert {"lcurve.out", "out.json", "model.ckpt"} <= {p.name for p in run0.iterdir()}
        for r in range(1, len(results)):
            assert not (out / f"run_rank{r}").exists(), f"rank {r} wrote its output directory"
        assert {p.name for p in out.iterdir()} <= {
            "in.json",
            "run_rank0",
            "part_rank0",
            "one",
            "refused",
            "k1_rank0",
            *(f"in_k1_rank{r}.json" for r in range(len(results))),
            *(f"result_rank{r}.json" for r in range(len(results))),
        }

    @pytest.mark.slow
    def test_two_devices_one_process(tmp_path, jax_cache):
        """2 CPU devices in one process: one jitted shard_map step, lax.pmean of the gradients."""
        env = _env(jax_cache, XLA_FLAGS="--xla_force_host_platform_device_count=2 " + _env()["XLA_FLAGS"])
        results, stdout = _launch([], "mesh", tmp_path, env)
        assert len(results[0]["device_digests"]) == 2
        _check(results, tmp_path, "none")
        assert "world size:           2 worker(s) = 1 process(es) × 2 device(s)" in stdout
        assert "computing device(s):  cpu:0, cpu:1" in stdout
        assert "GFLOP" in stdout and "no FLOP estimate" not in stdout  # the mesh step's cost analysis
        assert results[0]["restart_exact"]  # restart with the same workers continues exactly
        assert results[0]["steps_per_dispatch"] == 1  # auto on a mesh
        assert "steps_per_dispatch': 2 steps per dispatch need one worker per process" in results[0]["refused_k2"]
        # the 2-worker checkpoint continues on 1 worker (new sampling sequence)
        one = results[0]["one_worker"]
        assert one == {
            "size": 1,
            "step": NSTEPS,
            "start_lr": pytest.approx(2e-3),
            "same_schedule": True,
            "logged_reseed": True,
            "final_step": NSTEPS + 5,
        }
        rows = [ln for ln in (tmp_path / "one" / "lcurve.out").read_text().splitlines() if not ln.startswith("#")]
        assert [int(r.split()[0]) for r in rows] == [1, 10, 20, 25]

    @pytest.mark.slow
    @pytest.mark.multiprocess
    def test_two_mpi_processes(tmp_path, jax_cache):
        """``mpiexec -n 2 python -m jaxmd_dp.train``: the launcher is detected, mpi4jax averages the gradients."""
        results, stdout = _launch([_mpiexec(), "-n", "2"], "mpi", tmp_path, _env(jax_cache))
        _check(results, tmp_path, "mpi")
        # each rank ran several steps per dispatch (an all-reduce in every step of the loop), with the numbers
        # of one step per dispatch
        for r in results:
            assert r["steps_per_dispatch"] == AUTO_K and r["chunked_steps"] == NSTEPS - 1, r
            assert r["k1"]["chunked_steps"] == 0 and r["k1"]["digest"] == r["digest"], r
        assert results[0]["k1"]["same_lcurve"]
        for r in (0, 1):  # --mpi-log collect: both ranks' summaries on the console
            assert f"[rank {r}] ---Summary of the training" in stdout
            assert f"[rank {r}] my rank:              {r}" in stdout
        assert "[rank 0] world size:           2 worker(s) = 2 process(es) × 1 device(s)" in stdout
        assert "[rank 0] distributed:          yes, MPI" in stdout

    @pytest.mark.slow
    @pytest.mark.multiprocess
    def test_two_jax_distributed_processes(tmp_path, jax_cache):
        """Two processes through jax.distributed (coordinator on 127.0.0.1): same checks as MPI; rank 0's
        checkpoints do not wait for rank 1 (orbax runs on rank 0 alone)."""
        results, stdout = _launch_jax_distributed(tmp_path, _env(jax_cache))
        _check(results, tmp_path, "jax")
        assert "[rank 0] distributed:          yes" in stdout
        assert sorted(p.name for p in (tmp_path / "run_rank0" / "model.ckpt").iterdir()) == ["10", "20"]

    @pytest.mark.slow
    @pytest.mark.multiprocess
    def test_signal_on_one_rank_stops_all(tmp_path, jax_cache):
        """SIGTERM delivered to rank 1 only: both ranks stop at the next agreed step, rank 0 checkpoints it."""
        water = require("water")
        p = _run(
            [_mpiexec(), "-n", "2", sys.executable, str(HERE), "signal", str(water), str(tmp_path)], _env(jax_cache)
        )
        res = [json.loads((tmp_path / f"signal_rank{r}.json").read_text()) for r in range(2)]
        assert [r["rc"] for r in res] == [0, 0]
        assert [r["step"] for r in res] == [20, 20]  # signal in step 13, agreed at the sync step 20
        assert "20" in res[0]["checkpoints"] and "200" not in res[0]["checkpoints"]
        assert "[rank 0] received SIGTERM: saved step 20" in p.stdout
        assert "[rank 1] received SIGTERM: saved step 20" in p.stdout

    # -------------------------------------------------------------------- in-process units
    def test_detect_launcher():
        assert detect_launcher({}) == "none"
        assert detect_launcher({"OMPI_COMM_WORLD_SIZE": "4"}) == "mpi"
        assert detect_launcher({"PMI_SIZE": "2"}) == "mpi"  # MPICH / Intel MPI
        assert detect_launcher({"MPI_LOCALNRANKS": "2"}) == "mpi"
        assert detect_launcher({"PMI_SIZE": "1"}) == "none"  # mpirun -np 1: one process
        assert detect_launcher({"JAX_COORDINATOR_ADDRESS": "10.0.0.1:1234"}) == "jax"
        assert detect_launcher({}, coordinator="host:1234") == "jax"
        assert detect_launcher({"PMI_SIZE": "2"}, coordinator="host:1234") == "jax"
        assert mpi_world_size({"OMPI_COMM_WORLD_SIZE": "3"}) == 3

    def _fake_system(path, natoms, nframes, pbc=True):
        from jaxmd_dp.data.system import System

        rng = np.random.default_rng(natoms)
        return System(
            path,
            np.arange(natoms, dtype=np.int32) % 2,
            pbc,
            rng.random((nframes, natoms, 3)),
            np.tile(np.eye(3) * 10, (nframes, 1, 1)) if pbc else None,
            rng.random(nframes),
            rng.random((nframes, natoms, 3)),
            None,
            (nframes,),
        )

    def test_worker_batches_share_a_shape_group():
        """Several workers of one program draw from one shape group per step, each system with its sampler
        probability; one worker alone is exactly its sampler."""
        from jaxmd_dp.data.sampler import DataSampler

        systems = [_fake_system("a", 3, 8), _fake_system("b", 5, 8), _fake_system("c", 3, 8), _fake_system("d", 5, 4)]
        make = lambda w: DataSampler(systems, 2, seed=worker_seed(11, w))  # noqa: E731
        wb = WorkerBatches([make(0), make(1)], group_seed=11, shared_groups=True)
        counts = np.zeros(4)
        for _ in range(800):
            b = wb.next()
            assert b["coord"].shape == (2, 2, b["natoms"], 3) and b["find_energy"].shape == (2,)
            assert len({systems[i].natoms for i in b["sys_indices"]}) == 1
            for i in b["sys_indices"]:
                counts[i] += 1
        assert np.allclose(counts / counts.sum(), make(0).probs, atol=0.04)
        plain = WorkerBatches([make(0)], group_seed=11, shared_groups=False)
        ref = make(0)
        for _ in range(5):
            assert np.array_equal(plain.next()["coord"], ref.next_batch()["coord"])

    def test_worker_batches_state_roundtrip():
        from jaxmd_dp.data.sampler import DataSampler

        systems = [_fake_system("a", 3, 8), _fake_system("b", 5, 8)]
        make = lambda w: DataSampler(systems, 2, seed=worker_seed(5, w))  # noqa: E731
        a = WorkerBatches([make(0), make(1)], 5, True)
        for _ in range(3):
            a.next()
        state = a.gather_state(Workers(size=2, worker_ids=(0, 1)))
        assert len(state["worker_samplers"]) == 2
        b = WorkerBatches([make(0), make(1)], 5, True)
        b.load_state(state, (0, 1))
        for _ in range(4):
            assert np.array_equal(a.next()["coord"], b.next()["coord"])
        b.reseed(5, 3, (0, 1))  # a new sequence, different per worker
        x = b.next()
        assert not np.array_equal(x["coord"][0], x["coord"][1])

    def test_single_process_workers_and_summary():
        w = local_workers()
        assert w.size == 1 and w.is_writer and w.mesh is None and w.grad_reduce is None
        text = training_summary(w)
        for key in (
            "Summary of the training",
            "distributed:          no",
            "world size:           1",
            "my rank:              0",
            "node list:",
            "computing device(s):",
            "visible devices:",
            "threads:",
            "huge pages:",
        ):
            assert key in text, text
        assert rank_logger(w) is print

    def test_rank_logger_modes(tmp_path):
        got = []
        collect = Workers(rank=1, size=2, nprocs=2, worker_ids=(1,), log_mode="collect")
        rank_logger(collect, tmp_path, got.append)("a\nb")
        assert got == ["[rank 1] a\n[rank 1] b"]
        rank_logger(Workers(rank=1, size=2, nprocs=2, worker_ids=(1,), log_mode="workers"), tmp_path, got.append)("c")
        assert got == ["[rank 1] a\n[rank 1] b"] and (tmp_path / "train.rank1.log").read_text() == "c\n"


if __name__ == "__main__":
    sys.path[:0] = [str(REPO / "tests"), str(REPO)]
    import jaxmd_dp  # noqa: F401  (float64)

    if sys.argv[1] == "signal":
        signal_worker(*sys.argv[2:4])
    else:
        worker(*sys.argv[1:4])
