"""The 8-bit GEMM on AVX-512 VNNI: `vpdpbusd` multiplies 4 uint8 by 4 int8 and adds the four
products into an int32 lane, 64 products per instruction, where the int16 kernel of
`quant_gemm` does 16 (onnxruntime's MLAS uses the same instruction).

numba has no vector types, so the register tile is written in LLVM IR (`_tile`): R rows of A
(4, or 1 for the rows left over) times 32 columns of B, two 16-lane accumulators per row kept
in registers across the whole K loop; each step loads 4 bytes of each A row (broadcast) and
64 bytes of each packed B column block. It is reached from numba code as the array method
`turnout_vnni_tile4` / `turnout_vnni_tile1` (an overload, so the generated kernel sources need
no import). The host must have the instruction and numba must compile for the host CPU
(`AVAILABLE`); otherwise the int16 kernel runs.

Operands: A as uint8 rows, B as int8 (uint8 A less 0 or int8 A plus 128; uint8 B less 128 or
int8 B as it is), packed once into (N/32 blocks, segments, K/4, 32 columns, 4 bytes). The zero
points and those offsets are applied afterwards (`correct`), exactly in int32:
`sum (a - az)(b - bz) = sum ab - bz sum a - az sum b + K az bz`.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, overload_method

from ..cache import distinct_helper, file_digest

__all__ = ["AVAILABLE", "COLS", "VnniB", "VnniGemm", "pack_b", "row_blocks"]

# (numba's IR helpers are untyped)
_insert_function: Any = cgutils.get_or_insert_function
_alloca_once: Any = cgutils.alloca_once

COLS = 32
"""Columns of B per tile (two 16-lane accumulators per row)."""


def _available() -> bool:
    if os.environ.get("NUMBA_CPU_NAME", "host") != "host" or os.environ.get("NUMBA_CPU_FEATURES"):
        return False  # compiling for another CPU than this one
    try:
        import llvmlite.binding as ll

        features = ll.get_host_cpu_features()
    except Exception:  # pragma: no cover - a platform without the query
        return False
    return bool(features.get("avx512vnni")) and bool(features.get("avx512f"))


AVAILABLE = _available()


def _make_tile(rows: int) -> Any:
    """The intrinsic computing `rows` rows of A (stride lda bytes) times one 32-column block of
    packed B into int32 C (row stride ldc), adding to C's values when `acc` is true."""

    @intrinsic
    def tile(typingctx: Any, a: Any, a_off: Any, lda: Any, b: Any, b_off: Any, kq: Any,
             c: Any, c_off: Any, ldc: Any, acc: Any) -> Any:  # fmt: skip
        i64 = types.int64
        sig = types.void(a, i64, i64, b, i64, i64, c, i64, i64, types.boolean)

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            a_arr, a_off, lda, b_arr, b_off, kq, c_arr, c_off, ldc, acc = args
            aty, bty, cty = signature.args[0], signature.args[3], signature.args[6]
            byte = ir.IntType(8).as_pointer()
            i32, l64 = ir.IntType(32), ir.IntType(64)
            v16 = ir.VectorType(i32, 16)
            fnty = ir.FunctionType(v16, [v16, v16, v16])
            dp = _insert_function(builder.module, fnty, "llvm.x86.avx512.vpdpbusd.512")
            ap = builder.gep(
                builder.bitcast(context.make_array(aty)(context, builder, a_arr).data, byte),
                [a_off],
            )
            bp = builder.gep(
                builder.bitcast(context.make_array(bty)(context, builder, b_arr).data, byte),
                [b_off],
            )
            cp = builder.gep(context.make_array(cty)(context, builder, c_arr).data, [c_off])
            zero = ir.Constant(v16, [0] * 16)
            slots = []
            for r in range(rows):
                for j in range(2):
                    at = builder.add(
                        builder.mul(ir.Constant(l64, r), ldc), ir.Constant(l64, 16 * j)
                    )
                    ptr = builder.bitcast(builder.gep(cp, [at]), v16.as_pointer())
                    slot = _alloca_once(builder, v16)
                    builder.store(builder.select(acc, builder.load(ptr, align=4), zero), slot)
                    slots.append((slot, ptr))
            with cgutils.for_range(builder, kq) as loop:
                q = loop.index
                bv = []
                for j in range(2):
                    off = builder.add(
                        builder.mul(q, ir.Constant(l64, 128)), ir.Constant(l64, 64 * j)
                    )
                    bv.append(
                        builder.load(
                            builder.bitcast(builder.gep(bp, [off]), v16.as_pointer()), align=1
                        )
                    )
                for r in range(rows):
                    off = builder.add(
                        builder.mul(ir.Constant(l64, r), lda), builder.mul(q, ir.Constant(l64, 4))
                    )
                    word = builder.load(
                        builder.bitcast(builder.gep(ap, [off]), i32.as_pointer()), align=1
                    )
                    av = builder.insert_element(
                        ir.Constant(v16, ir.Undefined), word, ir.Constant(i32, 0)
                    )
                    av = builder.shuffle_vector(av, ir.Constant(v16, ir.Undefined), zero)
                    for j in range(2):
                        slot = slots[2 * r + j][0]
                        builder.store(builder.call(dp, [builder.load(slot), av, bv[j]]), slot)
            for slot, ptr in slots:
                builder.store(builder.load(slot), ptr, align=4)
            return context.get_dummy_value()

        return sig, codegen

    return tile


