"""Gemm, MatMul and FusedGemm (ai.turnout): packed constant B, a compiled GEMV for few rows,
BLAS otherwise, and one compiled pass for alpha, C and the activation.

Where the time of a small-M product went (batch-1 dense layers, heads of small models), and
what is done about it:

- transB=1 (how PyTorch's Linear exports a Gemm): OpenBLAS's NT kernels are 1.5-3x slower
  than NN at M 8..64. A constant B (an initializer reaches the kernel as the same read-only
  array every run) is transposed once into (K, N) and kept; other B are used as they come.
  Except a large B that A's declared shape multiplies by one row (`KEEP_NT_BYTES`).
- one row of A (batch 1) and no activation: one compiled call computes alpha * A B + beta * C,
  the product as an axpy over rows of B that vectorizes, the bias fused; numpy paid a BLAS
  call plus a ufunc pass for C (~2-3 us, more than the product itself). It works in blocks
  of columns, which a session with threads shares out when B is large: a batch-1 classifier's
  weights are read from memory once a run (ShuffleNet's 544x1000 in-model: 236-241 us at
  1 thread, 129-145 at 2; onnxruntime 60-70).
- larger M: float32 on the register tile where the host has the AVX-512 one
  (`tile_matmul`: 1.1-2.2x OpenBLAS from 4 rows on a Zen 5), else BLAS, into a fresh
  array, then one compiled epilogue pass (`Epilogue`) for alpha, C
  and the activation, instead of numpy's pass per operation (Gelu's erf alone costs ten times
  the GEMM). An N-D A with contiguous rows is one 2-D GEMM, not one per leading index.
- C's broadcast form (a row or a full tensor) is resolved once per C array and shape, so a
  run does no np.broadcast_* calls.

MatMul with an N-D B (batched attention products) stays with np.matmul.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import prange, types

from turnout.graph.errors import InvalidArgument
from turnout.sdk.blas_threads import blas_matmul
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.activations import activation_of
from turnout.sdk.semantics.constants import constant_value, transposed

from ..codegen import numba_array
from ..registry import BuildContext, float_inputs_applies, numba_kernel
from .epilogue import Epilogue
from .pool_matmul import prepare_pool_matmul
from .tile_matmul import matmul, tile_matmul_available, tile_matmul_kernel

__all__: list[str] = []

SMALL_M = 1
"""Products with at most this many rows of A and no activation run in the compiled GEMV
(bias fused: one call instead of BLAS and an epilogue), others in BLAS. Measured per product
(K = N = 256, 1 thread): at 1 row the GEMV matches BLAS; at 2-4 rows BLAS is 1.2-1.7x faster."""


KEEP_NT_BYTES = 1 << 24
"""A constant transB weight of at least this many bytes, multiplied by a single row (A's rows
declared 1: batch-1 classifiers' dense layers), is used as given, not transposed into a copy:
the product is a GEMV that reads B once either way, here `_gemv_rows`'s dot products (1 thread,
CPU time: 1x9216 @ 9216x4096 9.1 ms, OpenBLAS 11.0 on B as given and 10.1 on the transposed
copy; 1x25088 @ 25088x4096 24.2, 30.5, 27.4), where the copy cost alexnet 0.1-0.8 s of session
creation and 233 MB. Below it the compiled GEMV over the copy wins."""

GEMV_ROWS = 64
"""Rows of B as given per block of `_gemv_rows` (shared out with threads)."""

GEMV_BLOCK = 256
"""Columns of y per block of the GEMV: with threads the blocks are shared out (a batch-1
classifier's 544x1000 weights, 2.2 MB read once per run: memory-bound, and a second core reads
its half in parallel); one thread takes them in turn."""


def _small_gemm(
    a: Any, b: Any, col: Any, alpha: float, beta: float, y: Any, step: int
) -> None:  # pragma: no cover
    """y = alpha * a @ b + beta * col (col broadcast over rows; read only when beta != 0), for
    few rows of a, by blocks of `step` columns: in each, four rows of b at a time, each an
    axpy into every y row (vectorizes without reassociating). Rows and blocks are slices of
    rows, so the inner loops stay contiguous."""
    m, kk = a.shape
    n = b.shape[1]
    for q in prange((n + step - 1) // step):
        j0 = q * step
        j1 = min(n, j0 + step)
        w = j1 - j0
        for i in range(m):
            yr = y[i][j0:j1]
            for j in range(w):
                yr[j] = 0
        k = 0
        while k + 4 <= kk:
            r0 = b[k][j0:j1]
            r1 = b[k + 1][j0:j1]
            r2 = b[k + 2][j0:j1]
            r3 = b[k + 3][j0:j1]
            for i in range(m):
                ar = a[i]
                v0 = ar[k]
                v1 = ar[k + 1]
                v2 = ar[k + 2]
                v3 = ar[k + 3]
                yr = y[i][j0:j1]
                for j in range(w):
                    yr[j] += v0 * r0[j] + v1 * r1[j] + v2 * r2[j] + v3 * r3[j]
            k += 4
        while k < kk:
            r0 = b[k][j0:j1]
            for i in range(m):
                v0 = a[i, k]
                yr = y[i][j0:j1]
                for j in range(w):
                    yr[j] += v0 * r0[j]
            k += 1
        if beta != 0.0:  # (col is read only then: without C it is a 1-element placeholder)
            cb = col[j0:j1]
            for i in range(m):
                yr = y[i][j0:j1]
                for j in range(w):
                    yr[j] = yr[j] * alpha + cb[j] * beta
        elif alpha != 1.0:
            for i in range(m):
                yr = y[i][j0:j1]
                for j in range(w):
                    yr[j] = yr[j] * alpha


def _gemv_rows(w: Any, a: Any, y: Any, step: int) -> None:  # pragma: no cover
    """y[0] = w @ a[0] for B as given, w (N, K) with K >= 1: four rows of w at a time, each a
    dot product with a[0] (summed in vector lanes, as BLAS's GEMV sums: compiled `reassoc`),
    in blocks of `step` rows that a session with threads shares out."""
    n, kk = w.shape
    x = a[0]
    out = y[0]
    for q in prange((n + step - 1) // step):
        j = q * step
        j1 = min(n, j + step)
        while j + 4 <= j1:
            r0 = w[j]
            r1 = w[j + 1]
            r2 = w[j + 2]
            r3 = w[j + 3]
            v = x[0]
            s0 = r0[0] * v
            s1 = r1[0] * v
            s2 = r2[0] * v
            s3 = r3[0] * v
            for i in range(1, kk):
                v = x[i]
                s0 += r0[i] * v
                s1 += r1[i] * v
                s2 += r2[i] * v
                s3 += r3[i] * v
            out[j] = s0
            out[j + 1] = s1
            out[j + 2] = s2
            out[j + 3] = s3
            j += 4
        while j < j1:
            r0 = w[j]
            s0 = r0[0] * x[0]
            for i in range(1, kk):
                s0 += r0[i] * x[i]
            out[j] = s0
            j += 1


def _applies(kn: KernelNode) -> str | None:
    why = float_inputs_applies(kn, 2, narrow=False)
    if why is None and kn.domain:
        try:
            activation_of(kn)
        except InvalidArgument as e:
            return str(e)
    return why


def present(kn: KernelNode, i: int) -> bool:
    """Whether optional input `i` is wired (an absent one is missing or named "")."""
    return len(kn.node.inputs) > i and bool(kn.node.inputs[i])


def _one_row(kn: KernelNode, trans_a: bool) -> bool:
    """Whether A's declared shape gives the product exactly one row."""
    info = kn.inputs[0]
    shape = None if info is None else info.shape
    if shape is None or len(shape) < 2 or any(not isinstance(d, int) for d in shape):
        return False
    return bool((shape[1] if trans_a else math.prod(shape[:-1])) == 1)


def _c_kind(kn: KernelNode) -> str:
    """C's form as known at session creation: `row` when it broadcasts along rows (a bias),
    `full` when it does not, empty when its shape is unknown (both epilogues are compiled)."""
    info = kn.inputs[2]
    shape = None if info is None else info.shape
    if shape is None or any(not isinstance(d, int) for d in shape):
        return ""
    return "row" if all(d == 1 for d in shape[:-1]) else "full"


class _Product:
    """y = act(alpha * A' B' + beta * C) for Gemm, MatMul and FusedGemm (see the module
    docstring); `__call__` is the kernel function."""

    def __init__(self, kn: KernelNode, ctx: BuildContext) -> None:
        self.name = kn.name
        self.op = kn.op_type
        dt = self.dt = np.dtype(kn.inputs[0].dtype)
        self.gemm = kn.op_type != "MatMul"
        act = activation_of(kn) if kn.domain else ("", 0.0, 0.0)
        self.alpha = float(kn.attr("alpha", 1.0)) if self.gemm else 1.0
        self.beta = float(kn.attr("beta", 1.0)) if self.gemm else 0.0
        self.trans_a = self.gemm and bool(kn.attr("transA", 0))
        self.trans_b = self.gemm and bool(kn.attr("transB", 0))
        self.with_c = self.gemm and present(kn, 2) and self.beta != 0.0
        kind = _c_kind(kn) if self.with_c else ""
        scale = self.alpha != 1.0
        par = ctx.parallel
        if par:
            prepare_pool_matmul(dt)  # compiled now: the first run's products need it
        self.plain = Epilogue(dt, act, par, scale=scale)
        self.no_act = act[0] in ("", "Identity")
        with_c = self.with_c
        self.by_col = (
            Epilogue(dt, act, par, scale=scale, col=True) if with_c and kind != "full" else None
        )
        self.by_full = (
            Epilogue(dt, act, par, scale=scale, full=True) if with_c and kind != "row" else None
        )
        mat = numba_array(dt, 2, readonly=True, layout="C")
        sig = types.void(
            mat, mat, numba_array(dt, 1, readonly=True, layout="C"), types.float64,
            types.float64, numba_array(dt, 2, readonly=False, layout="C"), types.int64,
        )  # fmt: skip
        self.small = ctx.jit(_small_gemm, [sig])  # parallel over column blocks when large
        self.zero_col = np.zeros(1, dt)
        # a compiled function's first call is slow (~ms): it belongs to session creation
        for variant in {self.small.serial, self.small.parallel}:
            variant(np.zeros((1, 1), dt), np.zeros((1, 1), dt), self.zero_col, 1.0, 0.0,
                    np.empty((1, 1), dt), GEMV_BLOCK)  # fmt: skip
        # float32 products of a few rows or more on the register tile (`tile_matmul`)
        self.tile = None
        if tile_matmul_available(dt):
            self.tile = tile_matmul_kernel(ctx)
            for variant in {self.tile.serial, self.tile.parallel}:  # first calls: now
                variant(np.zeros((4, 1), dt), np.zeros((1, 1), dt), np.empty((4, 1), dt), 1)
        self._b: tuple[Any, Any] | None = None  # (B as given, B as (K, N) C-contiguous)
        self.gemv = None  # `_gemv_rows`, for a B kept as given
        weight = constant_value(kn, 1)
        if isinstance(weight, np.ndarray) and weight.ndim == 2:  # the first run must not pack it
            if (
                self.trans_b
                and weight.nbytes >= KEEP_NT_BYTES
                and weight.flags.c_contiguous
                and weight.shape[1] > 0
                and _one_row(kn, self.trans_a)
            ):
                packed = weight.T  # read as given (`KEEP_NT_BYTES`)
                rows = numba_array(dt, 2, readonly=True, layout="C")
                out = numba_array(dt, 2, readonly=False, layout="C")
                gemv_sig = types.void(rows, rows, out, types.int64)
                self.gemv = ctx.jit(_gemv_rows, [gemv_sig], reassoc=True)
                x = np.zeros((1, weight.shape[1]), dt)
                for variant in {self.gemv.serial, self.gemv.parallel}:  # first calls: now
                    variant(weight[:1], x, np.empty((1, 1), dt), GEMV_ROWS)
            else:
                packed = transposed(weight) if self.trans_b else np.ascontiguousarray(weight)
                packed.flags.writeable = False
            self._b = (weight, packed)
        self._c: tuple[Any, tuple[int, int], Any] | None = None  # (C, (rows, cols), col/full)

    def _packed_b(self, b: Any) -> Any:
        """B as a C-contiguous (K, N) array; kept while the same read-only B comes in."""
        kept = self._b
        if kept is not None and kept[0] is b:
            return kept[1]
        packed = transposed(b) if self.trans_b else np.ascontiguousarray(b)
        if not b.flags.writeable:
            packed.flags.writeable = False
            self._b = (b, packed)
        return packed

    def _c_form(self, c: Any, out_shape: tuple[int, ...], rows: int, cols: int) -> Any:
        """C as a (cols,) row, or as a full (rows, cols) array; kept per read-only C."""
        kept = self._c
        if kept is not None and kept[0] is c and kept[1] == (rows, cols):
            return kept[2]
        if self.op == "Gemm" and c.ndim > 2:
            raise InvalidArgument(
                f"{self.name}: C of shape {c.shape} does not broadcast to {out_shape}"
            )
        c = c.astype(self.dt, copy=False)
        try:
            np.broadcast_to(c, out_shape)
        except ValueError:
            raise InvalidArgument(
                f"{self.name}: C of shape {c.shape} does not broadcast to {out_shape}"
            ) from None
        if all(d == 1 for d in c.shape[:-1]):  # a bias row (or a scalar)
            row = c.reshape(c.shape[-1:] if c.ndim else (1,))
            form = np.ascontiguousarray(np.broadcast_to(row, (cols,)))
        else:
            form = np.ascontiguousarray(np.broadcast_to(c, out_shape)).reshape(rows, cols)
        form.flags.writeable = False
        if not c.flags.writeable:
            self._c = (c, (rows, cols), form)
        return form

    def __call__(self, a: Any, b: Any, c: Any = None) -> tuple[Any]:
        dt = self.dt
        # (`is` first: the dtype of a native array is a singleton, and == costs ~100 ns)
        if (a.dtype is not dt or b.dtype is not dt) and (a.dtype != dt or b.dtype != dt):
            raise InvalidArgument(f"{self.name}: A {a.dtype} and B {b.dtype} must both be {dt}")
        kept = self._b
        if kept is not None and kept[0] is b and a.ndim == 2 and not self.trans_a:
            bp = kept[1]  # the usual case: a 2-D A and a constant B already packed
            rows, k = a.shape
            if k != bp.shape[0]:
                raise self._inner(a, b)
            a2 = np.ascontiguousarray(a)
            lead: tuple[int, ...] = (rows,)
        else:
            bp, a2 = self._operands(a, b)
            if bp is None:  # a batched MatMul
                return (a2,)
            rows, k = a2.shape
            lead = (a.shape[1],) if self.trans_a else a.shape[:-1]
        n = bp.shape[1]
        form = None
        if c is not None and self.with_c:
            form = self._c_form(c, (*lead, n), rows, n)
        if form is None:
            if self.plain.noop:
                y = self._matmul(a2, bp)
            elif rows <= SMALL_M and self.no_act and bp.flags.c_contiguous:
                y = np.empty((rows, n), dt)
                self.small(bp.size, a2, bp, self.zero_col, self.alpha, 0.0, y, GEMV_BLOCK)
            else:
                y = self._matmul(a2, bp)
                self.plain(y.reshape(1, rows, n), alpha=self.alpha)
        elif form.ndim == 1 and rows <= SMALL_M and self.no_act and bp.flags.c_contiguous:
            y = np.empty((rows, n), dt)
            self.small(bp.size, a2, bp, form, self.alpha, self.beta, y, GEMV_BLOCK)
        else:
            y = self._matmul(a2, bp)
            self._epilogue(y.reshape(1, rows, n), form, c)
        return (y if len(lead) == 1 else y.reshape((*lead, n)),)

    def _matmul(self, a2: Any, bp: Any) -> Any:
        """a2 @ bp into a fresh array: `_gemv_rows` for one row and a B kept as given."""
        if self.gemv is not None and a2.shape[0] == 1 and not bp.flags.c_contiguous:
            y = np.empty((1, bp.shape[1]), self.dt)
            self.gemv(bp.size, bp.T, a2, y, GEMV_ROWS)
            return y
        return matmul(self.tile, a2, bp)

    def _inner(self, a: Any, b: Any) -> InvalidArgument:
        trans = f" (transA={int(self.trans_a)}, transB={int(self.trans_b)})" if self.gemm else ""
        return InvalidArgument(
            f"{self.name}: inner dimensions of {a.shape} and {b.shape} differ{trans}"
        )

    def _operands(self, a: Any, b: Any) -> tuple[Any, Any]:
        """(packed B, A as 2-D rows) after the shape checks; (None, product) for a MatMul
        with an N-D B, which numpy's matmul loop computes."""
        name = self.name
        if self.gemm:
            if b.ndim != 2 or a.ndim < 2 or ((self.op == "Gemm" or self.trans_a) and a.ndim != 2):
                raise InvalidArgument(
                    f"{name}: {self.op} needs 2-D B and 2-D A, got {a.shape} and {b.shape}"
                )
        elif a.ndim == 0 or b.ndim == 0:
            raise InvalidArgument(f"{name}: MatMul inputs must have rank >= 1")
        elif b.ndim != 2:
            try:
                return None, np.asarray(blas_matmul(a, b))
            except ValueError as e:
                raise InvalidArgument(
                    f"{name}: cannot multiply shapes {a.shape} and {b.shape}: {e}"
                ) from None
        bp = self._packed_b(b)
        aa = a.T if self.trans_a else a
        if aa.shape[-1] != bp.shape[0]:
            raise self._inner(a, b)
        return bp, np.ascontiguousarray(aa).reshape(math.prod(aa.shape[:-1]), bp.shape[0])

    def _epilogue(self, y3: Any, form: Any, c: Any) -> None:
        """alpha, C (a row or a full array) and the activation, in one compiled pass."""
        if form.ndim == 1 and self.by_col is not None:
            self.by_col(y3, col=form, alpha=self.alpha, beta=self.beta)
        elif self.by_full is not None:
            full = np.ascontiguousarray(np.broadcast_to(form, y3.shape[1:])).reshape(y3.shape)
            self.by_full(y3, full=full, alpha=self.alpha, beta=self.beta)
        else:  # C's declared shape said a row
            raise InvalidArgument(f"{self.name}: C of shape {c.shape} is not the declared row")


def _build(kn: KernelNode, ctx: BuildContext) -> KernelFn:
    return _Product(kn, ctx)


numba_kernel("Gemm", since=7, applies=_applies)(_build)
numba_kernel("MatMul", since=1, applies=_applies)(_build)
numba_kernel("FusedGemm", since=1, domain="ai.turnout", applies=_applies)(_build)
