"""MatMulInteger and QLinearMatMul on 8-bit inputs (any mix of uint8 and int8), through the
integer GEMM of `quant_gemm`.

A constant B with a constant zero point (a quantized weight) is shifted and laid out as
(N, K) int16 when the kernel is built; other B are prepared per run (and kept while the same
read-only array comes in). A's rows are shifted per run into one int16 buffer. A with N-D B
(batched products, activations times activations) runs every batch index in one call of
`quant_batched`.

Zero points and scales: per tensor, per row of A (1-D, M values) and per column of B (1-D, N
values), as the ONNX spec allows; QLinearMatMul's y_scale/y_zero_point per tensor or per row.
Outputs: MatMulInteger's int32 is exact (int32 accumulation, as onnxruntime); QLinearMatMul's
is onnxruntime's requantization, bit for bit (see `quant_gemm`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from turnout.graph.errors import InvalidArgument
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.constants import constant_input, transposed

from ..registry import BuildContext, numba_kernel
from .quant_batched import BatchedProduct
from .quant_gemm import NO_PARAMS, IntGemm, Params, Rows, shifted, shifted_t
from .quant_vnni import AVAILABLE as VNNI
from .quant_vnni import VnniB, VnniGemm, row_blocks

__all__ = ["EIGHT_BIT", "MatMulEngine", "eight_bit_applies", "matmul_shapes"]

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
    m = math.prod(a.shape[:-1])
    lead = a.shape[:-1]
    return (*lead, n) if b.ndim == 2 else lead, m, k, n


class _PackedB:
    """B as the GEMM reads it (`pack(name, b, zp)`): built once for a constant B and zero
    point, else kept while the same read-only B and zero point come in."""

    def __init__(
        self, kn: KernelNode, b_index: int, zp_index: int, pack: Callable[..., Any]
    ) -> None:
        self.name = kn.name
        self.pack = pack
        self.kept: tuple[Any, Any, Any] | None = None
        b = _const(kn, b_index)
        has_zp = len(kn.node.inputs) > zp_index and bool(kn.node.inputs[zp_index])
        zp = _const(kn, zp_index) if has_zp else None
        if b is not None and b.ndim == 2 and (zp is not None or not has_zp):
            self.kept = (b, zp, pack(self.name, b, zp))

    def __call__(self, b: Array, zp: Any) -> Any:
        kept = self.kept
        if kept is not None and kept[0] is b and kept[1] is zp:
            return kept[2]
        packed = self.pack(self.name, b, zp)
        if not b.flags.writeable and (zp is None or not zp.flags.writeable):
            self.kept = (b, zp, packed)
        return packed


def _pack16(name: str, b: Array, zp: Any) -> Rows:
    bt = shifted_t(name, b, zp, "B")
    bt.flags.writeable = False
    return Rows.plain(bt)


def _b_zero(name: str, zp: Any, b: Array) -> Array:
    """B's zero point as int32: 1 value, or one per column of B."""
    if zp is None:
        return np.zeros(1, np.int32)
    if zp.dtype != b.dtype:
        raise InvalidArgument(
            f"{name}: B zero point type {zp.dtype} differs from input type {b.dtype}"
        )
    if zp.size > 1 and (zp.ndim != 1 or zp.shape[0] != b.shape[-1]):
        raise InvalidArgument(
            f"{name}: B zero point of shape {zp.shape} does not fit input {b.shape}"
        )
    z: Array = zp.astype(np.int32).reshape(-1)
    return z


def _transposed(pack: Callable[..., Any]) -> Callable[..., Any]:
    def packed_t(name: str, b: Array, zp: Any) -> Any:
        return pack(name, transposed(b), zp)

    return packed_t


def _pack8(name: str, b: Array, zp: Any) -> VnniB:
    _b_zero(name, zp, b)
    return VnniB.of(b, zp)


