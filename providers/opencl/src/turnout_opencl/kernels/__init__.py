"""OpenCL C kernels, one module per op family; importing registers them all (`base.SPECS`)."""

from __future__ import annotations

from . import conv, copy, elementwise, matmul, norm, reduce, shape  # noqa: F401

__all__: list[str] = []
