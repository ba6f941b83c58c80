"""A register-blocked float32 GEMM for thin convolution products, in LLVM vector IR.

OpenBLAS reaches about 30 GMAC/s on the products of an im2col convolution with few output
channels and a short inner dimension (M = 32 output channels, K = 144 = 16 channels x 3x3, N a
band of output pixels): its kernels are tuned for large square products, and it pays a
per-call setup (buffer packing, dispatch) that such a product never earns back. Here one tile
of `ROWS` rows of A (the weights) times `VECS` vectors of `LANES` columns of B (the band's
im2col panel) keeps its `ROWS * VECS` accumulators in registers across the whole K loop: each
step loads `VECS` vectors of one row of B, broadcasts one weight per row, and issues
`ROWS * VECS` fused multiply-adds (`llvm.fma`). B is read where the gather wrote it (row
stride `ldb`), with no packing.

Edges: the rows of A past M (the last row block) read row M-1 again and are not stored, so
every M runs on one tile; the columns past N (the last column block) run on a tile of as many
vectors as they need, the last one (half as wide where that is enough: `HALF_TAIL`) stored
under a lane mask (`llvm.masked.*`).

numba has no vector types, so the tile is an `intrinsic`; the driver over the tiles is the
array method `turnout_sgemm` (an overload: generated kernel sources call it without an
import, and numba's on-disk cache keeps it with the caller, under the host CPU's name and
features). `turnout_sgemm_rows` is the same product with B's rows anywhere in one array (an
offset per row): a stride-1 conv's taps, read from its padded image as the block is packed,
without an im2col panel (`conv_shift`). It exists only where the host has the vector
instructions and numba compiles for the host (`AVAILABLE`): AVX-512 (16 lanes) or AVX2 with
FMA (8 lanes). Elsewhere the convs keep numpy's BLAS (`cblas.gemm_call`).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, overload_method, register_jitable

from ..cache import file_digest

__all__ = ["AVAILABLE", "BLOCK", "HALF_TAIL", "LANES", "ROWS", "TAG", "VECS", "tile_macs"]

# (numba's IR helpers are untyped)
_insert_function: Any = cgutils.get_or_insert_function
_alloca_once_value: Any = cgutils.alloca_once_value


def _lanes() -> int:
    """float32 lanes of the host's widest vector FMA (0: none, or numba compiles for another
    CPU than this one, or the query failed)."""
    if os.environ.get("NUMBA_CPU_NAME", "host") != "host" or os.environ.get("NUMBA_CPU_FEATURES"):
        return 0
    try:
        import llvmlite.binding as ll

        features = ll.get_host_cpu_features()
    except Exception:  # pragma: no cover - a platform without the query
        return 0
    lanes = 16 if features.get("avx512f") else 0
    if not lanes and features.get("avx2") and features.get("fma"):
        lanes = 8
    asked = os.environ.get("TURNOUT_SGEMM_LANES")
    if asked in ("0", "8") and int(asked) < lanes:
        lanes = int(asked)
    return lanes


LANES = _lanes()
"""float32 lanes per vector: 16 with AVX-512, 8 with AVX2 and FMA, 0 where the tile is not
built. `TURNOUT_SGEMM_LANES` may lower it (8: the AVX2 tile on an AVX-512 host, as tests run
it; 0: BLAS everywhere), never raise it."""

AVAILABLE = LANES > 0

ROWS = 8 if LANES == 16 else 6
"""Rows of A per tile (output channels). Swept on the 2-core Xeon (AVX-512, 1 thread, the
zoo's conv products): 8x3 vectors ran 5-15% faster than 6x4, 4x4 or 8x2 on most shapes
(M=32 K=144 N=1024: 81 GMAC/s against 78, 79 and 75). The AVX2 tile (16 registers) is 6x2,
the layout of the usual Haswell SGEMM kernels."""

VECS = 3 if LANES == 16 else 2
"""Vectors of B per tile row: ROWS x VECS accumulators, plus VECS loaded vectors of B and a
broadcast weight, within the 32 (AVX-512) or 16 (AVX2) vector registers."""

HALF_TAIL = os.environ.get("TURNOUT_SGEMM_HALF_TAIL", "1") != "0"
"""The columns left after the last whole vector, when they fill at most half a vector, run
on a vector half as wide. On AMD's AVX-512 cores (the 2-core EPYC, Zen 4) a 16-lane FMA takes
both 8-lane FMA pipes, so an 8-lane tail costs half (on a Xeon's 512-bit pipes, the same):
7x7 outputs (49 columns, 3 vectors + 1) 1.08-1.11x as fast (M=512 K=2304: 48 against 44
GMAC/s), 196 columns 1.03x, 100 columns 1.06x; DenseNet's 1x1 convs at 7x7 went from 0.79 to
0.86 of onnxruntime's speed. `TURNOUT_SGEMM_HALF_TAIL=0` keeps whole vectors (to compare)."""

TAG = f"sgemm tile {file_digest(__file__)}: {LANES} lanes, {ROWS}x{VECS}, half tail {HALF_TAIL}"
"""Written into the generated sources that call the tile, so that a cached kernel compiled
with one tile (this file's text, its width and shape) is never loaded for another: numba's
cache checks only the caller's own source, and the cache key only this package's version."""


def _vector_helpers(builder: Any, lanes: int = LANES) -> Any:
    """The IR types and intrinsics the pack and the tile use, for vectors of `lanes`."""
    f32, l64, i32 = ir.FloatType(), ir.IntType(64), ir.IntType(32)
    vty = ir.VectorType(f32, lanes)
    vptr = vty.as_pointer()
    mty = ir.VectorType(ir.IntType(1), lanes)
    suffix = f"v{lanes}f32.p0v{lanes}f32"
    fma = _insert_function(
        builder.module, ir.FunctionType(vty, [vty, vty, vty]), f"llvm.fma.v{lanes}f32"
    )
    mload = _insert_function(
        builder.module, ir.FunctionType(vty, [vptr, i32, mty, vty]), f"llvm.masked.load.{suffix}"
    )
    mstore = _insert_function(
        builder.module,
        ir.FunctionType(ir.VoidType(), [vty, vptr, i32, mty]),
        f"llvm.masked.store.{suffix}",
    )
    return f32, l64, i32, vty, vptr, fma, mload, mstore


def _masks(builder: Any, cols: Any, vecs: int, lanes: int = LANES) -> list[Any]:
    """Per vector j < vecs (of `lanes`, from column j * LANES), the lanes i with
    j * LANES + i < cols."""
    l64, i32 = ir.IntType(64), ir.IntType(32)
    wide = ir.VectorType(l64, lanes)
    splat = builder.insert_element(ir.Constant(wide, ir.Undefined), cols, ir.Constant(i32, 0))
    splat = builder.shuffle_vector(
        splat, ir.Constant(wide, ir.Undefined), ir.Constant(ir.VectorType(i32, lanes), [0] * lanes)
    )
    return [
        builder.icmp_signed("<", ir.Constant(wide, [j * LANES + i for i in range(lanes)]), splat)
        for j in range(vecs)
    ]


def _data(context: Any, builder: Any, ty: Any, arr: Any, off: Any) -> Any:
    """A float pointer to element `off` of array `arr` (numba type `ty`)."""
    ptr = context.make_array(ty)(context, builder, arr).data
    return builder.gep(builder.bitcast(ptr, ir.FloatType().as_pointer()), [off])


def _aligned(builder: Any, ptr: Any) -> Any:
    """`ptr` rounded up to a 64-byte boundary (the packed panel's buffer has room for it)."""
    l64 = ir.IntType(64)
    at = builder.and_(builder.add(builder.ptrtoint(ptr, l64), ir.Constant(l64, 63)),
                      ir.Constant(l64, -64))  # fmt: skip
    return builder.inttoptr(at, ptr.type)


BLOCK = VECS * LANES
"""Columns of B per packed block (and per full tile)."""


def _pack_codegen(
    context: Any, builder: Any, bp: Any, row: Any, buf: Any, k: Any, cols: Any
) -> None:
    """K rows of `cols` (at most BLOCK) columns of B, row q at float pointer `row(q)` from
    `bp`, into the 64-byte aligned `buf`, BLOCK floats a row, the columns past `cols` zero."""
    _, l64, i32, vty, vptr, _, mload, _ = _vector_helpers(builder)
    dp = _aligned(builder, buf)
    full = builder.icmp_signed("==", cols, l64(BLOCK))
    masks = _masks(builder, cols, VECS)
    zero = ir.Constant(vty, [0.0] * LANES)
    with builder.if_else(full, likely=True) as (then, otherwise):
        for whole, block in ((True, then), (False, otherwise)):
            with block, cgutils.for_range(builder, k) as loop:
                q = loop.index
                src = builder.gep(bp, [row(q)])
                dst = builder.gep(dp, [builder.mul(q, l64(BLOCK))])
                for j in range(VECS):
                    sp = builder.bitcast(builder.gep(src, [l64(j * LANES)]), vptr)
                    if whole:
                        v = builder.load(sp, align=4)
                    else:
                        v = builder.call(mload, [sp, i32(4), masks[j], zero])
                    dq = builder.bitcast(builder.gep(dst, [l64(j * LANES)]), vptr)
                    builder.store(v, dq, align=64)


def _pack_typing(typingctx: Any, b: Any, b_off: Any, ldb: Any, buf: Any, k: Any, cols: Any) -> Any:
    """K rows of `cols` (at most BLOCK) columns of B (row stride ldb, from element b_off)
    into the 64-byte aligned start of `buf`, BLOCK floats a row, the columns past `cols`
    zero: the tiles then read each row of the block from one or two cache lines, where B's
    own rows, a whole band apart (4 KB at 1024 pixels), fall into the same few L1 sets."""
    i64 = types.int64
    sig = types.void(b, i64, i64, buf, i64, i64)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        b_arr, b_off, ldb, buf_arr, k, cols = args
        bp = _data(context, builder, signature.args[0], b_arr, b_off)
        dp = _data(context, builder, signature.args[3], buf_arr, ir.IntType(64)(0))
        _pack_codegen(context, builder, bp, lambda q: builder.mul(q, ldb), dp, k, cols)
        return context.get_dummy_value()

    return sig, codegen


def _pack_rows_typing(
    typingctx: Any, b: Any, b_off: Any, rows: Any, buf: Any, k: Any, cols: Any
) -> Any:
    """`_pack` with B's row q starting at element b_off + rows[q] of `b` (any C-contiguous
    array, read flat): a stride-1 conv's taps read from one padded image, each row a channel
    shifted by its tap (`conv_shift`), gathered here instead of into an im2col panel."""
    i64 = types.int64
    sig = types.void(b, i64, rows, buf, i64, i64)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        b_arr, b_off, rows_arr, buf_arr, k, cols = args
        l64 = ir.IntType(64)
        bp = _data(context, builder, signature.args[0], b_arr, b_off)
        rty = signature.args[2]
        rp = builder.bitcast(context.make_array(rty)(context, builder, rows_arr).data,
                             l64.as_pointer())  # fmt: skip
        dp = _data(context, builder, signature.args[3], buf_arr, l64(0))

        def row(q: Any) -> Any:
            return builder.load(builder.gep(rp, [q]), align=8)

        _pack_codegen(context, builder, bp, row, dp, k, cols)
        return context.get_dummy_value()

    return sig, codegen


_pack: Any = intrinsic(_pack_typing)
_pack_rows: Any = intrinsic(_pack_rows_typing)


def _make_tile(vecs: int, masked: bool, half: bool = False) -> Any:
    """The intrinsic computing `rows` (1..ROWS) rows of A (row stride lda, from element
    a_off) times `vecs` vectors of a packed block of B (`_pack`'s buffer) over K into C (row
    stride ldc, from c_off); `masked`: only the first `cols` columns are stored (the rest of
    the last vector is past N); `half`: the last vector is half as wide (`HALF_TAIL`)."""
    widths = [LANES] * (vecs - 1) + [LANES // 2 if half else LANES]

    @intrinsic
    def tile(typingctx: Any, a: Any, a_off: Any, lda: Any, buf: Any, c: Any, c_off: Any,
             ldc: Any, k: Any, rows: Any, cols: Any) -> Any:  # fmt: skip
        i64 = types.int64
        sig = types.void(a, i64, i64, buf, c, i64, i64, i64, i64, i64)

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            a_arr, a_off, lda, buf_arr, c_arr, c_off, ldc, k, rows, cols = args
            aty, bty, cty = signature.args[0], signature.args[3], signature.args[4]
            _, l64, i32, *_ = _vector_helpers(builder)
            # per vector j: (type, pointer type, fma, masked store)
            kinds = {w: _vector_helpers(builder, w) for w in set(widths)}
            vts = [(kinds[w][3], kinds[w][4], kinds[w][5], kinds[w][7]) for w in widths]
            ap = _data(context, builder, aty, a_arr, a_off)
            bp = _aligned(builder, _data(context, builder, bty, buf_arr, l64(0)))
            cp = _data(context, builder, cty, c_arr, c_off)
            # rows past `rows` read the last real row again (and are never stored)
            arows = []
            for r in range(ROWS):
                live = builder.icmp_signed("<", l64(r), rows)
                at = builder.select(live, l64(r), builder.sub(rows, l64(1)))
                arows.append(builder.gep(ap, [builder.mul(at, lda)]))
            zeros = {w: ir.Constant(ir.VectorType(ir.FloatType(), w), [0.0] * w) for w in kinds}
            undef = ir.Constant(ir.VectorType(ir.FloatType(), LANES), ir.Undefined)
            splats = {w: ir.Constant(ir.VectorType(i32, w), [0] * w) for w in kinds}
            accs = [[_alloca_once_value(builder, zeros[w]) for w in widths]
                    for _ in range(ROWS)]  # fmt: skip
            with cgutils.for_range(builder, k) as loop:
                q = loop.index
                brow = builder.gep(bp, [builder.mul(q, l64(BLOCK))])
                bv = [
                    builder.load(
                        builder.bitcast(builder.gep(brow, [l64(j * LANES)]), vts[j][1]), align=32
                    )
                    for j in range(vecs)
                ]
                for r in range(ROWS):
                    av = builder.load(builder.gep(arows[r], [q]), align=4)
                    av = builder.insert_element(undef, av, i32(0))
                    avs = {w: builder.shuffle_vector(av, undef, splats[w]) for w in kinds}
                    for j in range(vecs):
                        slot = accs[r][j]
                        val = builder.call(vts[j][2], [avs[widths[j]], bv[j], builder.load(slot)])
                        builder.store(val, slot)
            last = _masks(builder, cols, vecs, widths[-1])[-1] if masked else None
            for r in range(ROWS):
                with builder.if_then(builder.icmp_signed("<", l64(r), rows), likely=True):
                    crow = builder.gep(cp, [builder.mul(l64(r), ldc)])
                    for j in range(vecs):
                        ptr = builder.bitcast(builder.gep(crow, [l64(j * LANES)]), vts[j][1])
                        val = builder.load(accs[r][j])
                        if last is not None and j == vecs - 1:
                            builder.call(vts[j][3], [val, ptr, i32(4), last])
                        else:
                            builder.store(val, ptr, align=4)
            return context.get_dummy_value()

        return sig, codegen

    return tile


def tile_macs(m: int, n: int, k: int) -> int:
    """The multiply-adds the tiles issue for an (m, n, k) product, padding included (rows to
    a multiple of ROWS, columns to a multiple of LANES): what a shape rule weighs against the
    product's own m * n * k."""
    if not AVAILABLE:
        return m * n * k
    return -(-m // ROWS) * ROWS * -(-n // LANES) * LANES * k


def _register() -> None:
    full = _make_tile(VECS, False)
    # the columns left after the full blocks: 1..VECS vectors, the last one stored masked
    if VECS > 4:  # pragma: no cover - the widths chosen above
        raise AssertionError("edge tiles are written for at most 4 vectors")
    edges = [_make_tile(v, True) for v in range(1, VECS + 1)]
    e1, e2, e3, e4 = edges + edges[-1:] * (4 - VECS)
    # the same with the last vector half as wide, where the columns left fill at most half
    halves = [_make_tile(v, True, True) for v in range(1, VECS + 1)]
    h1, h2, h3, h4 = halves + halves[-1:] * (4 - VECS)
    rows_, lanes, block, half = ROWS, LANES, BLOCK, (LANES // 2 if HALF_TAIL else 0)

    @register_jitable
    def row_tiles(
        a: Any, lda: Any, buf: Any, c: Any, ldc: Any, j0: Any, m: Any, k: Any, cols: Any
    ) -> None:
        # every row tile of A times the packed block of B at column j0 of C
        v = (cols + lanes - 1) // lanes
        narrow = cols - (v - 1) * lanes <= half
        for i0 in range(0, m, rows_):
            r = min(rows_, m - i0)
            ao = i0 * lda
            co = i0 * ldc + j0
            if cols == block:
                full(a, ao, lda, buf, c, co, ldc, k, r, cols)
            elif narrow:
                if v == 1:
                    h1(a, ao, lda, buf, c, co, ldc, k, r, cols)
                elif v == 2:
                    h2(a, ao, lda, buf, c, co, ldc, k, r, cols)
                elif v == 3:
                    h3(a, ao, lda, buf, c, co, ldc, k, r, cols)
                else:
                    h4(a, ao, lda, buf, c, co, ldc, k, r, cols)
            elif v == 1:
                e1(a, ao, lda, buf, c, co, ldc, k, r, cols)
            elif v == 2:
                e2(a, ao, lda, buf, c, co, ldc, k, r, cols)
            elif v == 3:
                e3(a, ao, lda, buf, c, co, ldc, k, r, cols)
            else:
                e4(a, ao, lda, buf, c, co, ldc, k, r, cols)

    def floats(*arrays: Any) -> bool:
        return all(isinstance(x, types.Array) and x.dtype == types.float32 for x in arrays)

    # (no annotations: numba compares the typing and implementation signatures as written)
    @overload_method(types.Array, "turnout_sgemm")
    def _method(a, lda, b, ldb, c, ldc, m, n, k):  # type: ignore[no-untyped-def]
        if not floats(a, b, c):
            return None

        def impl(a, lda, b, ldb, c, ldc, m, n, k):  # type: ignore[no-untyped-def]
            # c[:m, :n] = a[:m, :k] @ b[:k, :n], row strides lda, ldb, ldc (elements): per
            # block of BLOCK columns, B's block packed once and read by every row tile
            buf = np.empty(k * block + 16, np.float32)
            for j0 in range(0, n, block):
                cols = min(block, n - j0)
                _pack(b, j0, ldb, buf, k, cols)
                row_tiles(a, lda, buf, c, ldc, j0, m, k, cols)

        return impl

    @overload_method(types.Array, "turnout_sgemm_rows")
    def _rows_method(a, lda, b, rows, b_off, c, ldc, m, n, k):  # type: ignore[no-untyped-def]
        if not (floats(a, b, c) and isinstance(rows, types.Array)
                and rows.dtype == types.int64 and rows.layout == "C"):  # fmt: skip
            return None

        def impl(a, lda, b, rows, b_off, c, ldc, m, n, k):  # type: ignore[no-untyped-def]
            # c[:m, :n] = a[:m, :k] @ B, B's row q the n elements of b (read flat) from
            # b_off + rows[q]: `turnout_sgemm` with the rows of B gathered as they are packed
            if rows.shape[0] < k:
                raise ValueError("fewer row offsets than K")
            buf = np.empty(k * block + 16, np.float32)
            for j0 in range(0, n, block):
                cols = min(block, n - j0)
                _pack_rows(b, b_off + j0, rows, buf, k, cols)
                row_tiles(a, lda, buf, c, ldc, j0, m, k, cols)

        return impl


if AVAILABLE:
    _register()
