"""Fixtures of the numba provider's tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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


@pytest.fixture
def conv_path_spy(monkeypatch: pytest.MonkeyPatch) -> Callable[[tuple[str, ...]], list[str]]:
    """`spy(names)`: the list each run appends to with the conv.py path function it takes,
    among `names`. A small conv of one image runs the function `_one_image_run` made for its
    plan, recorded as `_small_conv` (the path it stands for)."""

    def spy(names: tuple[str, ...]) -> list[str]:
        ran: list[str] = []
        for name in names:
            real = getattr(conv_mod, name)

            def recorded(*args: Any, _real: Any = real, _name: str = name) -> Any:
                ran.append(_name)
                return _real(*args)

            monkeypatch.setattr(conv_mod, name, recorded)
        if "_small_conv" in names:
            make = conv_mod._one_image_run

            def one_image_run(*args: Any) -> Any:
                run = make(*args)

                def recorded(*call: Any) -> Any:
                    ran.append("_small_conv")
                    return run(*call)

                return recorded

            monkeypatch.setattr(conv_mod, "_one_image_run", one_image_run)
        return ran

    return spy
