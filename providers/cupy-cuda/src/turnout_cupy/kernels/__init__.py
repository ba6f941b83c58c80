"""Importing this package registers every kernel module's kernels in `registry.TABLE`."""

from __future__ import annotations

from . import (  # noqa: F401
    attention,
    attention_extra,
    causal_conv,
    conv,
    detection,
    elementwise,
    loss,
    matmul,
    misc,
    norm,
    pad,
    quant,
    reduce,
    resize,
    rnn,
    scatter,
    select,
    shape,
    spatial,
    spectral,
    training,
    values,
)

__all__: list[str] = []
