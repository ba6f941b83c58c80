"""OpenCL C kernels, one module per op family; importing registers them all (`base.TABLE`)."""

from __future__ import annotations

from . import attention, conv, copy, elementwise, loss, matmul, norm, reduce, resize, shape  # noqa: F401

__all__: list[str] = []
