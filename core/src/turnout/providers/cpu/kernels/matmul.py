"""Matrix-product kernels: Gemm, MatMul, MatMulInteger, QLinearMatMul, Einsum, Det.

Everything funnels into BLAS through numpy. Types BLAS lacks are widened first: float16 and
bfloat16 compute in float32 and round once at the end. 8-bit integer products are exact: float32
products over runs of the inner dimension short enough that no partial sum can pass 2**24
(`semantics.quant.exact_runs`: 258 rows of two 8-bit operands less their zero points, 514 when
one has no zero point), summed in float64 when there are several (exact below 2**53). float32
halves what a float64 product reads, and a large weight is converted a run at a time (a
1024x8210 int8 weight: 8 MB converted at once, where a float64 copy of it was 67 MB).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from turnout.graph.errors import InvalidArgument
from turnout.providers.cpu.kernels.cast import convert
from turnout.providers.cpu.registry import cpu_kernel
from turnout.sdk.blas_threads import blas_matmul
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.linalg import check_square, einsum_equation
from turnout.sdk.semantics.quant import code_magnitude, exact_runs

__all__ = ["integer_product"]


def _widen(dt: np.dtype[Any]) -> np.dtype[Any]:
    """The dtype a product is computed in for inputs of type `dt`."""
    if dt == np.float16 or dt.kind == "V":
        return np.dtype(np.float32)
    return dt


_WIDE: dict[np.dtype[Any], np.dtype[Any]] = {}


def _widened(dt: np.dtype[Any]) -> np.dtype[Any]:
    """`_widen`, looked up (its dtype comparisons cost ~0.3 us a call)."""
    w = _WIDE.get(dt)
    if w is None:
        w = _WIDE[dt] = _widen(dt)
    return w


def _matmul(name: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """np.matmul with ONNX/numpy semantics, shape errors as InvalidArgument."""
    try:
        return blas_matmul(a, b)
    except ValueError as e:
        raise InvalidArgument(
            f"{name}: cannot multiply shapes {a.shape} and {b.shape}: {e}"
        ) from None


@cpu_kernel("MatMul", since=1)
def matmul(node: KernelNode) -> KernelFn:
    name = node.name

    def run(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray]:
        dt = a.dtype
        if b.dtype != dt:
            raise InvalidArgument(f"{name}: input types differ ({dt} and {b.dtype})")
        if a.ndim == 0 or b.ndim == 0:
            raise InvalidArgument(f"{name}: MatMul inputs must have rank >= 1")
        w = _widened(dt)
        if w != dt:
            return (np.asarray(_matmul(name, a.astype(w), b.astype(w))).astype(dt),)
        return (np.asarray(_matmul(name, a, b)),)

    return run


def _scale_int(y: np.ndarray, factor: float) -> np.ndarray:
    """Integer `y` times a float attribute (alpha/beta), back in `y`'s type."""
    if factor == 1.0:
        return y
    if float(factor).is_integer():
        return y * y.dtype.type(int(factor))
    return (y.astype(np.float64) * factor).astype(y.dtype)


@cpu_kernel("Gemm", since=1)
def gemm(node: KernelNode) -> KernelFn:
    alpha = float(node.attr("alpha", 1.0))
    beta = float(node.attr("beta", 1.0))
    trans_a = bool(node.attr("transA", 0))
    trans_b = bool(node.attr("transB", 0))
    # before opset 7, C only broadcasts when the `broadcast` attribute says so
    exact_c = node.since_version < 7 and not node.attr("broadcast", 0)
    name = node.name

    def run(a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None) -> tuple[np.ndarray]:
        if a.ndim != 2 or b.ndim != 2:
            raise InvalidArgument(f"{name}: Gemm needs 2-D A and B, got {a.shape} and {b.shape}")
        dt = a.dtype
        w = _widened(dt)
        aa = a.T if trans_a else a
        bb = b.T if trans_b else b
        if aa.shape[1] != bb.shape[0]:
            raise InvalidArgument(
                f"{name}: inner dimensions differ: A is {a.shape} (transA={int(trans_a)}), "
                f"B is {b.shape} (transB={int(trans_b)})"
            )
        y = blas_matmul(aa.astype(w, copy=False), bb.astype(w, copy=False))
        is_float = w.kind == "f"
        if is_float:
            if alpha != 1.0:
                y *= w.type(alpha)
        else:
            y = _scale_int(y, alpha)
        if c is not None and beta != 0.0:
            out_shape = y.shape
            if exact_c:
                fits = c.shape == out_shape
            else:
                fits = c.ndim <= 2 and all(
                    s in (1, o) for s, o in zip(c.shape[::-1], out_shape[::-1])
                )
            if not fits:
                raise InvalidArgument(
                    f"{name}: C of shape {c.shape} does not broadcast to {out_shape}"
                )
            cc = c.astype(w, copy=False)
            if is_float:
                y += cc * w.type(beta) if beta != 1.0 else cc
            else:
                y = y + _scale_int(cc, beta)
        return (y.astype(dt, copy=False),)

    return run


