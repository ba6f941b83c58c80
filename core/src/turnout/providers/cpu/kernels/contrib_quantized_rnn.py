"""numpy kernel of DynamicQuantizeLSTM (com.microsoft): W and R dequantized ((q - zero point) *
scale, per direction or per gate column) and transposed to ONNX's layout, then the LSTM kernel.

onnxruntime also quantizes X and each step's hidden state to uint8 for its integer GEMMs;
turnout keeps them float, so the two differ within that quantization (about 1% of the range).
The dequantized weights of constant inputs are kept for the next run.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ....contrib import DOMAIN
from ....errors import InvalidArgument
from ....provider import KernelFn, KernelNode
from ..registry import constant_input, cpu_kernel
from .quant import dequantize
from .rnn import lstm

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


@cpu_kernel("DynamicQuantizeLSTM", since=1, domain=DOMAIN)
def dynamic_quantize_lstm(node: KernelNode) -> KernelFn:
    cell = lstm(node)
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
        return tuple(cell(x, wf, rf, b, seq_lens, init_h, init_c, p))

    return run
