"""Importing this package registers every kernel module's kernels in `registry.SPECS`."""

from __future__ import annotations

from . import attention, conv, elementwise, loss, matmul, norm, reduce, resize, shape  # noqa: F401
from . import misc, scatter, spatial  # noqa: F401
from . import attention_extra, causal_conv, rnn  # noqa: F401
from . import pad, quant, select, values  # noqa: F401

__all__: list[str] = []
