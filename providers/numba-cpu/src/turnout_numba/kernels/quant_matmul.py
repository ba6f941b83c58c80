"""MatMulInteger and QLinearMatMul on 8-bit inputs (any mix of uint8 and int8), through the
integer GEMM of `quant_gemm`.

A constant B with a constant zero point (a quantized weight) is shifted and laid out as
(N, K) int16 when the kernel is built; other B are prepared per run (and kept while the same
read-only array comes in). A's rows are shifted per run into one int16 buffer. A with N-D B
(batched products) runs one GEMM per broadcast batch index.

Zero points and scales: per tensor, per row of A (1-D, M values) and per column of B (1-D, N
values), as the ONNX spec allows; QLinearMatMul's y_scale/y_zero_point per tensor or per row.
Outputs: MatMulInteger's int32 is exact (int32 accumulation, as onnxruntime); QLinearMatMul's
is onnxruntime's requantization, bit for bit (see `quant_gemm`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from turnout.errors import InvalidArgument
from turnout.provider import KernelFn, KernelNode
from turnout.providers.cpu.registry import constant_input

from ..registry import BuildContext, numba_kernel
from .quant_gemm import IntGemm, Params, Rows, shifted, shifted_t

__all__ = ["EIGHT_BIT", "eight_bit_applies", "matmul_shapes"]

EIGHT_BIT = ("uint8", "int8")

Array = np.ndarray[Any, Any]


def eight_bit_applies(
    kn: KernelNode, indices: tuple[int, ...], outputs: bool = False
) -> str | None:
    """None when the inputs at `indices` (and the outputs, when asked) have 8-bit integer
    types known at session creation, else why not."""
    infos = [(f"input {i}", kn.inputs[i] if i < len(kn.inputs) else None) for i in indices]
    if outputs:
        infos += [(f"output {i}", o) for i, o in enumerate(kn.outputs)]
    for what, info in infos:
        if info is None or info.elem_type is None:
            return f"type of {what} unknown at session creation"
        if info.dtype.name not in EIGHT_BIT:
            return f"{kn.op_type} on {info.dtype} is not compiled by numba"
    return None


def _const(kn: KernelNode, i: int) -> Array | None:
    """Input `i` when it is a constant initializer (the same read-only array every run)."""
    if not constant_input(kn, i):
        return None
    v = kn.node.graph.initializers.get(kn.node.inputs[i])
    return v if isinstance(v, np.ndarray) else None


def matmul_shapes(name: str, a: Array, b: Array) -> tuple[tuple[int, ...], int, int, int]:
    """(output shape, M, K, N) of matmul(a, b) for a 2-D (or 1-D) b, checking K."""
    if a.ndim == 0 or b.ndim == 0:
        raise InvalidArgument(f"{name}: MatMul inputs must have rank >= 1")
    k = a.shape[-1]
    kb = b.shape[0]
    n = b.shape[1] if b.ndim == 2 else 1
    if k != kb:
        raise InvalidArgument(f"{name}: inner dimensions of {a.shape} and {b.shape} differ")
    m = int(np.prod(a.shape[:-1], dtype=np.int64))
    lead = a.shape[:-1]
    return (*lead, n) if b.ndim == 2 else lead, m, k, n


class _PackedB:
    """B as (N, K) int16 less its zero point: built once for a constant B and zero point,
    else kept while the same read-only B and zero point come in."""

    def __init__(self, kn: KernelNode, b_index: int, zp_index: int) -> None:
        self.name = kn.name
        self.kept: tuple[Any, Any, Array] | None = None
        b = _const(kn, b_index)
        has_zp = len(kn.node.inputs) > zp_index and bool(kn.node.inputs[zp_index])
        zp = _const(kn, zp_index) if has_zp else None
        if b is not None and b.ndim == 2 and (zp is not None or not has_zp):
            self.kept = (b, zp, self._pack(b, zp))

    def _pack(self, b: Array, zp: Any) -> Array:
        bt = shifted_t(self.name, b, zp, "B")
        bt.flags.writeable = False
        return bt

    def __call__(self, b: Array, zp: Any) -> Array:
        kept = self.kept
        if kept is not None and kept[0] is b and kept[1] is zp:
            return kept[2]
        bt = self._pack(b, zp)
        if not b.flags.writeable and (zp is None or not zp.flags.writeable):
            self.kept = (b, zp, bt)
        return bt


def _a_rows(name: str, a: Array, zp: Any) -> Array:
    """A less its zero point, as (rows, K) int16; a 1-D zero point runs along A's rows."""
    a2 = a.reshape(1, -1) if a.ndim == 1 else a
    return shifted(name, a2, zp, "A", axis=-2).reshape(-1, a2.shape[-1])


