"""Fixtures of the numba provider's tests."""

from __future__ import annotations

import pytest

from turnout_numba.kernels import conv as conv_mod


@pytest.fixture
def conv_kernel_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    """Small test images take the kernels the test names (im2col, shifted products, bands)
    instead of the paths real models would send them to at these sizes: no numpy kernel for
    small convs, shifted products at any output width, bands whatever the weights weigh."""
    monkeypatch.setattr(conv_mod, "SMALL_CONV_COLUMNS", 0)
    monkeypatch.setattr(conv_mod, "SHIFT_MAX_WASTE", float("inf"))
    monkeypatch.setattr(conv_mod, "FUSED_MIN_COLUMNS", 0)
