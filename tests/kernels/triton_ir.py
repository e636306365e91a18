"""Triton IR of the Pallas kernels in a function lowered for CUDA (works on a CPU-only machine).

``jax.jit(f).trace(*args).lower(lowering_platforms=("cuda",))`` runs Pallas' Triton lowering (jaxpr →
Triton dialect) and embeds each kernel as a ``stablehlo.custom_call @__gpu$xla.gpu.triton`` whose
``mhlo.backend_config`` holds the kernel name, grid, num_warps and the Triton module as MLIR bytecode.
Turning that IR into PTX/cubin is XLA's job at compile time on a GPU; here :func:`triton_modules` gives
the textual IR so that a separately installed ``triton`` can compile it for sm_90 (see
``test_pallas_lowering.py``). Uses jaxlib internals (MLIR context with the Triton dialect).
"""

from __future__ import annotations

TRITON_TARGET = "__gpu$xla.gpu.triton"


def _custom_calls(module):
    out = []

    def walk(op):
        for region in op.regions:
            for block in region.blocks:
                for o in block.operations:
                    if o.operation.name == "stablehlo.custom_call":
                        out.append(o)
                    walk(o.operation)

    walk(module.operation)
    return out


def triton_modules(lowered) -> list[dict]:
    """[{name, num_warps, grid, ir (textual Triton IR)}] for every Triton kernel in ``lowered``."""
    from jax._src.interpreters import mlir as jax_mlir
    from jax._src.lib.mlir import ir
    from jax._src.lib.triton import dialect as tt_dialect

    module = lowered.compiler_ir("stablehlo")
    kernels = []
    ctx = jax_mlir.make_ir_context()
    tt_dialect.register_dialect(ctx)
    for op in _custom_calls(module):
        target = str(op.attributes["call_target_name"]).strip('"')
        if target != TRITON_TARGET:
            continue
        cfg = op.attributes["mhlo.backend_config"]
        as_int = lambda key: int(str(cfg[key]).split(":")[0])
        with ctx:
            text = str(ir.Module.parse(cfg["ir"].value_bytes))
        kernels.append(
            dict(
                name=str(cfg["name"]).strip('"'),
                num_warps=as_int("num_warps"),
                grid=(as_int("grid_x"), as_int("grid_y"), as_int("grid_z")),
                ir=text,
            )
        )
    return kernels


# Run by a Python that has ``triton`` (argv: target compute capability, then .ttir files); prints one
# line per kernel: name, OK/FAIL, and ptxas' register / spill report when ptxas is bundled.
COMPILE_SCRIPT = r"""
import glob, os, subprocess, sys, tempfile
import triton
from triton.backends.compiler import GPUTarget

cc = int(sys.argv[1])
target = GPUTarget("cuda", cc, 32)
bindir = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
failed = 0
for path in sys.argv[2:]:
    warps = int(path.rsplit(".w", 1)[1].split(".")[0])
    try:
        k = triton.compile(path, target=target, options={"num_warps": warps, "num_stages": 1})
    except Exception as e:  # noqa: BLE001
        failed += 1
        print("FAIL", os.path.basename(path), type(e).__name__, str(e)[:2000])
        continue
    report = ""
    for exe in ("ptxas-blackwell", "ptxas"):
        ptxas = os.path.join(bindir, exe)
        if not os.path.exists(ptxas):
            continue
        with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
            f.write(k.asm["ptx"])
        r = subprocess.run([ptxas, "-v", f"--gpu-name=sm_{cc}a" if cc >= 90 else f"--gpu-name=sm_{cc}", f.name,
                            "-o", os.devnull], capture_output=True, text=True)
        if r.returncode == 0:
            lines = [l.split("info    :")[-1].strip() for l in (r.stdout + r.stderr).splitlines()
                     if "registers" in l or "spill" in l]
            report = " | ".join(lines)
            break
    print("OK", os.path.basename(path), f"cubin {len(k.asm['cubin'])} B", report)
sys.exit(1 if failed else 0)
"""