def _row_param(p: np.ndarray | None, a: np.ndarray) -> np.ndarray | None:
    """A per-row (1-D, length M) zero point or scale of `a` as an (M, 1) column."""
    if p is None:
        return None
    p = np.asarray(p)
    if p.ndim == 1 and p.size > 1 and a.ndim >= 2:
        return p.reshape(-1, 1)
    return p


def _sub_zero(
    name: str, x: np.ndarray, zp: np.ndarray | None, what: str, dt: Any = np.float64
) -> np.ndarray:
    """`x - zp` in `dt` (exact for the 8-bit types), with a readable broadcast error; one
    pass that casts as it subtracts (no copy in `dt` to subtract from)."""
    if zp is None:
        return x.astype(dt)
    try:
        return np.subtract(x, np.asarray(zp), dtype=dt)
    except ValueError:
        raise InvalidArgument(
            f"{name}: {what} zero point of shape {np.shape(zp)} does not fit input {x.shape}"
        ) from None


def integer_product(
    name: str, a: np.ndarray, a_zero_point: Any, b: np.ndarray, b_zero_point: Any
) -> np.ndarray:
    """(a - a_zero_point) @ (b - b_zero_point) of 8-bit integers, exact (the int32
    accumulator's value): float32 when one run of the inner dimension holds it, else float64
    (see the module docstring). A 1-D zero point of `a` is per row, of `b` per column."""
    a_zp = _row_param(a_zero_point, a)
    if a.dtype.itemsize != 1 or b.dtype.itemsize != 1 or a.ndim == 0 or b.ndim == 0:
        aa = _sub_zero(name, a, a_zp, "A")
        return _matmul(name, aa, _sub_zero(name, b, b_zero_point, "B"))
    runs = exact_runs(a.shape[-1], code_magnitude(a, a_zp) * code_magnitude(b, b_zero_point))
    aa = _sub_zero(name, a, a_zp, "A", np.float32)
    if len(runs) == 1:
        return _matmul(name, aa, _sub_zero(name, b, b_zero_point, "B", np.float32))
    if b.shape[-2 if b.ndim > 1 else 0] != a.shape[-1]:  # runs of B would hide a mismatch
        raise InvalidArgument(f"{name}: cannot multiply shapes {a.shape} and {b.shape}")
    acc: np.ndarray | None = None
    for run in runs:  # B's zero point is per column: the same for every run of its rows
        rows = _sub_zero(
            name, b[..., run, :] if b.ndim > 1 else b[run], b_zero_point, "B", np.float32
        )
        part = _matmul(name, aa[..., run], rows)
        acc = part.astype(np.float64) if acc is None else np.add(acc, part, out=acc)
    assert acc is not None
    return acc


@cpu_kernel("MatMulInteger", since=10)
def matmul_integer(node: KernelNode) -> KernelFn:
    name = node.name

    def run(
        a: np.ndarray,
        b: np.ndarray,
        a_zero_point: np.ndarray | None = None,
        b_zero_point: np.ndarray | None = None,
    ) -> tuple[np.ndarray]:
        return (integer_product(name, a, a_zero_point, b, b_zero_point).astype(np.int32),)

    return run


@cpu_kernel("QLinearMatMul", since=10)
def qlinear_matmul(node: KernelNode) -> KernelFn:
    name = node.name

    def run(
        a: np.ndarray,
        a_scale: np.ndarray,
        a_zero_point: np.ndarray | None,
        b: np.ndarray,
        b_scale: np.ndarray,
        b_zero_point: np.ndarray | None,
        y_scale: np.ndarray,
        y_zero_point: np.ndarray | None,
    ) -> tuple[np.ndarray]:
        acc = integer_product(name, a, a_zero_point, b, b_zero_point)
        sdt = _widen(np.asarray(a_scale).dtype)
        a_s = _row_param(np.asarray(a_scale).astype(sdt), a)
        mult = a_s * np.asarray(b_scale).astype(sdt) / np.asarray(y_scale).astype(sdt)
        y = acc * mult
        out_dt = y_zero_point.dtype if y_zero_point is not None else a.dtype
        if y_zero_point is not None:
            y = y + np.asarray(y_zero_point).astype(np.float64)
        if out_dt.kind in "iu":
            info = np.iinfo(out_dt)
            return (np.clip(np.rint(y), info.min, info.max).astype(out_dt),)
        return (convert(y.astype(np.float32), out_dt, True),)

    return run


@cpu_kernel("Einsum", since=12)
def einsum(node: KernelNode) -> KernelFn:
    equation = einsum_equation(node)
    name = node.name

    def run(*xs: np.ndarray) -> tuple[np.ndarray]:
        dt = xs[0].dtype
        w = _widen(dt)
        args = [x.astype(w, copy=False) for x in xs]
        try:
            y = np.einsum(equation, *args, optimize=len(args) > 1)
        except ValueError as e:
            raise InvalidArgument(f"{name}: einsum {equation!r} failed: {e}") from None
        return (np.asarray(y).astype(dt, copy=False),)

    return run


@cpu_kernel("Det", since=11)
def det(node: KernelNode) -> KernelFn:
    def run(x: np.ndarray) -> tuple[np.ndarray]:
        check_square(node, x.shape)
        dt = x.dtype
        w = _widen(dt)
        return (np.asarray(np.linalg.det(x.astype(w, copy=False))).astype(dt, copy=False),)

    return run