def _product(
    name: str,
    a: Array,
    b: Array,
    a_zp: Any,
    b_zp: Any,
    packed: _PackedB,
    out: np.dtype[Any],
    run: Callable[[Array, Array, Array, int], None],
) -> Array:
    """A (N-D) times B: one GEMM for a 1-D/2-D B, one per broadcast batch index otherwise.
    `run(a16, bt16, y, batch)` stores one (rows, N) block."""
    if b.ndim <= 2:
        shape, m, _k, n = matmul_shapes(name, a, b)
        bt = packed(b.reshape(-1, 1) if b.ndim == 1 else b, b_zp)
        y = np.empty((m, n), out)
        if m and n:
            run(_a_rows(name, a, a_zp), bt, y, 0)
        return y.reshape(shape)
    a2 = a.reshape(1, -1) if a.ndim == 1 else a
    if a2.shape[-1] != b.shape[-2]:
        raise InvalidArgument(f"{name}: inner dimensions of {a.shape} and {b.shape} differ")
    try:
        batch = np.broadcast_shapes(a2.shape[:-2], b.shape[:-2])
    except ValueError:
        raise InvalidArgument(f"{name}: cannot multiply shapes {a.shape} and {b.shape}") from None
    a16 = np.broadcast_to(shifted(name, a2, a_zp, "A", axis=-2), (*batch, *a2.shape[-2:]))
    b16 = np.broadcast_to(shifted(name, b, b_zp, "B"), (*batch, *b.shape[-2:]))
    m, n = a2.shape[-2], b.shape[-1]
    y = np.empty((*batch, m, n), out)
    for idx in np.ndindex(*batch):
        if m and n:
            run(np.ascontiguousarray(a16[idx]), np.ascontiguousarray(b16[idx].T), y[idx], 0)
    return y[..., 0, :] if a.ndim == 1 else y


def _matmul_integer_applies(kn: KernelNode) -> str | None:
    return eight_bit_applies(kn, (0, 1))


def _build_matmul_integer(kn: KernelNode, ctx: BuildContext) -> KernelFn:
    name = kn.name
    gemm = IntGemm(ctx, "int", np.int32)
    packed = _PackedB(kn, 1, 3)

    def store(a16: Array, bt: Array, y: Array, _: int) -> None:
        gemm(a16, Rows.plain(bt), y)

    def run(a: Array, b: Array, a_zp: Any = None, b_zp: Any = None) -> tuple[Array]:
        return (_product(name, a, b, a_zp, b_zp, packed, np.dtype(np.int32), store),)

    return run


def _vector(name: str, p: Any, what: str, count: int, period: int) -> Array:
    """A scale or zero point as a 1-D array of 1 or `count` values; a per-row value of an N-D
    A (`period` rows per matrix, `count` rows in all) repeats for every matrix."""
    v = np.asarray(p).reshape(-1)
    if v.size not in (1, period):
        raise InvalidArgument(
            f"{name}: {what} of shape {np.shape(p)} must be a scalar or ({period},)"
        )
    return np.tile(v, count // period) if 1 < v.size < count else v


def requant_params(
    name: str, rows: int, cols: int, m: int, a_s: Any, b_s: Any, y_s: Any, y_zp: Any
) -> tuple[Params, Params]:
    """onnxruntime's multiplier `a_scale * b_scale / y_scale` in float32 (a_scale and y_scale
    per tensor or per row, b_scale per tensor or per column) and the output zero point, as
    the requantizing kernel reads them; `rows` rows in all, `m` per matrix."""
    a = _vector(name, a_s, "a_scale", rows, m).astype(np.float32)
    b = _vector(name, b_s, "b_scale", cols, cols).astype(np.float32)
    y = _vector(name, y_s, "y_scale", rows, m).astype(np.float32)
    if a.size == 1 and y.size == 1:
        mult = Params(np.ascontiguousarray(a * b / y), 0, int(b.size > 1))
    else:  # a per-row scale: one multiplier per element
        full = a.reshape(-1, 1) * b.reshape(1, -1) / y.reshape(-1, 1)
        full = np.ascontiguousarray(np.broadcast_to(full, (rows, cols)))
        mult = Params(full.reshape(-1), cols, 1)
    if y_zp is None:
        zp = Params(np.zeros(1, np.int32))
    else:
        z = _vector(name, y_zp, "y_zero_point", rows, m).astype(np.int32)
        zp = Params(z, int(z.size > 1), 0)
    return mult, zp


def _qlinear_matmul_applies(kn: KernelNode) -> str | None:
    return eight_bit_applies(kn, (0, 3), outputs=True)


def _build_qlinear_matmul(kn: KernelNode, ctx: BuildContext) -> KernelFn:
    name = kn.name
    out = np.dtype(kn.outputs[0].dtype)
    gemm = IntGemm(ctx, "requant", out)
    packed = _PackedB(kn, 3, 5)

    def run(
        a: Array, a_s: Array, a_zp: Any, b: Array, b_s: Array, b_zp: Any, y_s: Array, y_zp: Any
    ) -> tuple[Array]:
        if y_zp is not None and y_zp.dtype != out:
            raise InvalidArgument(f"{name}: y_zero_point type {y_zp.dtype} is not {out}")

        def store(a16: Array, bt: Array, y: Array, _: int) -> None:
            m = a.shape[-2] if a.ndim > 1 else 1
            mult, zp = requant_params(name, y.shape[0], y.shape[1], m, a_s, b_s, y_s, y_zp)
            gemm(a16, Rows.plain(bt), y, mult, None, zp)

        return (_product(name, a, b, a_zp, b_zp, packed, out, store),)

    return run


numba_kernel("MatMulInteger", since=10, applies=_matmul_integer_applies)(_build_matmul_integer)
numba_kernel("QLinearMatMul", since=10, applies=_qlinear_matmul_applies)(_build_qlinear_matmul)
