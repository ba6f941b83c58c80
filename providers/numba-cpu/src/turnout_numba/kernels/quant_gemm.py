"""The integer GEMM under every 8-bit product (MatMulInteger, QLinearMatMul, ConvInteger,
QLinearConv, DynamicQuantizeMatMul), and the shared handling of zero points and scales.

`y[i, j] = store(sum_k a[i, k] * bt[j, k])`: both operands are int16 with their zero point
already subtracted (u8 - zp and s8 - zp fit int16 whatever the mix), rows K-contiguous. Each
pass over K computes a tile of 4 rows of `a` by 2 rows of `bt` on `quant_tile`'s vector tile
(`vpmaddwd`: int16 pairs multiplied and summed into int32 lanes, 8 products from 6 loads): int32
accumulation, exact, as onnxruntime's. The edges (rows past a multiple of 4, a last odd column)
run a row at a time on the one-row tile; each segment's last values under 8 in a scalar loop.
Column j's patch start advances from j - 1's, without a division. A constant operand is
widened, zero-point-shifted and laid out once when the kernel is built. Tasks are (block of
64 output columns, 4 rows): the block's rows of `bt` stay in cache while the row blocks of
`a` pass over them.

On a 2-core AMD EPYC (Zen 3, AVX2, no VNNI), 1 thread, ConvInteger and MatMulInteger shapes
of a captcha OCR model, GMAC/s one output a pass / the tile / onnxruntime 1.32: 3x3 48 -> 192
channels at 16x40 10.7 / 44-51 / 48-57; 3x3 24 -> 24 at 32x80 6.6 / 27 / 31-45; 1x1 192 -> 48
9-11 / 24-25 / 39-57; 20 x 1024 x 8210 15.5 / 36-38 / 61-67 (onnxruntime's uint8 x int8
`vpmaddubsw`, which saturates). The whole model's ConvInteger 34.6 -> 9.9 ms a run
(onnxruntime 6.2).

What `store` does with the int32 sum is a variant, each its own generated kernel:
- `int`: the sum itself (MatMulInteger, ConvInteger);
- `requant`: onnxruntime's requantization (MLAS `MlasRequantizeOutput`): `float32(sum + bias)
  * multiplier` clamped to the output type less its zero point, rounded half to even, plus the
  zero point; the multiplier is `a_scale * b_scale / y_scale` computed in float32, as
  onnxruntime computes it, so outputs are bit-equal to onnxruntime's;
- `scale`: `float32(sum) * multiplier + bias` in float32 (a dynamically quantized MatMul with
  its Cast and Mul rescale).
Multipliers, biases and zero points are 1-D arrays read at `row * r + col * c` (strides 0 for
per-tensor values), so per-tensor, per-row and per-column parameters share one kernel.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import types

from turnout.graph.errors import InvalidArgument
from turnout.sdk.semantics.constants import transposed

from .. import cache
from ..codegen import numba_array
from ..registry import BuildContext, SizedKernel
from .quant_tile import LANES, TAG, TILE_COLS, TILE_ROWS

__all__ = ["NO_PARAMS", "IntGemm", "Params", "Rows", "int_range", "shifted", "shifted_t"]

BLOCK_N = 64
"""Output columns per task: 64 rows of `bt` (K int16 each) stay in L2 while rows of `a` pass."""

_GEMM = """\
# {tag}
def _qgemm(a, src, segs, seglen, n, ow_, rs, cs, y, mult, mr, mc, bias, br, bc, zp, zr, zc, lo, hi):
    m = a.shape[0]
    mb = (m + {ri} - 1) // {ri}
    nb = (n + {block} - 1) // {block}
    ns = segs.shape[0]
    lda = a.shape[1]
    af = a.reshape(-1)
    steps = seglen // {lanes}
    half = seglen - steps * {lanes} >= {lanes} // 2
    tail = steps * {lanes} + ({lanes} // 2 if half else 0)
    for t in prange(nb * mb):
        acc = np.zeros({ri} * {rj}, np.int32)
        bases = np.zeros({rj}, np.int64)
        i0 = (t % mb) * {ri}
        j0 = (t // mb) * {block}
        j1 = min(j0 + {block}, n)
        rows = min({ri}, m - i0)
        j = j0
        q = j0 // ow_  # column j's patch starts at q * rs + rm * cs
        rm = j0 - q * ow_
        while j < j1:
            cols = min({rj}, j1 - j)
{bases}
            if rows == {ri} and cols == {rj}:
{tile}
            else:
{edge}
            j += cols
"""


def _indented(lines: list[str], depth: int) -> str:
    return "".join(f"{' ' * 4 * depth}{line}\n" for line in lines)


def _dot(rows: list[str], cols: int) -> list[str]:
    """The scalar loop adding the products of a's rows `rows` with the patches at b0.. over
    each segment's last values (from `tail`: those the vector tile left), into s{r}_{c}."""
    loop = ["for g in range(ns):", "    o = g * seglen"]
    loop += [f"    x{c} = src[b{c} + segs[g] :]" for c in range(cols)]
    loop += [f"    w{r} = a[{i}, o:]" for r, i in enumerate(rows)]
    loop += ["    for kk in range(tail, seglen):"]
    loop += [f"        u{c} = np.int32(x{c}[kk])" for c in range(cols)]
    for r in range(len(rows)):
        loop += [f"        v{r} = np.int32(w{r}[kk])"]
        loop += [f"        s{r}_{c} = np.int32(s{r}_{c} + v{r} * u{c})" for c in range(cols)]
    return loop


def _tile_lines(store: str) -> list[str]:
    """The 4 x 2 tile: K on `quant_tile`'s vector tile, each segment's last values (under 8)
    in the scalar loop, then the 8 stores."""
    sums = [(r, c) for r in range(TILE_ROWS) for c in range(TILE_COLS)]
    args = "i0 * lda, lda, src, b0, b1, segs, seglen, steps, acc"
    lines = [f"acc[{n}] = 0" for n in range(len(sums))]
    lines += ["if half:", f"    af.turnout_i16_tile{TILE_ROWS}_half({args})"]
    lines += ["else:", f"    af.turnout_i16_tile{TILE_ROWS}({args})"]
    lines += [f"s{r}_{c} = acc[{n}]" for n, (r, c) in enumerate(sums)]
    rows = [f"i0 + {r}" for r in range(TILE_ROWS)]
    lines += ["if tail < seglen:", *(f"    {x}" for x in _dot(rows, TILE_COLS))]
    for r, c in sums:
        lines += store.format(i=rows[r], j=f"j + {c}", s=f"s{r}_{c}").splitlines()
    return lines


def _edge_lines(store: str) -> list[str]:
    """The edges (rows past the last 4, a block's last odd column): a row at a time on the
    one-row vector tile (a single column computed twice), each segment's last values in the
    scalar loop, then a store per output. (One tile per row count compiled twice the code.)"""
    args = "i * lda, lda, src, bases[0], bases[cols - 1], segs, seglen, steps, acc"
    lines = ["for r in range(rows):", "    i = i0 + r", "    acc[0] = 0", "    acc[1] = 0"]
    lines += ["    if half:", f"        af.turnout_i16_tile1_half({args})"]
    lines += ["    else:", f"        af.turnout_i16_tile1({args})"]
    lines += ["    for c in range(cols):"]
    body = ["jc = j + c", "b0 = bases[c]", "s0_0 = acc[c]"]
    body += ["if tail < seglen:", *(f"    {x}" for x in _dot(["i"], 1))]
    body += store.format(i="i", j="jc", s="s0_0").splitlines()
    return lines + [f"        {x}" for x in body]


_STORES = {
    "int": "y[{i}, {j}] = {s}",
    "requant": (
        "z = zp[({i}) * zr + ({j}) * zc]\n"
        "f = np.float32({s} + bias[({i}) * br + ({j}) * bc]) * mult[({i}) * mr + ({j}) * mc]\n"
        "f = max(f, np.float32(lo - z))\n"
        "f = min(f, np.float32(hi - z))\n"
        "f = (f + np.float32(12582912.0)) - np.float32(12582912.0)\n"
        "y[{i}, {j}] = np.int32(f) + z"
    ),
    "scale": (
        "y[{i}, {j}] = np.float32({s}) * mult[({i}) * mr + ({j}) * mc]"
        " + np.float32(bias[({i}) * br + ({j}) * bc])"
    ),
}


def gemm_source(variant: str) -> str:
    """The generated `_qgemm` of one store variant."""
    store = _STORES[variant]
    bases = []
    for c in range(TILE_COLS):
        bases += [
            f"bases[{c}] = q * rs + rm * cs",
            "rm += 1",
            "if rm == ow_:",
            "    rm = 0",
            "    q += 1",
        ]
    bases += [f"b{c} = bases[{c}]" for c in range(TILE_COLS)]
    return _GEMM.format(
        tag=TAG,
        ri=TILE_ROWS,
        rj=TILE_COLS,
        block=BLOCK_N,
        lanes=LANES,
        bases=_indented(bases, 3),
        tile=_indented(_tile_lines(store), 4),
        edge=_indented(_edge_lines(store), 4),
    )


def _gemm_kernel(variant: str, out: np.dtype[Any], bias: np.dtype[Any], parallel: bool) -> Any:
    fn = cache.load_source(gemm_source(variant), f"qgemm_{variant}")._qgemm
    i16 = numba_array(np.dtype(np.int16), 2, readonly=True, layout="C")
    src = numba_array(np.dtype(np.int16), 1, readonly=True, layout="C")
    vec = numba_array(np.dtype(np.float32), 1, readonly=True, layout="C")
    ivec = numba_array(np.dtype(np.int32), 1, readonly=True, layout="C")
    bvec = numba_array(bias, 1, readonly=True, layout="C")
    i64 = types.int64
    sig = types.void(
        i16, src, numba_array(np.dtype(np.int64), 1, readonly=True, layout="C"), i64, i64, i64,
        i64, i64, numba_array(out, 2, readonly=False, layout="C"),
        vec, i64, i64, bvec, i64, i64, ivec, i64, i64, types.int32, types.int32,
    )  # fmt: skip
    return SizedKernel(fn, [sig], parallel)


class Params:
    """A per-tensor, per-row or per-column parameter as the kernels read it: a contiguous 1-D
    array and its (row, column) strides."""

    __slots__ = ("c", "data", "r")

    def __init__(self, data: np.ndarray[Any, Any], r: int = 0, c: int = 0) -> None:
        self.data = data
        self.r = r
        self.c = c

    @classmethod
    def scalar(cls, value: Any, dtype: Any) -> Params:
        return cls(np.full(1, value, dtype))

    def grid(self, rows: int, cols: int) -> np.ndarray[Any, Any]:
        """The values as a 2-D (1 or `rows`, 1 or `cols`) array."""
        return self.data.reshape(rows if self.r else 1, cols if self.c else 1)


NO_PARAMS = (Params.scalar(1, np.float32), Params.scalar(0, np.int32), Params.scalar(0, np.int32))
"""(multiplier, bias, zero point) of a product stored as its int32 sum."""

_ZERO_F = Params.scalar(0, np.float32)
_ZERO_I = Params.scalar(0, np.int32)
_ONE_F = Params.scalar(1, np.float32)


def int_range(dt: np.dtype[Any]) -> tuple[int, int]:
    info = np.iinfo(dt)
    return int(info.min), int(info.max)


class IntGemm:
    """The compiled variants one node needs; `__call__` runs one product."""

    def __init__(self, ctx: BuildContext, variant: str, out: Any, bias: Any = np.int32) -> None:
        self.variant = variant
        self.out = np.dtype(out)
        self.lo, self.hi = int_range(self.out) if variant == "requant" else (0, 0)
        self.kernel = _gemm_kernel(variant, self.out, np.dtype(bias), ctx.parallel)
        self.zero_bias = _ZERO_F if variant == "scale" else _ZERO_I

    def __call__(
        self,
        a: np.ndarray[Any, Any],
        rows: Rows,
        y: np.ndarray[Any, Any],
        mult: Params = _ONE_F,
        bias: Params | None = None,
        zp: Params = _ZERO_I,
    ) -> None:
        """y (M, N) = store(a (M, K) int16 . the N rows of `rows`); a and y C-contiguous."""
        b = self.zero_bias if bias is None else bias
        work = a.shape[0] * rows.n * max(a.shape[1], 1) // 8
        self.kernel(
            work, a, rows.src, rows.segs, rows.seglen, rows.n, rows.ow, rows.rs, rows.cs, y,
            mult.data, mult.r, mult.c, b.data, b.r, b.c, zp.data, zp.r, zp.c, self.lo, self.hi,
        )  # fmt: skip


_ONE_SEGMENT = np.zeros(1, np.int64)


class Rows:
    """The GEMM's second operand: N rows of K int16 values, each read as `len(segs)` runs of
    `seglen` values at `src[base(j) + segs[g]]`, `base(j) = (j // ow) * rs + (j % ow) * cs`.

    A matrix (N, K) is one run per row (`plain`); a convolution's patches are read in place
    from the channels-last input (a patch row is KH runs of KW*C values, or KH*KW runs of
    C/group values), with no im2col copy."""

    __slots__ = ("cs", "n", "ow", "rs", "seglen", "segs", "src")

    def __init__(
        self,
        src: np.ndarray[Any, Any],
        segs: np.ndarray[Any, Any],
        seglen: int,
        n: int,
        ow: int,
        rs: int,
        cs: int,
    ) -> None:
        self.src, self.segs, self.seglen = src, segs, seglen
        self.n, self.ow, self.rs, self.cs = n, max(ow, 1), rs, cs

    @classmethod
    def plain(cls, bt: np.ndarray[Any, Any]) -> Rows:
        """The rows of a C-contiguous (N, K) int16 matrix."""
        n, k = bt.shape
        return cls(bt.reshape(-1), _ONE_SEGMENT, k, n, n, 0, k)


def _zero(name: str, zp: Any, x: np.ndarray[Any, Any], what: str) -> Any:
    """A zero point as an int16 scalar or array; its type must be the input's."""
    if zp is None:
        return np.int16(0)
    if zp.dtype != x.dtype:
        raise InvalidArgument(
            f"{name}: {what} zero point type {zp.dtype} differs from input type {x.dtype}"
        )
    return zp.astype(np.int16) if zp.ndim and zp.size > 1 else np.int16(zp.reshape(()))


def shifted(
    name: str, x: np.ndarray[Any, Any], zp: Any, what: str, *, axis: int = -1
) -> np.ndarray[Any, Any]:
    """`x - zp` as a C-contiguous int16 array. A 1-D zero point of more than one value runs
    along `axis` (A's rows: -2, B's columns: -1)."""
    z = _zero(name, zp, x, what)
    if isinstance(z, np.ndarray):
        if z.ndim != 1 or x.ndim < 2 or z.shape[0] != x.shape[axis]:
            raise InvalidArgument(
                f"{name}: {what} zero point of shape {z.shape} does not fit input {x.shape}"
            )
        z = z.reshape(-1, 1) if axis == -2 else z
    out = np.empty(x.shape, np.int16)
    np.subtract(x, z, out=out, dtype=np.int16, casting="unsafe")
    return out


def shifted_t(name: str, b: np.ndarray[Any, Any], zp: Any, what: str) -> np.ndarray[Any, Any]:
    """A 2-D (K, N) `b - zp` as the kernels read it: (N, K) int16, C-contiguous."""
    return transposed(shifted(name, b, zp, what))
