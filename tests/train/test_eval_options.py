"""The evaluation step's XLA options: CPU-only, and only those this jaxlib knows.

On a GPU (H200, jaxlib 0.11.2, session 23) every water run failed at its first validation with "No such
compile option: 'xla_cpu_use_fusion_emitters'": jaxlib 0.11.2 no longer has that option (its libraries do
not hold the name), and a compile naming an unknown option fails on any backend."""

import pytest

from jaxmd_dp.train import step


@pytest.fixture
def fresh_cache():
    step.eval_compiler_options.cache_clear()
    yield
    step.eval_compiler_options.cache_clear()


def test_no_cpu_options_off_the_cpu(fresh_cache):
    assert step.eval_compiler_options("gpu") is None


def test_unknown_option_dropped_known_kept(fresh_cache, monkeypatch):
    known = step.eval_compiler_options("cpu")
    assert known == {**step.EVAL_CPU_OPTIONS, **step.FEW_EVALS_CPU_OPTIONS}  # jaxlib 0.10 knows them all
    step.eval_compiler_options.cache_clear()
    monkeypatch.setattr(step, "EVAL_CPU_OPTIONS", {**step.EVAL_CPU_OPTIONS, "xla_cpu_not_an_option": True})
    assert step.eval_compiler_options("cpu") == known


def test_few_evaluations_compile_short_many_run_fast(fresh_cache):
    """A run of few validation batches compiles the evaluation step with the older emitters (a shorter
    compile), one of many without them (a faster step): the options differ by exactly those."""
    few, many = step.eval_compiler_options("cpu", few=True), step.eval_compiler_options("cpu", few=False)
    assert many == step.EVAL_CPU_OPTIONS
    assert few == {**many, **step.FEW_EVALS_CPU_OPTIONS}
