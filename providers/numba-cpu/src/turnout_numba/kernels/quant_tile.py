"""The register tile of the int16 GEMM (`quant_gemm`): 4 rows of A times 2 runs of B over K,
16 int16 values a step, written in LLVM IR because numba has no vector types.

Written as plain numba loops, eight dot products at once vectorize as int32 products
(`vpmovsxwd` + `vpmulld`, 8 products an instruction), not as `vpmaddwd` (16, pairs summed in
int32), and the tile ran at 17-25 GMAC/s on AVX2 where onnxruntime's kernels run at 45-60.
Here each step is: load 16 int16 of each A row and each B run (6 loads), multiply pairwise
into 8 int32 sums (8 products: sign-extend, multiply, add the even and odd lanes, which the
x86 backend selects as `vpmaddwd`), add to 8 accumulators kept in registers for the whole
run. The sums are exact int32, as the scalar loop's.

Reached from numba code as the array methods `turnout_i16_tile{R}` and
`turnout_i16_tile{R}_half`, R = 4 or 1 row (overloads, so the generated kernel sources need no
import): `a.turnout_i16_tile4(a_off, lda, src, x0, x1, segs, seglen, steps, out)` adds into
`out` the 8 sums (row-major: row r, run c at `out[2 * r + c]`), over every segment g, of
`a[a_off + r * lda + g * seglen + k]` times `src[x_c + segs[g] + k]` for k < 16 * steps;
`_half` adds one step of 8 values after each segment's (a run of 24 or 72 channels is
common). The caller adds each segment's last values (under 8) itself: nothing is read past a
segment. The two are separate functions: one with
the 8-value step behind a run-time test ran at half the speed (LLVM kept the accumulators in
memory).
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, overload_method

from ..cache import distinct_helper, file_digest

__all__ = ["LANES", "TAG", "TILE_COLS", "TILE_ROWS"]

TILE_ROWS = 4
TILE_COLS = 2
LANES = 16
"""int16 values of K a step (one 256-bit vector)."""

TAG = f"int16 tile {file_digest(__file__)}"
"""Written into the generated sources that call the tile: numba's cache keys a kernel by its
source, and the tile is inlined into it, so a change here must change that source too."""

# (numba's IR helpers are untyped)
_insert_function: Any = cgutils.get_or_insert_function
_alloca_once: Any = cgutils.alloca_once
_unpack_tuple: Any = cgutils.unpack_tuple


def _make_tile(rows: int, half: bool) -> Any:
    """The intrinsic adding the tile's `rows` x 2 dot products over every segment: `steps`
    steps of 16 values, then one of 8 when `half`."""

    @intrinsic
    def tile(typingctx: Any, a: Any, a_off: Any, lda: Any, src: Any, x0: Any, x1: Any,
             segs: Any, seglen: Any, steps: Any, out: Any) -> Any:  # fmt: skip
        i64 = types.int64
        sig = types.void(a, i64, i64, src, i64, i64, segs, i64, i64, out)

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            a_arr, a_off, lda, s_arr, x0, x1, g_arr, seglen, steps, o_arr = args
            aty, sty, gty, oty = (signature.args[i] for i in (0, 3, 6, 9))
            nseg = _unpack_tuple(
                builder, context.make_array(gty)(context, builder, g_arr).shape, 1
            )[0]
            i16, i32, l64 = ir.IntType(16), ir.IntType(32), ir.IntType(64)
            vsum = ir.VectorType(i32, LANES // 2)
            reduce = _insert_function(
                builder.module, ir.FunctionType(i32, [vsum]), "llvm.vector.reduce.add.v8i32"
            )
            ap = context.make_array(aty)(context, builder, a_arr).data
            sp = context.make_array(sty)(context, builder, s_arr).data
            gp = context.make_array(gty)(context, builder, g_arr).data
            op = context.make_array(oty)(context, builder, o_arr).data
            slots = []
            for _ in range(rows * TILE_COLS):
                slot = _alloca_once(builder, vsum)
                builder.store(ir.Constant(vsum, [0] * (LANES // 2)), slot)
                slots.append(slot)

            def load(at: Any, base: Any, lanes: int) -> Any:
                ptr = builder.bitcast(
                    builder.gep(base, [at]), ir.VectorType(i16, lanes).as_pointer()
                )
                return builder.sext(builder.load(ptr, align=2), ir.VectorType(i32, lanes))

            def step(a_at: list[Any], x_at: list[Any], lanes: int) -> None:
                """One step of `lanes` values: products summed pairwise (vpmaddwd)."""
                half_ty = ir.VectorType(i32, lanes // 2)
                even = ir.Constant(half_ty, list(range(0, lanes, 2)))
                odd = ir.Constant(half_ty, list(range(1, lanes, 2)))
                widen = ir.Constant(vsum, [i if i < lanes // 2 else lanes // 2 for i in range(8)])
                zero = ir.Constant(half_ty, [0] * (lanes // 2))
                xs = [load(x, sp, lanes) for x in x_at]
                for r, at in enumerate(a_at):
                    av = load(at, ap, lanes)
                    for c, xv in enumerate(xs):
                        prod = builder.mul(av, xv)  # exact: |values| <= 255 (codes less zp)
                        pairs = builder.add(
                            builder.shuffle_vector(prod, prod, even),
                            builder.shuffle_vector(prod, prod, odd),
                        )
                        if lanes < LANES:  # into the low lanes of the accumulator
                            pairs = builder.shuffle_vector(pairs, zero, widen)
                        slot = slots[r * TILE_COLS + c]
                        builder.store(builder.add(builder.load(slot), pairs), slot)

            with cgutils.for_range(builder, nseg) as seg:
                o = builder.mul(seg.index, seglen)
                base = builder.load(builder.gep(gp, [seg.index]))
                a0 = [
                    builder.add(builder.add(a_off, o), builder.mul(ir.Constant(l64, r), lda))
                    for r in range(rows)
                ]
                x_0 = [builder.add(x, base) for x in (x0, x1)]
                with cgutils.for_range(builder, steps) as loop:
                    k = builder.mul(loop.index, ir.Constant(l64, LANES))
                    step([builder.add(v, k) for v in a0], [builder.add(v, k) for v in x_0], LANES)
                if half:
                    k = builder.mul(steps, ir.Constant(l64, LANES))
                    step(
                        [builder.add(v, k) for v in a0],
                        [builder.add(v, k) for v in x_0],
                        LANES // 2,
                    )
            for idx, slot in enumerate(slots):
                ptr = builder.gep(op, [ir.Constant(l64, idx)])
                total = builder.call(reduce, [builder.load(slot)])
                builder.store(builder.add(builder.load(ptr), total), ptr)
            return context.get_dummy_value()

        return sig, codegen

    return tile


def _register(rows: int, half: bool) -> None:
    tile = _make_tile(rows, half)
    method = f"turnout_i16_tile{rows}{'_half' if half else ''}"

    # (no annotations: numba compares the typing and implementation signatures as written)
    @overload_method(types.Array, method)
    def _method(a, a_off, lda, src, x0, x1, segs, seglen, steps, out):  # type: ignore[no-untyped-def]
        if not (isinstance(a, types.Array) and a.dtype == types.int16 and a.ndim == 1):
            return None

        def impl(a, a_off, lda, src, x0, x1, segs, seglen, steps, out):  # type: ignore[no-untyped-def]
            tile(a, a_off, lda, src, x0, x1, segs, seglen, steps, out)

        return distinct_helper(impl, f"{method}_impl")


for _rows in (1, TILE_ROWS):
    _register(_rows, False)
    _register(_rows, True)
