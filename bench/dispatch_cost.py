"""What one call of a jitted function costs the host per array it takes and returns.

    .venv/bin/python bench/dispatch_cost.py [--calls 2000] [--sizes 1 3 32 100]

For N float32 arrays (one million numbers in all, split evenly), two functions, each jitted with the arrays
donated as the training step donates its state: ``pass`` returns them unchanged (the call's cost alone:
argument handling, buffers, output arrays) and ``update`` adds a scalar to each (as Adam touches each
weight). Prints ms per call, back to back, on the default device. The training state has 100 arrays
(water: 32 weights and Adam's two moments of each, the counts; ``bench/RESULTS.md``, session 39), so the
difference between N = 100 and N = 3 is what holding the state in a few flat arrays would save per step.
"""

from __future__ import annotations

import argparse
import time


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--sizes", type=int, nargs="+", default=[1, 3, 32, 100])
    args = p.parse_args(argv)

    import jax
    import jax.numpy as jnp

    print(f"device {jax.devices()[0]}; {args.calls} calls each, ms per call")
    for n in args.sizes:
        row = [f"{n:4d} arrays:"]
        for name, fun in (("pass", lambda s, x: (s, x * 2)), ("update", lambda s, x: ([a + x for a in s], x * 2))):
            f = jax.jit(fun, donate_argnums=0)
            state, x = [jnp.zeros(1_000_000 // n, jnp.float32) for _ in range(n)], jnp.float32(1)
            for _ in range(20):
                state, x = f(state, x)
            jax.block_until_ready(state)
            t = time.perf_counter()
            for _ in range(args.calls):
                state, x = f(state, x)
            jax.block_until_ready(state)
            row.append(f"{name} {(time.perf_counter() - t) / args.calls * 1e3:.3f}")
        print("  ".join(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