class MatMulEngine:
    """One node's products: the VNNI tiles where the host has them, else the int16 GEMM.
    `product(a, b, a_zp, b_zp, out, params)`; `params(rows, cols, m)` gives the store's
    (multiplier, bias, zero point) for a block of `rows` rows, `m` per matrix."""

    def __init__(
        self,
        kn: KernelNode,
        ctx: BuildContext,
        variant: str,
        out: Any,
        b: int,
        zp: int,
        trans_b: bool = False,
    ):
        self.name = kn.name
        self.trans_b = trans_b
        self.vnni = VnniGemm(ctx, variant, out, transposed=False) if VNNI else None
        self.gemm = IntGemm(ctx, variant, out, np.float32 if variant == "scale" else np.int32)
        pack = _pack8 if VNNI else _pack16
        if trans_b:  # (Gemm's transB: B is stored (N, K); packed as its transpose, once)
            pack = _transposed(pack)
        self.packed = _PackedB(kn, b, zp, pack)
        # an N-D B (activations times activations) can only come where B is no constant matrix
        b_const = _const(kn, b)
        self.batched = None
        if b_const is None or b_const.ndim > 2:
            bias = np.float32 if variant == "scale" else np.int32
            a_t, b_t = kn.inputs[0].dtype, kn.inputs[b].dtype
            self.batched = BatchedProduct(ctx, a_t, b_t, variant, out, bias)
        self.plans: dict[int, tuple[Any, Any]] = {}
        self.a_zero: tuple[Any, tuple[int, int, int], Array] | None = None

    def product(
        self, a: Array, b: Array, a_zp: Any, b_zp: Any, out: np.dtype[Any], params: Any
    ) -> Array:
        name = self.name
        if b.ndim > 2:
            return self._batched(a, b, a_zp, b_zp, out, params)
        shape, rows, k, n = matmul_shapes(name, a, b.T if self.trans_b else b)
        packed = self.packed(b.reshape(-1, 1) if b.ndim == 1 else b, b_zp)
        y = np.empty((rows, n), out)
        if rows and n:
            m = a.shape[-2] if a.ndim > 1 else 1
            p = params(rows, n, m) if params is not None else NO_PARAMS
            if self.vnni is not None:
                self._vnni(a.reshape(rows, k), m, a_zp, packed, y, p)
            else:
                self.gemm(_a_rows(name, a, a_zp), packed, y, *p)
        return y.reshape(shape)

    def _vnni(self, a2: Array, m: int, a_zp: Any, vb: VnniB, y: Array, p: Any) -> None:
        assert self.vnni is not None
        rows, k = a2.shape
        off = 128 if a2.dtype == np.int8 else 0
        k4 = -(-k // 4) * 4
        if off or k4 != k or not a2.flags.c_contiguous:
            au = np.zeros((rows, k4), np.uint8)
            if off:
                np.bitwise_xor(a2.view(np.uint8), 0x80, out=au[:, :k])
            else:
                au[:, :k] = a2
        else:
            au = a2
        kept = self.a_zero
        if kept is not None and kept[0] is a_zp and kept[1] == (rows, m, off):
            az = kept[2]
        else:
            az = _a_zero(self.name, a_zp, a2.dtype, rows, m) + off
            if a_zp is not None and not a_zp.flags.writeable:  # a constant: the same each run
                self.a_zero = (a_zp, (rows, m, off), az)
        rowsum = au.sum(axis=1, dtype=np.int32) if vb.zero_points else None
        plan = self.plans.get(rows)
        if plan is None:
            plan = self.plans[rows] = row_blocks(rows, rows, k4, k4)
        self.vnni(au.reshape(-1), *plan, _ONE_RUN, vb, rows, y, rowsum, az, p)

    def _batched(
        self, a: Array, b: Array, a_zp: Any, b_zp: Any, out: np.dtype[Any], params: Any
    ) -> Array:
        """A times an N-D B: every broadcast batch index in one call of `quant_batched`."""
        name = self.name
        assert self.batched is not None  # (built wherever B is not a constant matrix)
        a2 = a.reshape(1, -1) if a.ndim == 1 else a
        if a2.shape[-1] != b.shape[-2]:
            raise InvalidArgument(f"{name}: inner dimensions of {a.shape} and {b.shape} differ")
        try:
            batch = np.broadcast_shapes(a2.shape[:-2], b.shape[:-2])
        except ValueError:
            raise InvalidArgument(
                f"{name}: cannot multiply shapes {a.shape} and {b.shape}"
            ) from None
        m, k = a2.shape[-2:]
        n = b.shape[-1]
        a3 = np.ascontiguousarray(np.broadcast_to(a2, (*batch, m, k))).reshape(-1, m, k)
        b3 = np.ascontiguousarray(np.broadcast_to(b, (*batch, k, n))).reshape(-1, k, n)
        y = np.empty((*batch, m, n), out)
        if y.size:
            p = params(m, n, m) if params is not None else NO_PARAMS
            az = _a_zero(name, a_zp, a2.dtype, m, m)
            self.batched(a3, az, b3, _b_zero(name, b_zp, b), y.reshape(-1, m, n), p)
        return y[..., 0, :] if a.ndim == 1 else y


_ONE_RUN = np.zeros(1, np.int64)


def _a_zero(name: str, zp: Any, dt: np.dtype[Any], rows: int, m: int) -> Array:
    """A's zero point as int32: 1 value, or one per row (`m` per matrix, repeated)."""
    if zp is None:
        return np.zeros(1, np.int32)
    if zp.dtype != dt:
        raise InvalidArgument(f"{name}: A zero point type {zp.dtype} differs from input type {dt}")
    z: Array = zp.astype(np.int32).reshape(-1)
    if z.size == 1:
        return z
    if zp.ndim != 1 or z.size != m:
        raise InvalidArgument(f"{name}: A zero point of shape {zp.shape} does not fit {m} rows")
    return np.tile(z, rows // m)


def _a_rows(name: str, a: Array, zp: Any) -> Array:
    """A less its zero point, as (rows, K) int16; a 1-D zero point runs along A's rows."""
    a2 = a.reshape(1, -1) if a.ndim == 1 else a
    return shifted(name, a2, zp, "A", axis=-2).reshape(-1, a2.shape[-1])


def _matmul_integer_applies(kn: KernelNode) -> str | None:
    return eight_bit_applies(kn, (0, 1))


def _build_matmul_integer(kn: KernelNode, ctx: BuildContext) -> KernelFn:
    engine = MatMulEngine(kn, ctx, "int", np.int32, 1, 3)
    out = np.dtype(np.int32)

    def run(a: Array, b: Array, a_zp: Any = None, b_zp: Any = None) -> tuple[Array]:
        return (engine.product(a, b, a_zp, b_zp, out, None),)

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
    engine = MatMulEngine(kn, ctx, "requant", out, 3, 5)
    no_bias = Params.scalar(0, np.int32)
    kept: list[Any] = [None]  # the last (scales, zero point, shape) and their parameters

    def run(
        a: Array, a_s: Array, a_zp: Any, b: Array, b_s: Array, b_zp: Any, y_s: Array, y_zp: Any
    ) -> tuple[Array]:
        if y_zp is not None and y_zp.dtype != out:
            raise InvalidArgument(f"{name}: y_zero_point type {y_zp.dtype} is not {out}")

        def params(rows: int, cols: int, m: int) -> tuple[Params, Params, Params]:
            # constant scales come as the same read-only arrays every run: computed once
            key = (a_s, b_s, y_s, y_zp, rows, cols, m)
            last = kept[0]
            if (
                last is not None
                and all(x is y for x, y in zip(last[0], key[:4]))
                and last[0][4:] == key[4:]
            ):
                return last[1]  # type: ignore[no-any-return]
            mult, zp = requant_params(name, rows, cols, m, a_s, b_s, y_s, y_zp)
            result = (mult, no_bias, zp)
            if all(v is None or not v.flags.writeable for v in key[:4]):
                kept[0] = (key, result)
            return result

        return (engine.product(a, b, a_zp, b_zp, out, params),)

    return run


numba_kernel("MatMulInteger", since=10, applies=_matmul_integer_applies)(_build_matmul_integer)
numba_kernel("QLinearMatMul", since=10, applies=_qlinear_matmul_applies)(_build_qlinear_matmul)
