"""Depthwise convolution (one input channel per group), bias and activation fused.

A depthwise conv does a few multiply-adds per output (9 for 3x3), so its speed is decided by
how the plane is walked, not by arithmetic: an im2col, a padded copy per row or a second pass
for the bias costs as much as the taps. The kernel walks each plane along a `window.Window`
plan: a 'same' stride-1 conv is one loop over the whole plane with each tap at a fixed offset
and the taps that cross a row edge dropped by a select; strided and other convs copy the plane
once into a padded buffer split by stride phase, run one loop over all the output rows in which
every tap reads consecutive values, and copy the rows out (a loop per short row would run
mostly scalar). A short stride-1 plane (a 5x5 window over the 2-3 rows of an OCR model's
feature maps, where most window rows are padding) takes the padded layout too, and each kernel
row adds its taps only over the output rows it reads inside the image (`_row_passes`): 1.2x on
those convs, 4% of a text-direction classifier's run.

The kernel text is generated per (kernel size, activation, dtype): taps are unrolled into one
expression whose weights stay in registers, and the bias and activation are applied as the
output is written. Kernel sizes other than the common ones (`UNROLLED`) share one generic text
per activation and dtype that loops over the taps.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import types

from .. import cache
from ..codegen import numba_array
from ..registry import SizedKernel
from ..vecmath import contracts
from .epilogue import CTOR, activation_lines
from .window import copy_lines, geo_lines, window_arg_types

__all__ = ["UNROLLED", "depthwise_kernel"]

UNROLLED = frozenset({(3, 3), (5, 5), (2, 2), (1, 3), (1, 5), (3, 1), (5, 1), (2, 1), (1, 2)})
"""The kernel sizes whose taps get unrolled: those small models use. Each compiles its own text
(about a second, once: the compiled code is cached on disk); any other size runs the generic
text, one per activation and dtype, whose loop over taps costs 1.5-2x at 3x3."""

_HEAD = """\
def _depthwise(x, w, b, y, offs, cols, lo, hi, geo, chunks, a0_, a1_):
    T = {ctor}
    zero = T(0)
    one = T(1)
    a0 = T(a0_)
    a1 = T(a1_)
{geo}    n_, c_, hw = x.shape
    m_ = w.shape[0]
    mg = m_ // c_
    planes = n_ * m_
{consts}    for ch in prange(chunks):
        buf = np.zeros(blen, x.dtype)
        acc = np.empty(0 if flat else rows * rstep, x.dtype)  # padded: all rows, then copied out
        last = -1
        for q in range(ch * planes // chunks, (ch + 1) * planes // chunks):
            n = q // m_
            m = q - n * m_
            c = m // mg
            src = x[n, c]
            if not direct:
                if n * c_ + c != last:
                    last = n * c_ + c
{copy}                src = buf
            wm = w[m]
            bv = b[m]
            yp = y[n, m]
{body}"""


def _unrolled(kh: int, kw: int) -> tuple[str, str]:
    taps = kh * kw
    consts = "".join(f"    lo{j} = lo[{j}]\n    hi{j} = hi[{j}]\n" for j in range(kw))
    consts += "".join(f"    o{t} = offs[{t}]\n" for t in range(taps))
    consts += _row_pass_consts(kh, kw)
    lines = [f"            w{t} = wm[{t}]" for t in range(taps)]
    # flat: one view per kernel row, the columns at constant offsets from it
    lines.append("            if flat:")
    lines += [f"                r{ki} = src[o{ki * kw}:]" for ki in range(kh)]
    lines.append("                for j in range(rlen):")
    lines.append("                    cj = cols[j]")
    lines.append("                    v = bv")
    for kj in range(kw):
        terms = " + ".join(f"w{ki * kw + kj} * r{ki}[j + {kj}]" for ki in range(kh))
        lines.append(f"                    s = {terms}")
        lines.append(f"                    v += s if cj >= lo{kj} and cj < hi{kj} else zero")
    lines.append("{act20}                    yp[j] = v")
    # padded: one view per tap; all the rows as one loop into `acc` (rows shorter than a vector
    # loop would run scalar), then the rows copied out
    terms = " + ".join(f"w{t} * t{t}[j]" for t in range(taps))
    lines.append("            elif rstep == wp and short:")
    lines += _row_passes(kh, kw)
    lines.append("            elif rstep == wp:")
    lines += [f"                t{t} = src[o{t}:]" for t in range(taps)]
    lines.append("                for j in range((rows - 1) * rstep + rlen):")
    lines.append(f"                    v = bv + {terms}")
    lines.append("{act20}                    acc[j] = v")
    lines.append("                for r in range(rows):")
    lines.append("                    ar = acc[r * rstep : r * rstep + rlen]")
    lines.append("                    yo = yp[r * rlen : r * rlen + rlen]")
    lines.append("                    for j in range(rlen):")
    lines.append("                        yo[j] = ar[j]")
    # the input itself with a row stride: one loop per row
    lines.append("            else:")
    lines.append("                for r in range(rows):")
    lines.append("                    base = r * rstep")
    lines += [f"                    t{t} = src[base + o{t}:]" for t in range(taps)]
    lines.append("                    yo = yp[r * rlen : r * rlen + rlen]")
    lines.append("                    for j in range(rlen):")
    lines.append(f"                        v = bv + {terms}")
    lines.append("{act24}                        yo[j] = v")
    return consts, "\n".join(lines) + "\n"


def _row_pass_consts(kh: int, kw: int) -> str:
    """Generated statements for `_row_passes`, in a plane the window planned as `short` (a
    stride-1 padded layout): kernel row ki reads padded row r + d{ki} for output row r (d{ki} =
    ki * dh, from its offset), inside the image for output rows [ra{ki}, rb{ki})."""
    lines = []
    for ki in range(kh):
        lines.append(f"    d{ki} = o{ki * kw} // wp if short else 0")
        lines.append(f"    ra{ki} = min(rows, max(0, pt - d{ki}))")
        lines.append(f"    rb{ki} = max(ra{ki}, min(rows, pt + in_h - d{ki}))")
    lines += [f"    uo{t} = np.uint64(o{t})" for t in range(kh * kw)]
    return "".join(f"{line}\n" for line in lines)


def _row_passes(kh: int, kw: int) -> list[str]:
    """Generated lines for a short plane in the stride-1 padded layout: each kernel row adds
    its taps into `acc` over the output rows where it reads inside the image (one loop over
    those rows, gutters included: the padded rows' zeros need no select), then the rows are
    written out with the activation. Positions are unsigned, not views (a view per kernel row
    took and dropped a reference count)."""
    lines = [
        "                for uj in range(np.uint64((rows - 1) * rstep + rlen)):",
        "                    acc[uj] = bv",
    ]
    for ki in range(kh):
        terms = " + ".join(f"w{ki * kw + kj} * src[uo{ki * kw + kj} + ua + uj]" for kj in range(kw))
        lines += [
            f"                if rb{ki} > ra{ki}:",
            f"                    ua = np.uint64(ra{ki} * rstep)",
            f"                    span = (rb{ki} - ra{ki} - 1) * rstep + rlen",
            "                    for uj in range(np.uint64(span)):",
            f"                        acc[ua + uj] += {terms}",
        ]
    lines += [
        "                for r in range(rows):",
        "                    ua = np.uint64(r * rstep)",
        "                    uy = np.uint64(r * rlen)",
        "                    for uj in range(np.uint64(rlen)):",
        "                        v = acc[ua + uj]",
        "{act24}                        yp[uy + uj] = v",
    ]
    return lines


_GENERIC = """\
            racc = np.empty(rlen, x.dtype)
            for r in range(rows):
                base = r * rstep
                for j in range(rlen):
                    racc[j] = bv
                for t in range(taps):
                    wt = wm[t]
                    tt = src[base + offs[t]:]
                    if flat:
                        kj = t % kw
                        lt = lo[kj]
                        ht = hi[kj]
                        for j in range(rlen):
                            cj = cols[j]
                            racc[j] += wt * tt[j] if cj >= lt and cj < ht else zero
                    else:
                        for j in range(rlen):
                            racc[j] += wt * tt[j]
                yo = yp[r * rlen : r * rlen + rlen]
                for j in range(rlen):
                    v = racc[j]
{act20}                    yo[j] = v
"""


def _source(kh: int, kw: int, dtype: np.dtype[Any], act: str) -> str:
    if (kh, kw) in UNROLLED:
        consts, body = _unrolled(kh, kw)
    else:
        consts, body = "    taps = offs.shape[0]\n    kw = lo.shape[0]\n", _GENERIC
    body = body.replace("{act20}", activation_lines(dtype, act, 20))
    body = body.replace("{act24}", activation_lines(dtype, act, 24))
    return _HEAD.format(
        ctor=CTOR[dtype.name],
        geo=geo_lines(4),
        copy=copy_lines(20),
        consts=consts,
        body=body,
    )


_KERNELS: dict[tuple[Any, ...], SizedKernel] = {}


def depthwise_kernel(
    kernel: tuple[int, int], dtype: np.dtype[Any], act: str, parallel: bool
) -> SizedKernel:
    """The compiled kernel for `kernel` (KH, KW) taps, `dtype` and activation `act`:
    `k(work, x3, w2, b, y3, *window.args(), chunks, a0, a1)` with x3 (N, C, H*W), w2 (M, KH*KW),
    b (M,), y3 (N, M, OH*OW), all C-contiguous; `chunks` splits the planes among threads."""
    kh, kw = kernel
    shape = (kh, kw) if (kh, kw) in UNROLLED else (0, 0)
    key = (shape, dtype.name, act, parallel)
    kern = _KERNELS.get(key)
    if kern is None:
        text = _source(kh, kw, dtype, act)
        fn = cache.load_source(text, "depthwise")._depthwise
        sig = types.void(
            numba_array(dtype, 3, readonly=True, layout="C"),
            numba_array(dtype, 2, readonly=True, layout="C"),
            numba_array(dtype, 1, readonly=True, layout="C"),
            numba_array(dtype, 3, readonly=False, layout="C"),
            *window_arg_types(),
            types.int64,
            types.float64,
            types.float64,
        )
        # the float32 Sigmoid, Swish and Tanh (`vecmath`) need their FMAs: onnxruntime's to the bit
        kern = _KERNELS[key] = SizedKernel(fn, [sig], parallel, contract=contracts(text))
    cache.note_used(kern.serial, kern.parallel)  # memoized: the session still uses it
    return kern
