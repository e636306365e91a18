"""The steps' XLA options: the evaluation step's CPU options, both steps' GPU options, and only those this
jaxlib knows (and, on a GPU, that ``XLA_FLAGS`` does not set).

A compile naming an option this jaxlib does not have fails on any backend ("No such compile option:
'xla_cpu_use_fusion_emitters'": jaxlib 0.11.2 no longer has that option), and it would stop a run at its
first validation. So the expected options
are those this jaxlib compiles with (:func:`knows`, each tried on its own): all of them on jaxlib 0.10, all but
``xla_cpu_use_fusion_emitters`` on 0.11."""

import pytest

from jaxmd_dp.runtime import compile_options
from jaxmd_dp.runtime.compile_options import GPU_STEP_OPTIONS, set_in_xla_flags
from jaxmd_dp.train import step


def knows(options: dict) -> dict | None:
    """The options of ``options`` that this jaxlib compiles a one-op CPU program with, each on its own
    (the library's probe, one option at a time: a bogus option and a known one below keep it honest)."""
    return {k: v for k, v in options.items() if compile_options._accepted(((k, v),))} or None


@pytest.fixture
def fresh_cache():
    step.eval_compiler_options.cache_clear()
    yield
    step.eval_compiler_options.cache_clear()


def test_options_per_backend(fresh_cache, monkeypatch):
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    assert step.eval_compiler_options("gpu") == step.train_compiler_options("gpu") == GPU_STEP_OPTIONS
    assert step.train_compiler_options("cpu") is None


def test_gpu_options_leave_what_xla_flags_sets(fresh_cache, monkeypatch):
    """GEMM autotuning is off for both steps on a GPU unless the user's XLA_FLAGS says otherwise."""
    assert GPU_STEP_OPTIONS == {"xla_gpu_autotune_level": 0}
    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/tmp/x  --xla_gpu_autotune_level=4")
    assert step.train_compiler_options("gpu") is None and step.eval_compiler_options("gpu") is None
    monkeypatch.setenv("XLA_FLAGS", "--xla_gpu_autotune_level_x=1 --xla_dump_to=xla_gpu_autotune_level")
    assert step.train_compiler_options("gpu") == GPU_STEP_OPTIONS


def test_cpu_options_leave_what_xla_flags_sets(fresh_cache, monkeypatch):
    """The same rule on the CPU: a user's XLA_FLAGS option is not overridden by the evaluation step's."""
    monkeypatch.setenv("XLA_FLAGS", "--xla_backend_optimization_level=3")
    assert step.eval_compiler_options("cpu", few=True) == knows(step.FEW_EVALS_CPU_OPTIONS)


@pytest.mark.parametrize(
    "flags, name, expected",
    [
        ("--xla_gpu_autotune_level=0", "xla_gpu_autotune_level", True),
        ("  -xla_a=1 --xla_gpu_autotune_level", "xla_gpu_autotune_level", True),
        ("--xla_gpu_autotune_level_extra=0", "xla_gpu_autotune_level", False),
        ("", "xla_gpu_autotune_level", False),
    ],
)
def test_set_in_xla_flags(flags, name, expected):
    assert set_in_xla_flags(name, flags) is expected


def test_unknown_option_dropped_known_kept(fresh_cache, monkeypatch):
    known = step.eval_compiler_options("cpu")
    assert known == knows({**step.EVAL_CPU_OPTIONS, **step.FEW_EVALS_CPU_OPTIONS})
    assert "xla_backend_optimization_level" in known  # on every jaxlib so far
    step.eval_compiler_options.cache_clear()
    monkeypatch.setattr(step, "EVAL_CPU_OPTIONS", {**step.EVAL_CPU_OPTIONS, "xla_cpu_not_an_option": True})
    assert step.eval_compiler_options("cpu") == known


def test_few_evaluations_compile_short_many_run_fast(fresh_cache):
    """A run of few validation batches compiles the evaluation step with the older emitters (a shorter
    compile), one of many without them (a faster step): the options differ by exactly those, where this
    jaxlib still has them (0.10; not 0.11)."""
    few, many = step.eval_compiler_options("cpu", few=True), step.eval_compiler_options("cpu", few=False)
    assert many == step.EVAL_CPU_OPTIONS == knows(step.EVAL_CPU_OPTIONS)
    assert few == {**many, **(knows(step.FEW_EVALS_CPU_OPTIONS) or {})}


def test_training_step_jitted_with_the_gpu_options_on_a_gpu(fresh_cache, monkeypatch, jit_options):
    """The training step's jit gets the GPU options where jax's default backend is a GPU, none on the CPU."""
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    compile_options.backend_options(tuple(GPU_STEP_OPTIONS.items()), "gpu", "gpu")  # its probe jit first
    jit_options.clear()
    step.make_train_step.__wrapped__(None, None, None, None)  # jitted, not traced: the arguments go unused
    monkeypatch.setattr(compile_options.jax, "default_backend", lambda: "gpu")
    step.make_train_step.__wrapped__(None, None, None, None)
    assert jit_options == [None, GPU_STEP_OPTIONS]
