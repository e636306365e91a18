"""The training step alone, variants side by side: every variant's step is compiled in one process and the
variants take turns step by step on the same fixed batches (no lcurve, validation or checkpoints), so a slow
spell of a shared machine hits all alike.

    .venv/bin/python bench/step_time.py CONFIG [--precision float64] [--table 0 64] [--steps 300] [--batches 4]
        [--variant NAME:MODULE.ATTR=EXPR ...] [--options NAME:KEY=VALUE ...]

CONFIG: our YAML or a DeePMD-kit input.json (e.g. one written by ``bench/train_speed.py --out DIR``). A variant
``base`` (the code as it is) is always included. ``--table 0 64`` runs every variant with the exact embedding
nets and with ``training.embedding_table=64``. ``--variant`` replaces a module attribute while its step is
traced (EXPR is Python, evaluated with that module's globals, e.g.
``einsum:jaxmd_dp.model.se_e2_a.env_product_train=env_product``: the exact nets' Rᵀ·G as a plain einsum);
``--options`` compiles with XLA compiler options added to the training step's own (e.g.
``emitters:xla_cpu_use_fusion_emitters=false``). Several items with one NAME make one variant.

Two checkouts (each loads its own ``jaxmd_dp``): ``--save PKL`` in one writes its step's executables
(``jax.experimental.serialize_executable``; same jax, same machine) and exits, ``--saved NAME:PKL`` in the
other adds them as variant NAME. Both need the same CONFIG and options, which give the same batches:

    .venv/bin/python /tmp/old/bench/step_time.py CONFIG --save /tmp/old.pkl   # e.g. an export of the old commit
    .venv/bin/python bench/step_time.py CONFIG --saved old:/tmp/old.pkl

Prints per variant the time of its first calls (compile), the median, lower quartile and minimum of the step
times (ms; the first 8 steps of each left out), the median process CPU time per step (all threads; less
sensitive than wall time to other load) and the loss metrics of its last step (variants that compute the same
numbers show the same ones). The command-line tools run with glibc's huge pages; start this script with
``GLIBC_TUNABLES=glibc.malloc.hugetlb=1`` to time the step as they run it.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import pickle
import tempfile
import time

import checkout  # noqa: F401  (this checkout's jaxmd_dp first on the path)


def _value(text: str):
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def parse_variants(patches: list[str], options: list[str]) -> dict[str, dict]:
    """{"base": {...}, NAME: {"patch": [(module, attr, expr)], "options": {key: value}}}."""
    variants: dict[str, dict] = {"base": {"patch": [], "options": {}}}
    for item in patches:
        name, _, rest = item.partition(":")
        target, _, expr = rest.partition("=")
        module, _, attr = target.rpartition(".")
        if not (name and module and attr and expr):
            raise SystemExit(f"error: --variant {item!r}: expected NAME:MODULE.ATTR=EXPR")
        variants.setdefault(name, {"patch": [], "options": {}})["patch"].append((module, attr, expr))
    for item in options:
        name, _, rest = item.partition(":")
        key, _, value = rest.partition("=")
        if not (name and key and value):
            raise SystemExit(f"error: --options {item!r}: expected NAME:KEY=VALUE")
        variants.setdefault(name, {"patch": [], "options": {}})["options"][key] = _value(value)
    return variants


def compile_variant(step, variant: dict, state, stats, calls, hyper=None) -> list:
    """The step's executables for ``calls`` [(arrays, layout)], traced with the variant's attributes, with the
    training step's compile options for the model ``hyper``."""
    import jax

    from jaxmd_dp.train.step import train_compiler_options

    saved = []
    try:
        for module, attr, expr in variant["patch"]:
            mod = importlib.import_module(module)
            saved.append((mod, attr, getattr(mod, attr)))
            setattr(mod, attr, eval(expr, vars(mod)))  # noqa: S307 - a benchmark's own command line

        def fresh(*args):  # a new function each time: jax caches traces by function, and would reuse
            return step.__wrapped__(*args)  # the first variant's trace (its patches) for every other

        jitted = jax.jit(fresh, static_argnums=3, donate_argnums=0)
        options = {**(train_compiler_options(hyper=hyper) or {}), **variant["options"]}  # as the training step's
        return [
            jitted.lower(state, stats, arrays, layout).compile(compiler_options=options or None)
            for arrays, layout in calls
        ]
    finally:
        for mod, attr, old in reversed(saved):
            setattr(mod, attr, old)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("config")
    p.add_argument("--precision", default="float64", choices=["float64", "float32"])
    p.add_argument(
        "--table",
        type=int,
        nargs="+",
        default=[0],
        help="training.embedding_table settings, each variant at each (0: exact nets)",
    )
    p.add_argument("--steps", type=int, default=300, help="steps of each variant")
    p.add_argument("--batches", type=int, default=4)
    p.add_argument("--variant", action="append", default=[], metavar="NAME:MODULE.ATTR=EXPR")
    p.add_argument("--options", action="append", default=[], metavar="NAME:KEY=VALUE")
    p.add_argument("--save", metavar="PKL", help="write this checkout's step (variant base) to PKL and exit")
    p.add_argument(
        "--saved",
        action="append",
        default=[],
        metavar="NAME:PKL",
        help="another checkout's step, written by its --save, as variant NAME",
    )
    args = p.parse_args(argv)
    variants = parse_variants(args.variant, args.options)
    if (args.save or args.saved) and len(args.table) > 1:
        raise SystemExit("error: --save/--saved take one --table setting")
    if args.save:
        variants = {"base": variants["base"]}

    import jax
    import numpy as np

    from jaxmd_dp.config import load_config
    from jaxmd_dp.runtime.hugepages import buffers_status, keep_freed_blocks, status
    from jaxmd_dp.train.loop import Trainer

    keep_freed_blocks(only_tools=False)  # as the command-line tools do (JAXMD_DP_KEEP_BUFFERS=0: not)
    print(f"huge pages: {status()}; CPU buffers: {buffers_status()}")
    config = load_config(
        args.config,
        [
            "training.numb_steps=200",
            f"model.descriptor.precision={args.precision}",
            f"model.fitting_net.precision={args.precision}",
        ],
    )
    trainer = Trainer(config, tempfile.mkdtemp(prefix="step_time_"), log=lambda *a, **k: None)
    raw = [trainer.batches.next() for _ in range(args.batches)]
    shapes = sorted({(int(b["coord"].shape[0]), int(b["natoms"])) for b in raw})  # (frames, atoms)
    prepared = [trainer.prepare(b) for b in raw]
    arrays = [a for a, _ in prepared]
    compiled, compile_s = {}, {}
    for table in args.table:  # the layout is a static argument: one executable per setting and batch shape
        calls = [(a, layout._replace(table=table)) for a, layout in prepared]
        for name, v in variants.items():
            label = name if len(args.table) == 1 else f"{name} table={table}"
            t = time.perf_counter()
            compiled[label] = compile_variant(trainer.train_step, v, trainer.state, trainer.stats, calls, trainer.hyper)
            compile_s[label] = time.perf_counter() - t
    if args.save:
        from jax.experimental.serialize_executable import serialize

        with open(args.save, "wb") as f:
            pickle.dump([serialize(c) for c in compiled["base"]], f)
        return 0
    for item in args.saved:
        from jax.experimental.serialize_executable import deserialize_and_load

        name, _, path = item.partition(":")
        with open(path, "rb") as f:
            compiled[name] = [deserialize_and_load(*c) for c in pickle.load(f)]
        if len(compiled[name]) != len(arrays):
            raise SystemExit(f"error: --saved {item!r}: {len(compiled[name])} batches, here {len(arrays)} (--batches)")
    states = {name: jax.tree_util.tree_map(lambda x: x.copy(), trainer.state) for name in compiled}  # donated
    times: dict[str, list[float]] = {name: [] for name in compiled}
    cpu: dict[str, list[float]] = {name: [] for name in compiled}
    last = {}
    for i in range(args.steps):
        batch = arrays[i % len(arrays)]
        for name, steps in compiled.items():
            t, c = time.perf_counter(), time.process_time()
            states[name], metrics = steps[i % len(arrays)](states[name], trainer.stats, batch)
            jax.block_until_ready(states[name].step)
            times[name].append(time.perf_counter() - t)
            cpu[name].append(time.process_time() - c)
            last[name] = metrics
    print(f"{args.config} {args.precision}: batches (frames, atoms) {shapes}; ms per step")
    for name, ts in times.items():
        ms = np.asarray(ts[8:]) * 1e3
        rmse = {k: round(float(v), 8) for k, v in last[name].items() if k.startswith("rmse")}
        first = f"first calls {compile_s[name]:.1f} s; " if name in compile_s else ""
        print(
            f"{name}: {first}median {np.median(ms):.2f}, p25 {np.percentile(ms, 25):.2f}, min {ms.min():.2f} "
            f"over {ms.size} steps; CPU median {np.median(cpu[name][8:]) * 1e3:.1f}; last step {rmse}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
