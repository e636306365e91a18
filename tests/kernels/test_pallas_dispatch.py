"""``pallas_kernels.dispatch``: JAXMD_DP_KERNELS=pallas|jnp|auto, interpret mode off GPU."""

from __future__ import annotations

import jax
import pytest

from pallas_kernels import dispatch


@pytest.fixture
def cpu(monkeypatch):
    monkeypatch.setattr(jax, "default_backend", lambda: "cpu")


@pytest.mark.parametrize(
    "value,on_cpu,on_gpu",
    [
        (None, False, True),
        ("auto", False, True),
        ("pallas", True, True),
        ("jnp", False, False),
        (" PALLAS ", True, True),
    ],
)
def test_use_pallas(monkeypatch, value, on_cpu, on_gpu):
    if value is None:
        monkeypatch.delenv(dispatch.ENV, raising=False)
    else:
        monkeypatch.setenv(dispatch.ENV, value)
    monkeypatch.setattr(jax, "default_backend", lambda: "cpu")
    assert dispatch.use_pallas() is on_cpu
    assert dispatch.interpret_mode() is True
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert dispatch.use_pallas() is on_gpu
    assert dispatch.interpret_mode() is False


def test_explicit_value_overrides_env(monkeypatch, cpu):
    monkeypatch.setenv(dispatch.ENV, "jnp")
    assert dispatch.use_pallas("pallas") is True
    assert dispatch.kernels_setting("auto") == "auto"


def test_bad_value(monkeypatch):
    monkeypatch.setenv(dispatch.ENV, "cuda")
    with pytest.raises(ValueError, match="JAXMD_DP_KERNELS"):
        dispatch.use_pallas()


def test_real_backend_here():
    """This machine: whatever JAX's backend is, interpret_mode() is its negation of being a GPU."""
    assert dispatch.interpret_mode() is (jax.default_backend() != "gpu")
