"""Which pointwise kernels a device gets: ``pointwise.c`` on the CPU, Triton's on a GPU (when Triton is
there and not turned off), none elsewhere."""

from __future__ import annotations

import pytest
import torch

from backends.engine.kernels import cpu_pointwise, pointwise


def test_the_cpu_gets_the_c_kernels() -> None:
    assert pointwise.for_device(torch.device("cpu")) is cpu_pointwise.load()


def test_a_device_without_kernels_gets_none() -> None:
    assert pointwise.for_device(torch.device("meta")) is None


@pytest.mark.parametrize(("setting", "expected"), [("1", True), ("0", False)])
def test_a_gpu_gets_the_triton_kernels_unless_turned_off(
    monkeypatch: pytest.MonkeyPatch, setting: str, expected: bool
) -> None:
    pytest.importorskip("triton")
    monkeypatch.setenv("SORTYARD_TRITON_POINTWISE", setting)
    monkeypatch.setattr("backends.engine.kernels.triton.is_available", lambda: True)
    pointwise._triton.cache_clear()
    try:
        kernel = pointwise.for_device(torch.device("cuda"))
        assert (kernel is not None) == expected
        if kernel is not None:
            from backends.engine.kernels.triton.pointwise import TritonPointwise

            assert isinstance(kernel, TritonPointwise)
    finally:
        pointwise._triton.cache_clear()
