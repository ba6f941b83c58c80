"""numpy's own BLAS GEMM, callable from inside numba kernels.

numba has no GEMM of its own (its `np.dot` needs SciPy, which turnout does not install), and a
product split between Python threads pays a thread wake-up and GIL hand-offs per block: about
60 us on the 2-core VM, as much as a 300 us product saves on a second core. Called from a
`prange` loop, the blocks run on numba's worker threads, which the kernels before and after
have just woken (`pool_matmul`).

`find_gemm` looks up `cblas_sgemm`/`cblas_dgemm` in the BLAS library numpy loaded (found by
threadpoolctl: OpenBLAS builds with or without the `scipy_` prefix and the 64-bit-integer
suffix); `gemm_call` is the numba intrinsic that calls one through its address, so a cached
kernel never holds a process's address.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
from llvmlite import ir
from numba import types
from numba.core.extending import intrinsic

__all__ = ["Gemm", "find_gemm", "gemm_call", "gemm_operand"]

_ROW_MAJOR, _NO_TRANS = 101, 111  # CBLAS_ORDER.CblasRowMajor, CBLAS_TRANSPOSE.CblasNoTrans


@dataclass(frozen=True)
class Gemm:
    """The address of one dtype's `cblas_?gemm` and whether its integers are 64-bit."""

    address: int
    ilp64: bool


@functools.cache
def find_gemm(dtype: np.dtype[Any] | str) -> Gemm | None:
    """numpy's BLAS `cblas_sgemm` (float32) or `cblas_dgemm` (float64); None when
    threadpoolctl is missing, the library is not OpenBLAS, or its integer width cannot be told
    (products then stay with `np.matmul`). Names with a `64_`/`_64` suffix take 64-bit
    integers; plain names are used only where `openblas_get_config` does not say USE64BITINT
    (a call with the wrong width would read garbage sizes). Cached per argument: kernels pass
    the dtype itself, whose `.name` costs microseconds per call."""
    letter = {"float32": "s", "float64": "d"}.get(np.dtype(dtype).name)
    if letter is None:
        return None
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        return None
    for lib in ThreadpoolController().select(internal_api="openblas").lib_controllers:
        try:
            dll = ctypes.CDLL(lib.filepath)
        except OSError:
            continue
        for prefix in ("scipy_", ""):
            for suffix in ("64_", "_64", ""):
                fn = getattr(dll, f"{prefix}cblas_{letter}gemm{suffix}", None)
                if fn is None:
                    continue
                ilp64 = bool(suffix)
                if not ilp64 and _config_says_ilp64(dll, prefix):
                    continue
                address = ctypes.cast(fn, ctypes.c_void_p).value
                if address:
                    return Gemm(int(address), ilp64)
    return None


def _config_says_ilp64(dll: Any, prefix: str) -> bool:
    """Whether OpenBLAS's build configuration says 64-bit integers (True when unreadable)."""
    get = getattr(dll, f"{prefix}openblas_get_config", None)
    if get is None:
        return True
    get.restype = ctypes.c_char_p
    get.argtypes = []
    config = get() or b""
    return b"USE64BITINT" in config


@intrinsic
def gemm_call(
    typingctx: Any,
    address: Any,
    ilp64: Any,
    m: Any,
    n: Any,
    k: Any,
    a: Any,
    lda: Any,
    b: Any,
    ldb: Any,
    c: Any,
    ldc: Any,
    beta: Any,
) -> Any:
    """`c[:m, :n] = a[:m, :k] @ b[:k, :n] + beta * c[:m, :n]`, row-major with leading
    dimensions lda/ldb/ldc (in elements; each array's last axis contiguous), through the
    `cblas_?gemm` at `address` (beta 0: c is only written)."""
    if (
        not all(isinstance(x, types.Array) for x in (a, b, c))
        or len({a.dtype, b.dtype, c.dtype}) != 1
        or not isinstance(beta, types.Float)
    ):
        return None
    i64 = types.int64
    sig = types.void(i64, types.boolean, i64, i64, i64, a, i64, b, i64, c, i64, beta)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        fa, wide, m_, n_, k_, a_, lda_, b_, ldb_, c_, ldc_, beta_ = args
        real = context.get_value_type(a.dtype)
        ptr = real.as_pointer()
        i32 = ir.IntType(32)
        one = ir.Constant(real, 1.0)
        scale = context.cast(builder, beta_, beta, a.dtype)
        order, trans = ir.Constant(i32, _ROW_MAJOR), ir.Constant(i32, _NO_TRANS)
        data = [
            builder.bitcast(context.make_array(t)(context, builder, v).data, ptr)
            for t, v in ((a, a_), (b, b_), (c, c_))
        ]
        with builder.if_else(wide) as (then, otherwise):
            for width, block in ((64, then), (32, otherwise)):
                with block:
                    it = ir.IntType(width)
                    m, n, k, lda, ldb, ldc = (
                        v if width == 64 else builder.trunc(v, it)
                        for v in (m_, n_, k_, lda_, ldb_, ldc_)
                    )
                    params = [i32, i32, i32, it, it, it, real, ptr, it, ptr, it, real, ptr, it]
                    fnty = ir.FunctionType(ir.VoidType(), params)
                    fn = builder.inttoptr(fa, fnty.as_pointer())
                    a_p, b_p, c_p = data
                    args = [order, trans, trans, m, n, k, one, a_p, lda, b_p, ldb, scale, c_p, ldc]
                    builder.call(fn, args)
        return context.get_dummy_value()

    return sig, codegen


def gemm_operand(x: Any) -> bool:
    """Whether a 2-D array can be a GEMM operand as it is: rows contiguous, each starting a
    whole number of elements after the last, at least a row apart (a leading dimension)."""
    s0, s1 = x.strides
    size = x.itemsize
    return bool(s1 == size and s0 % size == 0 and s0 >= x.shape[1] * size)
