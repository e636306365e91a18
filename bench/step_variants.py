"""In-process A/B of training-step variants: every variant's step is compiled in one process and the
variants take turns step by step, so a slow spell of a shared machine hits all alike (between processes
the same step's median moved by ~15 % on the 2-core host of session 18; in one process by ~1 %).

    .venv/bin/python bench/step_variants.py CONFIG [--precision float64] [--table 64] [--steps 300]
        [--variant NAME:MODULE.ATTR=EXPR ...] [--options NAME:KEY=VALUE ...]

Between two checkouts (each loads its own ``jaxmd_dp``): ``--save PKL`` in one writes its step's
executables (``jax.experimental.serialize_executable``; same jax, same machine) and exits, ``--saved NAME:PKL``
in the other adds them as variant NAME. Both need the same CONFIG and options, which give the same batches:

    .venv/bin/python /tmp/old/bench/step_variants.py CONFIG --save /tmp/old.pkl   # e.g. a worktree of the old commit
    .venv/bin/python bench/step_variants.py CONFIG --saved old:/tmp/old.pkl

A variant replaces a module attribute while its step is traced (``--variant``; EXPR is Python, evaluated
with that module's globals, e.g. ``einsum:jaxmd_dp.model.se_e2_a.env_product_train=env_product``: the
exact nets' Rᵀ·G as a plain einsum), or compiles with XLA compiler options (``--options``, e.g.
``emitters:xla_cpu_use_fusion_emitters=false``; added to the training step's own, which the CPU has none
of). Several items with one NAME make one variant. A variant ``base`` (the code as it is) is always
included. CONFIG: our YAML or a DeePMD-kit input.json. Prints per
variant the median, lower quartile and minimum of the step times (ms; the first 8 steps of each left
out) and the loss metrics of its last step (variants that compute the same numbers show the same ones).
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


def compile_variant(step, variant: dict, state, stats, calls) -> list:
    """The step's executables for ``calls`` [(arrays, layout)], traced with the variant's attributes."""
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
        options = {**(train_compiler_options() or {}), **variant["options"]}  # the training step's, as it runs
        return [jitted.lower(state, stats, arrays, layout).compile(compiler_options=options or None)
                for arrays, layout in calls]
    finally:
        for mod, attr, old in reversed(saved):
            setattr(mod, attr, old)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("config")
    p.add_argument("--precision", default="float64", choices=["float64", "float32"])
    p.add_argument("--table", type=int, default=0, help="training.embedding_table (0: exact nets)")
    p.add_argument("--steps", type=int, default=300, help="steps of each variant")
    p.add_argument("--batches", type=int, default=4)
    p.add_argument("--variant", action="append", default=[], metavar="NAME:MODULE.ATTR=EXPR")
    p.add_argument("--options", action="append", default=[], metavar="NAME:KEY=VALUE")
    p.add_argument("--save", metavar="PKL", help="write this checkout's step (variant base) to PKL and exit")
    p.add_argument("--saved", action="append", default=[], metavar="NAME:PKL",
                   help="another checkout's step, written by its --save, as variant NAME")
    args = p.parse_args(argv)
    variants = parse_variants(args.variant, args.options)
    if args.save:
        variants = {"base": variants["base"]}

    import jax
    import numpy as np

    from jaxmd_dp.config import load_config
    from jaxmd_dp.train.loop import Trainer

    config = load_config(args.config, ["training.numb_steps=200", f"model.descriptor.precision={args.precision}",
                                       f"model.fitting_net.precision={args.precision}",
                                       f"training.embedding_table={args.table}"])
    trainer = Trainer(config, tempfile.mkdtemp(prefix="step_variants_"), log=lambda *a, **k: None)
    calls = [trainer.prepare(trainer.batches.next()) for _ in range(args.batches)]
    compiled = {name: compile_variant(trainer.train_step, v, trainer.state, trainer.stats, calls)
                for name, v in variants.items()}
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
        if len(compiled[name]) != len(calls):
            raise SystemExit(f"error: --saved {item!r}: {len(compiled[name])} batches, here {len(calls)} (--batches)")
    states = {name: jax.tree_util.tree_map(lambda x: x.copy(), trainer.state) for name in compiled}
    times: dict[str, list[float]] = {name: [] for name in compiled}
    last = {}
    for i in range(args.steps):
        arrays = calls[i % len(calls)][0]
        for name, steps in compiled.items():
            t = time.perf_counter()
            states[name], metrics = steps[i % len(calls)](states[name], trainer.stats, arrays)
            jax.block_until_ready(states[name].step)
            times[name].append(time.perf_counter() - t)
            last[name] = metrics
    for name, ts in times.items():
        ms = np.asarray(ts[8:]) * 1e3
        rmse = {k: round(float(v), 8) for k, v in last[name].items() if k.startswith("rmse")}
        print(f"{name}: median {np.median(ms):.2f} ms, p25 {np.percentile(ms, 25):.2f}, min {ms.min():.2f} "
              f"over {ms.size} steps; last step {rmse}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
