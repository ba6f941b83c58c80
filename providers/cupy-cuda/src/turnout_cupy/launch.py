"""Compiling and launching generated kernels: `CupyLauncher` on a GPU. The tests put a host
build of the same kernels in its place (`Backend.launcher`); both take the kernel's full
argument list: arrays, `np.int64` and `np.float64` scalars, in the kernel's parameter order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from turnout.graph.errors import EPFail

__all__ = ["CupyLauncher"]


class CupyLauncher:
    """`cupy.RawKernel`: compiled by NVRTC on first use and kept in CuPy's on-disk kernel
    cache (keyed by the source), launched on the current stream (the session's, in a run)."""

    def build(self, name: str, source: str) -> Any:
        import cupy

        try:
            return cupy.RawKernel(source, name, options=("--std=c++14",))
        except Exception as e:  # a generator bug must name the kernel
            raise EPFail(f"CuPyExecutionProvider: kernel {name}: {e}") from e

    def call(self, kernel: Any, grid: int, block: int, params: Sequence[Any]) -> None:
        kernel((grid,), (block,), tuple(params))
