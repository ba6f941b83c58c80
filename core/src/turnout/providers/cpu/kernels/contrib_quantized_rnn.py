"""numpy kernel of DynamicQuantizeLSTM (com.microsoft): W and R dequantized ((q - zero point) *
scale, per direction or per gate column) and transposed to ONNX's layout, then the LSTM kernel.

As onnxruntime does for its integer GEMMs, X (its steps up to the longest sequence, all at once)
and each step's hidden state (the batch of one direction at once) are rounded to uint8 by
DynamicQuantizeLinear's rule first; their products with the dequantized weights equal the
scaled integer products up to float32 rounding. onnxruntime splits the batch across its
intra-op threads and rounds each part's state on its own range, so it matches this exactly when
it runs one thread (or the batch is 1), and within about 0.1% of the range otherwise.
The dequantized weights of constant inputs are kept for the next run.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ....contrib import DOMAIN
from ....errors import InvalidArgument
from ....provider import KernelFn, KernelNode
from ....semantics.constants import constant_input
from ..registry import cpu_kernel
from .quant import dequantize, dynamic_quantize_linear
from .rnn import quantized_lstm

__all__: list[str] = []

Array = np.ndarray[Any, Any]


def _weights(node: KernelNode, what: str, q: Array, scale: Array, zp: Array) -> Array:
    """[directions, rows, 4 * hidden] codes -> float [directions, 4 * hidden, rows]."""
    dirs = q.shape[0] if q.ndim == 3 else 0
    ok = (dirs, q.shape[-1])
    if q.ndim != 3 or scale.shape not in ((dirs,), ok) or zp.shape != scale.shape:
        raise InvalidArgument(
            f"{node.name}: {what} {q.shape} with scale {scale.shape} and zero point {zp.shape}: "
            f"the parameters must be [directions] or [directions, 4 * hidden]"
        )
    shape = (dirs, 1, scale.size // dirs)
    out: Array = dequantize(q, scale.reshape(shape), zp.reshape(shape)).transpose(0, 2, 1)
    return np.ascontiguousarray(out)


def _rounder(node: KernelNode) -> Any:
    """x -> x rounded to uint8 on its own range and back."""
    quantize = dynamic_quantize_linear(node)

    def rounded(x: Array) -> Array:
        q, scale, zp = quantize(x)
        out: Array = dequantize(q, scale, zp)
        return out

    return rounded


@cpu_kernel("DynamicQuantizeLSTM", since=1, domain=DOMAIN)
def dynamic_quantize_lstm(node: KernelNode) -> KernelFn:
    rounded = _rounder(node)

    def state(h: Array) -> Array:
        """One direction's [batch, hidden] state, or both as [2, batch, hidden], each on its
        own range (onnxruntime multiplies each direction's on its own)."""
        return np.stack([rounded(d) for d in h]) if h.ndim == 3 else rounded(h)

    cell = quantized_lstm(node, state)
    kept: dict[str, tuple[tuple[int, ...], Array]] = {}

    def weights(what: str, indices: tuple[int, int, int], q: Array, s: Array, z: Array) -> Array:
        key = (id(q), id(s), id(z))
        found = kept.get(what)
        if found is not None and found[0] == key:
            return found[1]
        w = _weights(node, what, q, s, z)
        if all(constant_input(node, i) for i in indices):
            kept[what] = (key, w)
        return w

    def run(
        x: Array,
        w: Array,
        r: Array,
        b: Array | None,
        seq_lens: Array | None,
        init_h: Array | None,
        init_c: Array | None,
        p: Array | None,
        w_scale: Array,
        w_zp: Array,
        r_scale: Array,
        r_zp: Array,
    ) -> tuple[Array | None, ...]:
        wf = weights("W", (1, 8, 9), w, w_scale, w_zp)
        rf = weights("R", (2, 10, 11), r, r_scale, r_zp)
        steps = x.shape[0] if seq_lens is None or x.ndim != 3 else int(np.max(seq_lens, initial=0))
        xq = np.array(x, np.float32)
        xq[:steps] = rounded(xq[:steps])
        return tuple(cell(xq, wf, rf, b, seq_lens, init_h, init_c, p))

    return run
