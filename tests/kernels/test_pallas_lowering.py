"""The kernels lower for CUDA through Pallas' Triton backend, on this CPU-only machine.

What runs: ``jax.jit(f).trace(*args).lower(lowering_platforms=("cuda",))`` with abstract arguments
(``jax.ShapeDtypeStruct``), inside an abstract mesh whose device is an H100 (:func:`abstract_gpu`). With
jax/jaxlib 0.10.2 or 0.11.2 from PyPI (no CUDA plugin installed) this works: Pallas' GPU lowering rule
is registered for the "cuda" platform, the Triton lowering imports without a GPU (0.10 assumes compute
capability 9.0 when no GPU device is visible; 0.11 takes the abstract device's), and every kernel is
lowered jaxpr → Triton IR and embedded as a ``__gpu$xla.gpu.triton`` custom call. The kernels pass
``pallas_triton.CompilerParams`` so that the Triton (not Mosaic GPU) lowering is used. What this
does not cover: Triton IR → PTX → cubin, which XLA does when compiling on a GPU —
``test_triton_compiles_to_cubin`` does that step with a separately installed ``triton`` when
``JAXMD_DP_TRITON_PYTHON`` names a Python that has it (skipped otherwise).

``jax.export.export(jax.jit(f), platforms=("cuda",))`` also works, but only with
``DisabledSafetyCheck.custom_call("__gpu$xla.gpu.triton")`` (Triton custom calls carry no
serialisation-compatibility guarantee); ``test_export_for_cuda`` checks that.
"""

from __future__ import annotations

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from pallas_cases import RCUT_SMTH, SEL, make_case
from triton_ir import COMPILE_SCRIPT, TRITON_TARGET, triton_modules

from jaxmd_dp.geometry import neighbor as ref_nb
from pallas_kernels import dispatch
from pallas_kernels import env_mat as pem
from pallas_kernels import neighbor as pnb

S = jax.ShapeDtypeStruct
NF, NATOMS, NNEI = 2, 24, sum(SEL)


def _env_args(dtype, with_box=True):
    return (
        S((NF, NATOMS, 3), dtype),
        S((NF, 3, 3), dtype) if with_box else None,
        S((NF, NATOMS), jnp.int32),
        S((NF, NATOMS, NNEI), jnp.int32),
        S((NF, NATOMS, NNEI, 3), dtype),
        S((2, NNEI, 4), dtype),
        S((2, NNEI, 4), dtype),
    )


def _env(c, b, t, i, s, da, ds):
    return pem.env_mat(c, b, t, i, s, 4.0, RCUT_SMTH, da, ds)


def _force_loss_weight_grad(w, c, b, t, i, s, da, ds):
    def energy(w_, c_, b_):
        return jnp.sum(jnp.tanh(_env(c_, b_, t, i, s, da, ds) @ w_))

    def loss(w_):
        gc, gb = jax.grad(energy, argnums=(1, 2))(w_, c, b)
        return jnp.sum(gc**2) + jnp.sum(gb**2)

    return jax.grad(loss)(w)


def abstract_gpu():
    """A context that names the GPU the Triton lowering targets: an abstract H100 (compute capability
    9.0). jax 0.11's lowering asks the abstract mesh for it and fails without a GPU otherwise ("No
    supported GPU devices found"); jax 0.10's falls back to 9.0 by itself and ignores it."""
    device = jax.sharding.AbstractDevice(device_kind="NVIDIA H100", num_cores=None, platform="gpu")
    mesh = jax.sharding.AbstractMesh((1,), ("x",), (jax.sharding.AxisType.Auto,), abstract_device=device)
    return jax.sharding.use_abstract_mesh(mesh)


def lower_cuda(fn, *args):
    with abstract_gpu():
        return jax.jit(fn).trace(*args).lower(lowering_platforms=("cuda",))


def _kernel_names(lowered):
    text = lowered.as_text()
    assert TRITON_TARGET in text
    return sorted(k["name"] for k in triton_modules(lowered))


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
def test_env_mat_lowers_for_cuda(dtype):
    assert _kernel_names(lower_cuda(_env, *_env_args(dtype))) == ["env_mat_fwd"]
    # no box (non-periodic)
    args = _env_args(dtype, with_box=False)
    low = lower_cuda(lambda c, t, i, s, da, ds: _env(c, None, t, i, s, da, ds), args[0], *args[2:])
    assert _kernel_names(low) == ["env_mat_fwd"]


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
def test_env_mat_gradients_lower_for_cuda(dtype):
    """Forces (vjp kernel) and the weight gradient of a force loss (jvp kernel) lower too."""
    low = lower_cuda(_force_loss_weight_grad, S((4,), dtype), *_env_args(dtype))
    assert set(_kernel_names(low)) == {"env_mat_fwd", "env_mat_vjp", "env_mat_jvp"}


