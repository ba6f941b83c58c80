"""One parallel kernel for a threaded im2col convolution: each band of output rows gathered,
multiplied and finished by one worker.

With threads, the banded im2col path (`conv._gemm_conv`) ran three parallel steps per band:
the gather, the product (`pool_matmul`) and the epilogue, each one a launch and a barrier on
numba's workers for a fraction of a millisecond of work, so a 2-thread conv at ResNet's 56x56
stage took 0.8x of its 1-thread time. Here a `prange` over the bands and groups does all three
for a band of one group in one iteration, on one worker, with its columns still in that core's
cache (a grouped conv of one band still has an item per group to share): the gather
(`im2col.tile_lines`, serial), numpy's BLAS GEMM on one thread (`cblas.gemm_call`), then the
bias, residual Z and activation (`epilogue.activation_lines`). Each worker gathers into its
own row of a scratch array (`numba.get_thread_id`). A band of at most
`thin_product.THIN_MAX_COLUMNS` pixels (a conv with a few output pixels, or an image's last
band) is gathered a pixel per row instead (`_PIXELS`) and multiplied by `thin_rows`: BLAS packs
the weights on every call, and the band gather's loop per (channel, tap) for a value or two
cost more than the product (an audio model's 64 -> 64 conv to one frame 8.3 -> 7.4 us a
session run, its STFT conv 258 x 256 over 3 frames 15.5 -> 11.4).

A float32 kernel built with `tile` multiplies by the register-blocked tile of `sgemm_tile`
instead of BLAS (thin products: few output channels, short K), in the same place; a plan that
reads its input in place as one output row (a text CNN's 1-D convs without pads) skips the
gather there, the tile packing B's rows straight from the image (`_ONE_ROW`: 64 -> 100 over
128 steps, 30.4 -> 28.5 us at width 3, 47 -> 43 at width 5). Compiled serial, it is also
the 1-thread conv's whole run (`conv._tiled_conv`; bound to a plan by `serial_call`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numba import types

from .. import cache
from ..codegen import numba_array
from ..vecmath import contracts
from . import sgemm_tile, thin_product
from .epilogue import CTOR, band_epilogue_fields
from .im2col import tile_lines
from .thin_product import THIN_MAX_COLUMNS
from .window import GEO, copy_lines, geo_lines, window_arg_types

__all__ = ["BandKernel"]

_IMPORTS = (
    "import numba\n"
    "from turnout_numba.cblas import gemm_call\n"
    "from turnout_numba.kernels.thin_product import thin_product, thin_rows\n"
)

_HEAD = """\
def _conv_bands(image, w3, y2, scratch, bias, full, offs, cols, lo, hi, geo, band,
                address, ilp64, p0, p1{padded}):
    T = {ctor}
    zero = T(0)
    one = T(1)
    a0 = T(p0)
    a1 = T(p1)
{geo}{pad}    group = w3.shape[0]
    mg = w3.shape[1]
    krows = w3.shape[2]
    cg = image.shape[0] // group
    hw = y2.shape[1]
    ldy = y2.strides[0] // y2.itemsize
    count = (hw + band - 1) // band
{setup}    for q in prange(count * group):
        g = q % group
        a = (q // group) * band
        b = min(hw, a + band)
        width = b - a
{gather}"""

_GATHER_BLAS = """\
        planes = src_image[g * cg : g * cg + cg]
        if width <= {thin}:
            colt = scratch[{tid}, : krows * width].reshape((width, krows))
{pixels}            thin_rows(w3[g], colt, y2[g * mg : g * mg + mg, a:b], zero)
        else:
            col = scratch[{tid}, : krows * width].reshape((krows, width))
{tile}            gemm_call(address, ilp64, mg, width, krows, w3[g], krows, col, width,
                      y2[g * mg :, a:], ldy, 0.0)
"""
"""BLAS's band: a band of a few pixels (`THIN_MAX_COLUMNS`) gathered a pixel per row
(`_PIXELS`) for `thin_rows`; a wider one im2col'd for BLAS's GEMM."""

_PIXELS = """\
taps = offs.shape[0]
kw = lo.shape[0]
for j in range(width):
    qp = a + j
    pix = colt[j]
    if flat:
        cq = cols[qp]
        for c in range(cg):
            for t in range(taps):
                kj = t % kw
                v = planes[c, offs[t] + qp]
                pix[c * taps + t] = v if cq >= lo[kj] and cq < hi[kj] else zero
    else:
        r = qp // rlen
        base = r * rstep + qp - r * rlen
        for c in range(cg):
            for t in range(taps):
                pix[c * taps + t] = planes[c, base + offs[t]]
"""
"""The columns of pixels [a, b) as rows of `colt`, gathered pixel by pixel: where a band has a
few pixels, the band gather's loops over each (channel, tap) for one to a few values cost more
than the product (a 64 -> 64 conv to one output pixel: 2 of its 3 us)."""

_GATHER_TILE = """\
        planes = src_image[g * cg : g * cg + cg]
        if one_row:
            w3[g].turnout_sgemm_rows(krows, planes, roff, a, y2[g * mg :, a:], ldy, mg, width,
                                     krows)
        else:
            col = scratch[{tid}, : krows * width].reshape((krows, width))
{tile}            w3[g].turnout_sgemm(krows, col, width, y2[g * mg :, a:], ldy, mg, width, krows)
"""
"""The tile's band: a plan that reads the input itself as one output row (a 1-D conv without
pads at stride 1: `one_row`) packs B's rows straight from the image, row (c, t) from
`roff[c * taps + t]` (`turnout_sgemm_rows`); any other gathers its im2col panel first."""

_ONE_ROW = """\
    one_row = direct == 1 and flat == 0 and rows == 1
    roff = np.empty(krows if one_row else 0, np.int64)
    if one_row:
        taps = offs.shape[0]
        for c in range(cg):
            for t in range(taps):
                roff[c * taps + t] = c * image.shape[1] + offs[t]