def _register(rows: int) -> None:
    tile = _make_tile(rows)

    # (no annotations: numba compares the typing and implementation signatures as written)
    @overload_method(types.Array, f"turnout_vnni_tile{rows}")
    def _method(a, a_off, lda, b, b_off, kq, c, c_off, ldc, acc):  # type: ignore[no-untyped-def]
        if not (isinstance(a, types.Array) and a.dtype == types.uint8 and a.ndim == 1):
            return None

        def impl(a, a_off, lda, b, b_off, kq, c, c_off, ldc, acc):  # type: ignore[no-untyped-def]
            tile(a, a_off, lda, b, b_off, kq, c, c_off, ldc, acc)

        return distinct_helper(impl, f"turnout_vnni_tile{rows}_impl")


if AVAILABLE:
    _register(4)
    _register(1)


def pack_b(segments: list[np.ndarray[Any, Any]]) -> tuple[np.ndarray[Any, Any], int, int]:
    """B's int8 segments (each (Ks, N), Ks a multiple of 4) packed as the tiles read them:
    (N/32 blocks, segments, Ks/4, 32, 4) bytes, N padded with zeros. Returns (packed, Ks/4,
    padded N)."""
    ks, n = segments[0].shape
    npad = -(-n // COLS) * COLS
    kq = ks // 4
    out = np.zeros((npad // COLS, len(segments), kq, COLS, 4), np.int8)
    for g, s in enumerate(segments):
        full = np.zeros((ks, npad), np.int8)
        full[:, :n] = s
        out[:, g] = full.reshape(kq, 4, npad // COLS, COLS).transpose(2, 0, 3, 1)
    out.flags.writeable = False
    return out, kq, npad


_TAG = f"vnni tile {file_digest(__file__)}"
"""Written into the driver's source: numba's cache keys a kernel by its source, and the tiles
are compiled into it, so a change here must change that source too (as `quant_tile.TAG`)."""

_DRIVER = f"""\
# {_TAG}
def _vnni_gemm(a, blocks, starts, segs, bp, kq, c):
    ldc = c.shape[1]
    cf = c.reshape(-1)
    nbk = blocks.shape[0]
    nseg = segs.shape[0]
    ncb = bp.shape[0] // (nseg * kq * 128)
    for t in prange(nbk * ncb):
        bi = t % nbk
        jb = t // nbk
        r0 = blocks[bi, 0]
        lda = blocks[bi, 2]
        co = r0 * ldc + jb * 32
        for g in range(nseg):
            boff = (jb * nseg + g) * kq * 128
            aoff = starts[r0] + segs[g]
            if blocks[bi, 1] == 4:
                a.turnout_vnni_tile4(aoff, lda, bp, boff, kq, cf, co, ldc, g > 0)
            else:
                a.turnout_vnni_tile1(aoff, lda, bp, boff, kq, cf, co, ldc, g > 0)
"""

# `s` below: the corrected int32 sum `sum (a - az)(b - bz)`, from C's `sum a b`, B's column
# sums and zero points (`bzv`, one per column), A's zero point and `rowfac = sum a - K az`.
_STORE = """\
def _vnni_store(c, y, colsum, bzv, az, rowfac, mult, bias, zp, lo, hi):
    m, n = y.shape
    # (row strides set before the parallel loop: a conditional index in it types as float)
    mr = 1 if mult.shape[0] > 1 else 0
    bsr = 1 if bias.shape[0] > 1 else 0
    zr = 1 if zp.shape[0] > 1 else 0
    ar = 1 if az.shape[0] > 1 else 0
    for i in prange(m):
        yr = y[i]
        mrow = mult[i * mr]
        brow = bias[i * bsr]
        z = zp[i * zr]
        a_z = az[i * ar]
        rf = rowfac[i]
{by_row}        for j in range(n):
            s = np.int32(c[i, j] - a_z * colsum[j] - rf * bzv[j])
{by_col}{store}
"""
"""y (A rows, B columns) from C (A rows, B columns); parameters by column come as full rows,
by row as one value per row (a select between the two would keep the loop from
vectorizing)."""

_STORE_T = """\
def _vnni_store(c, y, colsum, bzv, az, rowfac, mult, bias, zp, lo, hi):
    m, n = y.shape
    mr = 1 if mult.shape[0] > 1 else 0
    bsr = 1 if bias.shape[0] > 1 else 0
    z = zp[0]
    a_z = az[0]
    for jb in prange((n + 63) // 64):
        j0 = jb * 64
        w = min(j0 + 64, n) - j0
        buf = np.empty((m, 64), np.int32)
        for jj in range(w):
            cr = c[j0 + jj]
            for i in range(m):
                buf[i, jj] = cr[i]
        rf = rowfac[j0 : j0 + w]
        for i in range(m):
            yr = y[i, j0 : j0 + w]
            br_ = buf[i]
            cz = a_z * colsum[i]
            bz_i = bzv[i]
            mj = mult[i * mr, 0]
            bj = bias[i * bsr, 0]
            for j in range(w):
                s = np.int32(br_[j] - cz - bz_i * rf[j])
{store}
"""
"""y (B columns, A rows) from C (A rows, B columns): a convolution's (channels, pixels) from
the tiles' (pixels, channels), 64 pixels at a time through a small buffer (a strided read of
C per output value costs several times more); parameters by row (channel) only."""

_STORES = {
    "int": "yr[j] = s",
    "requant": (
        "v = np.float32(s + bj) * mj\n"
        "v = max(v, np.float32(lo - z))\n"
        "v = min(v, np.float32(hi - z))\n"
        "v = (v + np.float32(12582912.0)) - np.float32(12582912.0)\n"
        "yr[j] = np.int32(v) + z"
    ),
    "scale": "yr[j] = np.float32(s) * mj + bj",
}


def _lines(text: str, indent: int) -> str:
    return "".join(f"{' ' * indent}{line}\n" for line in text.splitlines())


class VnniB:
    """B packed for the tiles, with what the zero-point correction needs: its column sums
    (of the int8 values packed) and its zero point in that domain (per tensor or column)."""

    __slots__ = ("colsum", "k", "kq", "n", "npad", "packed", "zero", "zero_points")

    def __init__(self, segments: list[np.ndarray[Any, Any]], zero: np.ndarray[Any, Any], k: int):
        """`segments`: B's int8 values (each (Ks, N)); `zero`: its zero point less the same
        offset, int32 of 1 or N values; `k`: the true K (before padding)."""
        self.packed, self.kq, self.npad = pack_b(segments)
        self.n = segments[0].shape[1]
        self.colsum = np.ascontiguousarray(
            sum(s.astype(np.int32).sum(axis=0) for s in segments), np.int32
        )
        z = np.asarray(zero, np.int32).reshape(-1)
        self.zero = np.ascontiguousarray(np.broadcast_to(z, (self.n,)))
        self.zero_points = bool(self.zero.any())  # (whether A's row sums are needed)
        self.k = k

    @classmethod
    def raw(cls, packed: Any, kq: int, n: int, colsum: Any, zero: Any, k: int) -> VnniB:
        """B already packed (by a kernel, per run): its parts as `__init__` would make them."""
        vb = cls.__new__(cls)
        vb.packed, vb.kq, vb.npad, vb.n = packed, kq, packed.shape[0] * COLS, n
        vb.colsum, vb.zero, vb.k = colsum, zero, k
        vb.zero_points = bool(zero.any())
        return vb

    @classmethod
    def of(cls, b: np.ndarray[Any, Any], zp: Any, segments: int = 1) -> VnniB:
        """B (K, N) uint8 or int8 and its zero point (None, a scalar or N values); K split into
        `segments` equal runs, each padded with zeros to a multiple of 4."""
        off = 128 if b.dtype == np.uint8 else 0
        b8 = (b.astype(np.int16) - off).astype(np.int8)
        z = np.zeros(1, np.int32) if zp is None else np.asarray(zp).astype(np.int32).reshape(-1)
        k = b.shape[0]
        ks = k // segments
        runs = []
        for g in range(segments):
            s = b8[g * ks : (g + 1) * ks]
            pad = -ks % 4
            runs.append(np.concatenate([s, np.zeros((pad, s.shape[1]), np.int8)]) if pad else s)
        return cls(runs, z - off, k)


def row_blocks(rows: int, ow: int, rstep: int, cs: int) -> tuple[Any, Any]:
    """(blocks, starts) for A rows whose row r starts at `(r // ow) * rstep + (r % ow) * cs`:
    groups of 4 rows at a fixed stride within one run of `ow`, single rows for the rest."""
    r = np.arange(rows, dtype=np.int64)
    starts = (r // ow) * rstep + (r % ow) * cs
    blocks = []
    for q0 in range(0, rows, ow):
        n = min(ow, rows - q0)
        for i in range(0, n - n % 4, 4):
            blocks.append((q0 + i, 4, cs))
        blocks.extend((q0 + i, 1, cs) for i in range(n - n % 4, n))
    return np.array(blocks, np.int64).reshape(-1, 3), starts


class VnniGemm:
    """The compiled driver and store for one node (variant as in `quant_gemm`)."""

    _kept: tuple[Any, int, int, Any] | None = None

    def _store_params(self, params: Any, m: int, n: int) -> Any:
        """(multiplier, bias, zero point) as the store reads them; kept while the same
        parameters come in (a node's constant scales give the same objects every run)."""
        kept = self._kept
        if kept is not None and kept[0] is params and kept[1] == m and kept[2] == n:
            return kept[3]
        mult, bias = params[0].grid(m, n), params[1].grid(m, n)
        if not self.transposed and not self.by_row:  # by column: full rows
            if mult.shape[1] != n:
                mult = np.ascontiguousarray(np.broadcast_to(mult, (mult.shape[0], n)))
            if bias.shape[1] != n:
                bias = np.ascontiguousarray(np.broadcast_to(bias, (bias.shape[0], n)))
        elif mult.shape[1] > 1 or bias.shape[1] > 1:
            raise AssertionError("this store takes parameters by row only")
        out = (mult, bias, params[2].data)
        self._kept = (params, m, n, out)
        return out

    def __init__(
        self, ctx: Any, variant: str, out: Any, transposed: bool, by_row: bool = False
    ) -> None:
        from .. import cache
        from ..codegen import numba_array
        from ..registry import SizedKernel
        from .quant_gemm import int_range

        self.variant = variant
        self.transposed = transposed
        self.out = np.dtype(out)
        self.lo, self.hi = int_range(self.out) if variant == "requant" else (0, 0)
        arr = numba_array
        i64, i32 = np.dtype(np.int64), np.dtype(np.int32)
        drv = cache.load_source(_DRIVER, "vnni_gemm")._vnni_gemm
        sig = types.void(
            arr(np.dtype(np.uint8), 1, readonly=True, layout="C"),
            arr(i64, 2, readonly=True, layout="C"), arr(i64, 1, readonly=True, layout="C"),
            arr(i64, 1, readonly=True, layout="C"),
            arr(np.dtype(np.int8), 1, readonly=True, layout="C"),
            types.int64, arr(i32, 2, readonly=False, layout="C"),
        )  # fmt: skip
        self.driver = SizedKernel(drv, [sig], ctx.parallel)
        self.by_row = by_row
        if transposed:
            text = _STORE_T.format(store=_lines(_STORES[variant], 16))
        else:
            row, col = (
                ("mj = mrow[0]\nbj = brow[0]", "") if by_row else ("", "mj = mrow[j]\nbj = brow[j]")
            )
            text = _STORE.format(
                by_row=_lines(row, 8), by_col=_lines(col, 12), store=_lines(_STORES[variant], 12)
            )
        name = f"vnni_store_{variant}{'_t' if transposed else '_r' if by_row else ''}"
        st = cache.load_source(text, name)._vnni_store
        ivec = arr(i32, 1, readonly=True, layout="C")
        bias = np.dtype(np.float32 if variant == "scale" else np.int32)
        ssig = types.void(
            arr(i32, 2, readonly=True, layout="C"), arr(self.out, 2, readonly=False, layout="C"),
            ivec, ivec, ivec, ivec, arr(np.dtype(np.float32), 2, readonly=True, layout="C"),
            arr(bias, 2, readonly=True, layout="C"), ivec, types.int32, types.int32,
        )  # fmt: skip
        self.store = SizedKernel(st, [ssig], ctx.parallel)

    def __call__(
        self,
        a: np.ndarray[Any, Any],
        blocks: Any,
        starts: Any,
        segs: Any,
        vb: VnniB,
        rows: int,
        y: np.ndarray[Any, Any],
        rowsum: np.ndarray[Any, Any] | None,
        az: np.ndarray[Any, Any],
        params: tuple[Any, Any, Any],
    ) -> None:
        """C = A . B over the segments, then y = store(C corrected for the zero points);
        `a` flat uint8; `rowsum` A's row sums (None when B's zero point is 0 everywhere: not
        needed); `az` A's zero point (1 or `rows` values, int32); `params` (multiplier,
        bias, zero point) as `quant_gemm.Params` over y's rows and columns (the zero point
        per tensor or per row)."""
        # (a row of C 64 bytes longer than the tiles need: rows 4 KB apart would share L1
        # sets, and the transposed store reads 64 rows at once)
        c = np.empty((rows, vb.npad + 16), np.int32)
        work = rows * vb.npad * vb.kq * 4 * len(segs) // 8
        self.driver(work, a, blocks, starts, segs, vb.packed.reshape(-1), vb.kq, c)
        if rowsum is None:
            rowfac = np.zeros(rows, np.int32)
        else:
            rowfac = (rowsum - vb.k * az).astype(np.int32)
        mult, bias, zp = self._store_params(params, *y.shape)
        self.store(y.size, c, y, vb.colsum, vb.zero, az, rowfac, mult, bias, zp, self.lo, self.hi)