def _nl_cases():
    tri = make_case("triclinic")
    small = make_case("small")
    nopbc = make_case("nopbc")
    return [
        ("cell", tri, ref_nb.allocate(tri.coord, tri.box, 3.0, SEL, "cell")),
        ("brute", tri, ref_nb.allocate(tri.coord, tri.box, tri.rcut, SEL, "brute")),
        ("multichunk", small, ref_nb.allocate(small.coord, small.box, small.rcut, SEL, "brute")),
        ("nopbc", nopbc, ref_nb.allocate(nopbc.coord, None, nopbc.rcut, SEL)),
    ]


@pytest.mark.parametrize("order", ["nearest", "any"])
@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
def test_neighbor_lowers_for_cuda(dtype, order):
    for label, case, spec in _nl_cases():
        nf, natoms = case.coord.shape[:2]
        box = None if case.box is None else S(case.box.shape, dtype)
        low = lower_cuda(
            lambda c, b, t: pnb.build(spec, c, b, t, order=order),
            S((nf, natoms, 3), dtype),
            box,
            S((nf, natoms), jnp.int32),
        )
        assert _kernel_names(low) == ["neighbor_list"], label


def test_training_build_has_no_solver_calls(monkeypatch):
    """``neighbor.build`` hands the kernel the box's inverse from its cross products: no cuSOLVER LU calls
    (each a few kernels on the GPU) in the lowered program, as there are with the kernel's own default."""
    monkeypatch.setattr(dispatch, "interpret_mode", lambda: False)  # as on a GPU
    case = make_case("triclinic")
    spec = ref_nb.allocate(case.coord, case.box, 3.0, SEL, "cell")
    args = (S(case.coord.shape, jnp.float64), S(case.box.shape, jnp.float64), S(case.atype.shape, jnp.int32))
    own = lower_cuda(lambda c, b, t: pnb.build(spec, c, b, t, order="any"), *args).as_text()
    low = lower_cuda(lambda c, b, t: ref_nb.build(spec, c, b, t, "pallas", "any"), *args)
    assert "getrf" in own
    assert "getrf" not in low.as_text() and _kernel_names(low) == ["neighbor_list"]


def test_export_for_cuda():
    fn = jax.jit(_env)
    with abstract_gpu(), pytest.raises(ValueError, match="custom calls"):
        jax.export.export(fn, platforms=("cuda",))(*_env_args(jnp.float64))
    with abstract_gpu():
        exp = jax.export.export(
            fn, platforms=("cuda",), disabled_checks=[jax.export.DisabledSafetyCheck.custom_call(TRITON_TARGET)]
        )(*_env_args(jnp.float64))
    assert exp.platforms == ("cuda",)
    assert TRITON_TARGET in exp.mlir_module()


TRITON_PYTHON = os.environ.get("JAXMD_DP_TRITON_PYTHON")


@pytest.mark.slow
@pytest.mark.skipif(not TRITON_PYTHON, reason="set JAXMD_DP_TRITON_PYTHON to a Python with `triton` installed")
def test_triton_compiles_to_cubin(tmp_path):
    """Triton IR → PTX → cubin for sm_90 with a separately installed ``triton`` (no GPU needed)."""
    files = []

    def dump(lowered, tag):
        for k in triton_modules(lowered):
            path = tmp_path / f"{tag}_{k['name']}.w{k['num_warps']}.ttir"
            path.write_text(k["ir"])
            files.append(str(path))

    for dtype in (jnp.float64, jnp.float32):
        tag = np.dtype(dtype).name
        dump(lower_cuda(_force_loss_weight_grad, S((4,), dtype), *_env_args(dtype)), f"env_{tag}")
        for label, case, spec in _nl_cases()[:3]:
            nf, natoms = case.coord.shape[:2]
            for order in ("nearest", "any"):
                low = lower_cuda(
                    lambda c, b, t: pnb.build(spec, c, b, t, order=order),
                    S((nf, natoms, 3), dtype),
                    S((nf, 3, 3), dtype),
                    S((nf, natoms), jnp.int32),
                )
                dump(low, f"nl_{label}_{order}_{tag}")
    script = tmp_path / "compile_ttir.py"
    script.write_text(COMPILE_SCRIPT)
    env = dict(os.environ, TRITON_DEFAULT_FP_FUSION="1")
    r = subprocess.run([TRITON_PYTHON, str(script), "90", *files], capture_output=True, text=True, env=env, timeout=900)
    sys.stdout.write(r.stdout)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("OK ") == len(files) == 18