"""
"""The tile kernel's setup: whether its bands read B's rows in place (`_GATHER_TILE`), and
their offsets in a group's planes (each band adds its first pixel)."""

_PAD_FIRST = """\
    if blen > 0:
        if padded.shape[0] < image.shape[0] or padded.shape[1] < blen:
            raise ValueError("the padded buffer is smaller than the plan's")
        for c in range(image.shape[0]):
            src = image[c]
            buf = padded[c]
{copy}    src_image = padded if blen > 0 else image
"""
"""A serial kernel's padding pass: the image into the plan's padded buffer, in the same call
(the separate pad kernel's dispatch was a tenth of a small conv)."""

_POINTWISE = """\
        ldx = image.strides[0] // image.itemsize
        if width <= {thin}:
            thin_product(w3[g], image[g * cg : g * cg + cg, a:b], y2[g * mg : g * mg + mg, a:b],
                         zero)
        else:
            gemm_call(address, ilp64, mg, width, krows, w3[g], krows, image[g * cg :, a:], ldx,
                      y2[g * mg :, a:], ldy, 0.0)
"""

_POINTWISE_TILE = """\
        ldx = image.strides[0] // image.itemsize
        w3[g].turnout_sgemm(krows, image[g * cg :, a:], ldx, y2[g * mg :, a:], ldy, mg, width,
                            krows)
"""

_EPILOGUE = """\
        for j in range(g * mg, g * mg + mg):
            yr = y2[j, a:b]
{bias}{full}            for k in range(width):
                v = yr[k]{terms}
{act}                yr[k] = v
"""


def _source(
    dtype: np.dtype[Any],
    act: str,
    bias: bool,
    full: bool,
    gather: bool,
    parallel: bool,
    tile: bool,
) -> str:
    # a serial kernel gathers into the scratch's one row: asking numba for the thread id
    # would start its thread pool, which a 1-thread session never needs
    tid = "numba.get_thread_id()" if parallel else "0"
    setup = ""
    if gather and tile:
        steps = _GATHER_TILE.format(tid=tid, tile=tile_lines(12, "range", inline=False))
        setup = _ONE_ROW
    elif gather:
        pixels = "".join(f"{' ' * 12}{line}\n" for line in _PIXELS.splitlines())
        steps = _GATHER_BLAS.format(
            tid=tid, pixels=pixels, tile=tile_lines(12, "range", inline=False), thin="{thin}"
        )
    else:
        steps = _POINTWISE_TILE if tile else _POINTWISE
    # in the function's own text (what the cache compiles and checks): a kernel cached with
    # one tile or thin product is never loaded for another
    if tile:
        steps = f"        # {sgemm_tile.TAG}\n" + steps
    else:
        steps = f"        # {thin_product.TAG}\n" + steps.replace("{thin}", str(THIN_MAX_COLUMNS))
    pad = "    src_image = image\n"  # the caller padded it (or the plan reads it directly)
    if gather and not parallel:
        pad = _PAD_FIRST.format(copy=copy_lines(12))
    text = _HEAD.format(
        setup=setup,
        ctor=CTOR[dtype.name],
        geo=geo_lines(4) if gather else "",
        gather=steps,
        pad=pad if gather else "",
        padded="" if parallel else ", padded",
    )
    if bias or full or act not in ("", "Identity"):
        row = "full[j, a:b]" if full else None
        text += _EPILOGUE.format(**band_epilogue_fields(dtype, act, bias, row, (12, 12, 16)))
    return _IMPORTS + "\n\n" + text


_NO_WINDOW = (
    np.zeros(1, np.int64),
    np.zeros(1, np.int32),
    np.zeros(1, np.int32),
    np.zeros(1, np.int32),
    np.zeros(len(GEO), np.int64),
)
"""The window arguments of a pointwise band kernel, which reads none of them."""


class BandKernel:
    """The compiled band kernel of one (dtype, activation, bias?, residual?, gather?,
    parallel?, tile?) combination. Without `gather` (a pointwise conv) the product reads the image's
    band of columns in place, as the unthreaded path does. Serial (`parallel=False`), the
    bands run one after another on the caller's thread, gathering into scratch row 0, and the
    kernel pads the image itself into the `padded` buffer it is given: a small conv's whole
    run in one call (`conv.SMALL_CONV_COLUMNS`). With `tile` (float32, where
    `sgemm_tile.AVAILABLE`) the products run on the register tile instead of BLAS."""

    def __init__(
        self,
        dtype: np.dtype[Any],
        activation: tuple[str, float, float],
        bias: bool,
        full: bool,
        gather: bool = True,
        parallel: bool = True,
        tile: bool = False,
    ) -> None:
        if tile and not (sgemm_tile.AVAILABLE and dtype == np.float32):
            raise ValueError(f"no register tile for {dtype} on this host")
        self.dtype = dtype
        self.activation = activation
        self.parallel = parallel
        self.tile = tile
        text = _source(dtype, activation[0], bias, full, gather, parallel, tile)
        fn = cache.load_source(text, "conv_bands")._conv_bands
        ro1 = numba_array(dtype, 1, readonly=True, layout="C")
        ro2 = numba_array(dtype, 2, readonly=True, layout="C")
        i64 = types.int64
        sig = types.void(
            ro2,
            numba_array(dtype, 3, readonly=True, layout="C"),
            numba_array(dtype, 2, readonly=False, layout="C"),
            numba_array(dtype, 2, readonly=False, layout="C"),
            ro1,
            ro2,
            *window_arg_types(),
            i64,
            i64,
            types.boolean,
            types.float64,
            types.float64,
            *([] if parallel else [numba_array(dtype, 2, readonly=False, layout="C")]),
        )
        self._kern = cache.jit(
            fn, [sig], parallel=parallel, imports=_IMPORTS, contract=contracts(text)
        )
        self._none1 = np.zeros(1, dtype)
        self._none2 = np.zeros((1, 1), dtype)

    def __call__(
        self,
        image: Any,
        w3: Any,
        y2: Any,
        scratch: Any,
        bias: Any,
        full: Any,
        window_args: tuple[Any, ...] | None,
        band: int,
        address: int,
        ilp64: bool,
        padded: Any = None,
    ) -> None:
        """Convolve one image: `image` (C, L) is the padded planes (or the input, for a direct
        plan or a pointwise conv), `w3` (group, M/group, C/group*KH*KW), `y2` (M, OH*OW) the
        output; `scratch` has a row of at least (C/group*KH*KW) * band elements per numba
        thread. A pointwise kernel takes None for both `scratch` and `window_args`. A serial
        kernel pads `image` into `padded` (C, blen) first when the plan pads (None: it reads
        `image` as it is); a parallel kernel ignores it (its caller pads)."""
        _, p0, p1 = self.activation
        pad = () if self.parallel else (self._none2 if padded is None else padded,)
        self._kern(
            image,
            w3,
            y2,
            self._none2 if scratch is None else scratch,
            self._none1 if bias is None else bias,
            self._none2 if full is None else full,
            *(_NO_WINDOW if window_args is None else window_args),
            band,
            address,
            ilp64,
            p0,
            p1,
            *pad,
        )

    def serial_call(
        self, window_args: tuple[Any, ...] | None, band: int, address: int, ilp64: bool
    ) -> Callable[[Any, Any, Any, Any, Any, Any, Any], None]:
        """This serial kernel with one plan's fixed arguments bound (as `__call__` takes them):
        the returned function takes (image, w3, y2, scratch, bias, full, padded), each of
        the last four may be None. A small conv's run calls it directly: its few microseconds
        of kernel had about as much Python around them."""
        if self.parallel:
            raise ValueError("serial_call binds a serial band kernel")
        kern = self._kern
        _, p0, p1 = self.activation
        window = _NO_WINDOW if window_args is None else window_args
        tail = (*window, band, address, ilp64, p0, p1)
        none1, none2 = self._none1, self._none2

        def call(
            image: Any, w3: Any, y2: Any, scratch: Any, bias: Any, full: Any, padded: Any
        ) -> None:
            kern(
                image,
                w3,
                y2,
                none2 if scratch is None else scratch,
                none1 if bias is None else bias,
                none2 if full is None else full,
                *tail,
                none2 if padded is None else padded,
            )

        return call
