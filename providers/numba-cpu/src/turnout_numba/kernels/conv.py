"""Conv and FusedConv (ai.turnout) for 1-D and 2-D float inputs.

The path is chosen from the weight's shape and `group` when the session is created, and
refined on the first run at each input shape:
- depthwise (one input channel per group, at most `DEPTHWISE_MAX_MULTIPLIER` outputs each):
  a direct loop with the taps unrolled and the bias and activation applied as the output is
  written (`depthwise.py`); a GEMM per channel would be a 1-row matrix product;
- pointwise (1x1 kernel, stride 1, no padding): the input image already is the column matrix,
  so each group is one BLAS GEMM straight into the output;
- otherwise im2col (`im2col.py`): the image is padded once along the same `window.Window`
  plan as the depthwise kernel, then per group the patches of a band of output rows are laid
  out as (C/group*KH*KW, rows*OW) and a BLAS GEMM writes that band of the group's output
  channels in place, while the band's columns are still in cache;
- float32 3x3 stride-1 convs with enough channels and pixels, on AVX-512 hosts: Winograd
  F(2x2, 3x3), its 16 products a band on the register tile (`winograd.py`);
- stride-1 convs with enough input channels and wide enough outputs: shifted products over the
  padded image, without im2col (`conv_shift.py`): one GEMM per tap, or with the register tile
  (`_shift_tile`) one product per band over all the taps;
- with threads, im2col and pointwise convs whose image outweighs their weights: one parallel
  kernel per image, a band of outputs per worker (`conv_bands.py`);
- small convs (`SMALL_CONV_COLUMNS`, im2col or pointwise): the band kernel of `conv_bands`
  compiled serial, the gather, the product and the epilogue in one call (after the padding
  pass, when the plan pads); the CPU provider's numpy kernel where numpy's BLAS exports no
  GEMM to call; with threads, one of at least `GROUP_SPLIT_MACS` runs the parallel band
  kernel: grouped, the whole image as one band, its groups shared between the threads;
  ungrouped, a band of its pixels a thread (`_split_band`);
- float32 products thin enough for the register tile of `sgemm_tile` (`_tile_applies`; on
  AVX-512 hosts):
  the band kernels multiply with the tile instead of BLAS, at 1 thread the im2col and
  pointwise convs run as one call of the serial band kernel (`_tiled_conv`), and with threads
  an unfused conv's products are split between them on the tile (`pool_matmul`).
Outside the depthwise kernel, the bias, FusedConv's residual Z and its activation run after the
GEMMs in one pass (`epilogue`). The window geometry (pads, auto_pad, output size) is the CPU
provider's (`conv_geometry`), planned once per input shape. 3-D convolution and other dtypes
stay with the numpy kernel.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numba
import numpy as np

from turnout.graph.errors import InvalidArgument
from turnout.sdk.blas_threads import run_threads
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.activations import activation_of
from turnout.sdk.semantics.geometry import (
    check_conv_channels,
    conv_geometry,
    conv_kernel_shape,
    spatial_attrs,
)

from ..cblas import Gemm, find_gemm
from ..registry import (
    SERIAL_WORK,
    BuildContext,
    float_inputs_applies,
    numba_kernel,
    numpy_kernel,
)
from . import sgemm_tile
from .conv_bands import BandKernel
from .conv_shift import (
    SHIFT_MAX_WASTE,
    SHIFT_MIN_CHANNELS,
    ShiftGeometry,
    ShiftKernel,
    phase_width,
    shift_rows,
)
from .depthwise import depthwise_kernel
from .epilogue import Epilogue
from .gemm import present
from .im2col import MIN_TILE, fused_band, pad_kernel, tile_kernel, tile_rows
from .pool_matmul import POOL_SERIAL_MACS, pool_matmul, prepare_pool_matmul, prepare_pool_tile
from .window import GEO, Window, plan_window
from .winograd import Winograd, winograd_applies

__all__ = [
    "DEPTHWISE_MAX_MULTIPLIER",
    "FUSED_MIN_COLUMNS",
    "GROUP_SPLIT_MACS",
    "SMALL_CONV_COLUMNS",
    "SPLIT_MIN_PIXELS",
    "TILE_MAX_K",
    "TILE_MIN_COLUMNS",
    "TILE_MIN_LANES",
    "TILE_MIN_MACS",
    "TILE_MIN_ROWS",
    "TILE_SHIFT_MAX_WASTE",
]

DEPTHWISE_MAX_MULTIPLIER = 4
"""A conv with one input channel per group and at most this many outputs per group runs the
direct depthwise kernel; with more (a 1-channel audio front end with 258 filters) the outputs
share each patch, which a GEMM does better."""

SMALL_CONV_COLUMNS = 1 << 15
"""A conv whose column matrix (C/group*KH*KW by OH*OW) has at most this many elements runs
its whole image as one call of the serial band kernel (`_small_conv`): a few microseconds of
Python per call where the gather, product and epilogue calls of `_gemm_conv` cost about 15 us
more, and the CPU provider's numpy kernel (a strided copy, a matmul, a bias add and an
activation) 3-8 us more (a VAD's 1-D convs of 3 frames, 1 thread: 129->128 kernel 3
11.1 -> 6.5 us, 128->1 pointwise 4.9 -> 1.3). Above it (at 256 wide, 98K elements, numpy's
kernel took 486 us and the banded GEMM path 313) the image is cut into cache-sized bands."""

FUSED_MIN_COLUMNS = 2
"""With threads, a conv runs as one fused kernel over bands of output pixels (`conv_bands`)
only with at least this many output pixels per output channel of a group. Each band packs all
of the group's weights, so where those outweigh the image (ResNet's 512->512 at 7x7,
SqueezeNet's 512->1000 1x1 at 13x13) one product split by output channels
(`pool_matmul`) does better: 1.6-1.8 against 1.9-2.1 ms and 0.9 against 1.3-1.4 at 2
threads."""


GROUP_SPLIT_MACS = 1 << 20
"""With threads, a small conv (`SMALL_CONV_COLUMNS`, under `POOL_SERIAL_MACS`) of at least
this many multiply-adds shares its groups, or its pixels (`SPLIT_MIN_PIXELS`), between the
threads on the parallel band kernel instead of running whole on the caller's: a parallel
launch costs about 10 us on the 2-core EPYC (TBB) when the worker sleeps, 2-3 us when it has
just run, a 1 M product about 30 us. ShuffleNet's group-4 pointwise convs (3.6 M, 136 -> 136 at
28x28) ran 137 us at 1 thread and as long at 2, where onnxruntime's took 67; a text CNN's
64 -> 100 1-D conv (2.4 M) 31.8 -> 22.8 us at 2 threads, its pixels split (onnxruntime 18)."""


SPLIT_MIN_PIXELS = 32
"""With threads, a small conv of one group shares its pixels between the threads only with at
least this many a thread (`TILE_MIN_COLUMNS`: a band still multiplies on the register tile).
A text CNN's 64 -> 100 1-D convs over 128 steps (2.4-4 M multiply-adds) ran serial at 2
threads while onnxruntime's halved."""


TILE_MAX_K = 9216
"""The longest inner dimension (C/group*KH*KW) whose products run on the register tile
(`sgemm_tile`) rather than BLAS. On the zoo's conv products (1 thread, `python -m
benchmarks.conv_tile products`, the 2-core Xeon) the tile ran 1.02-1.5x OpenBLAS's GMAC/s at
every K from 16 to 4608 (M=32 K=144 N=1520: 78 against 61); on the 2-core EPYC, products
alone, two interleaved runs: K 6912 and 9216 1.01-1.12x (M=256 N=196 K=9216: 47.6 against
44.4), 13824 even (0.99-1.00x), 18432 0.96-0.97x. Tests set it to force the tile (or 0 to
keep BLAS)."""

TILE_MIN_ROWS = 8
"""The fewest output channels per group that run on the register tile: a tile computes
`sgemm_tile.ROWS` rows whatever M is, so fewer waste most of it."""

TILE_MIN_COLUMNS = 32
"""The fewest output pixels a product (one call: a band) runs on the register tile with: its
columns are whole vectors, so a narrower product wastes lanes (a CRNN's convs of 3-12 pixels
ran 0.5-0.9x OpenBLAS; 24 pixels 0.85-0.92; 100 pixels and up, 1.1x and more)."""

TILE_MIN_MACS = 1_000_000
"""Products (one call) of at most this many multiply-adds keep BLAS: numpy's OpenBLAS (the
SkylakeX kernels, which AMD's AVX-512 cores also get) multiplies them with its small-matrix
kernel, unpacked, up to exactly 100^3 MACs, and that kernel beat the tile on the 2-core EPYC
(1 thread, products alone): 64x64x244 (999,424 MACs) 56 GMAC/s against the tile's 51,
64x64x245 46 against 51. Shufflenet's group-4 pointwise convs (products of 0.2-0.9M MACs, one-
node sessions) ran 0.71-0.87x BLAS's speed on the tile, 0.97-1.02x (noise) without it."""

TILE_MIN_LANES = 16
"""The narrowest tile that convs take: AVX-512's. The 8-lane AVX2 tile ran even with
OpenBLAS's Haswell kernels (0.87-1.09x on yolo_det_like's products, both on 256-bit vectors
on the AVX-512 Xeon, OPENBLAS_CORETYPE=Haswell), so an AVX2 host keeps BLAS until the tile
is measured faster there."""

TILE_SHIFT_MAX_WASTE = 0.072
"""`conv_shift.SHIFT_MAX_WASTE` where the im2col products would run on the register tile.
On the Xeon, im2col on the tile against shifted products on BLAS (1 thread, one-node
sessions, 3x3): 27 and 20 wide (7.4% and 10% waste) 0.34 against 0.45 and 0.80 against
0.88 ms; 28 wide (7.1%) even or 3% slower, so it stays shifted. With the shifted products on
the tile too (`_shift_tile`; the EPYC, 1 thread, interleaved): 28 wide 2.37 against 2.52 ms
(ResNet's 128 -> 128), 0.64 against 0.73 (DenseNet's 128 -> 32); 20 wide 1.26 against 1.18
(yolo's 128 -> 128), 13-14 wide 2-15% slower (squeezenet, inception_v2), so the limit
stands."""


def _tile_applies(dt: np.dtype[Any], mg: int, krows: int, columns: int) -> bool:
    """Whether a conv's products (mg output channels a group, inner dimension krows, `columns`
    output pixels a call: the band, `_bands`) run on the register tile: float32 on a host with
    the tile, within the measured shape rule."""
    return (
        sgemm_tile.AVAILABLE
        and sgemm_tile.LANES >= TILE_MIN_LANES
        and dt == np.float32
        and mg >= TILE_MIN_ROWS
        and 0 < krows <= TILE_MAX_K
        and columns >= TILE_MIN_COLUMNS
        and mg * krows * columns > TILE_MIN_MACS
    )


def _bands(
    krows: int, m: int, mg: int, itemsize: int, out: tuple[int, int], parallel: bool
) -> tuple[int, int]:
    """(band, fused) of an im2col or pointwise conv: the output pixels a product takes
    (whole output rows, `im2col.tile_rows`; with threads big enough to be split between them,
    `pool_matmul.POOL_SERIAL_MACS`, as the whole image's was), and with threads the pixels a
    band of the fused kernel (`conv_bands`) takes, 0 where it is not used."""
    oh, ow = out
    pixel = (krows + m) * itemsize
    fused = 0
    if parallel and oh * ow >= FUSED_MIN_COLUMNS * mg:
        # numba's count is this thread's and the session's (BLAS's is process-wide)
        fused = fused_band(pixel, ow, oh, numba.get_num_threads())
    least = MIN_TILE
    if parallel and not _unsplit(krows, mg, out, fused):
        least = max(MIN_TILE, -(-2 * POOL_SERIAL_MACS // max(1, mg * krows)))
    band = tile_rows(pixel, ow, oh, least) * ow
    return band, fused


def _unsplit(krows: int, mg: int, out: tuple[int, int], fused: int) -> bool:
    """With threads, whether an im2col or pointwise conv's products run whole on the caller's
    thread: no fused bands (`fused_band`: fewer bands of whole rows than threads, as a 1-D
    conv's one row has) and a group's product over the image under `POOL_SERIAL_MACS`, which
    `pool_matmul` does not split. Such a conv multiplies as without threads: its bands and
    the register tile (a text CNN's 1-D conv took BLAS at 2 threads, 61 against 46 us)."""
    return not fused and mg * krows * out[0] * out[1] < POOL_SERIAL_MACS


def _conv_applies(kn: KernelNode) -> str | None:
    why = float_inputs_applies(kn, 2, narrow=False)
    if why:
        return why
    ranks = {len(i.shape) for i in kn.inputs[:2] if i is not None and i.shape is not None}
    if not ranks:
        return "input ranks unknown at session creation"
    if not ranks <= {3, 4}:
        return f"{kn.op_type} of rank {max(ranks)}: only 1-D and 2-D are compiled by numba"
    if kn.op_type == "FusedConv":
        try:
            activation_of(kn)
        except InvalidArgument as e:
            return str(e)
    return None


@dataclass(frozen=True)
class _Plan:
    """Everything a run at one (X shape, W shape) needs, computed on its first run."""

    kind: str  # "dw", "pw", "gemm", "shift", "small", "wino" or "numpy"
    final: tuple[int, ...]  # the output shape
    y3: tuple[int, int, int]  # (N, M, OH*OW): the output as the kernels write it
    win: Window | None
    work: int
    chunks: int
    band: int  # output pixels per GEMM (whole output rows; `im2col.tile_rows`)
    fused: int  # with threads, output pixels per band of `conv_bands` (0: not used)
    shift: ShiftGeometry | None  # the "shift" kind's layout (`conv_shift`)
    tile: bool  # the band kernel multiplies with the register tile (`sgemm_tile`)
    serial: _SerialRun | None = None  # small and 1-thread tiled convs: the bound kernel
    one_image: Any = None  # a small conv of one image: its whole run (`_one_image_run`)
    split: bool = False  # with threads, unfused tiled products split (`pool_matmul`)
    pads_before: tuple[int, int] = (0, 0)  # "wino": the zeros before the input's rows, columns
    pads: list[Any] = field(default_factory=list)  # padded-image buffers, zero padding kept
    scratch: list[Any] = field(default_factory=list)  # `conv_bands` / `conv_shift` buffers


def _build_conv(kn: KernelNode, ctx: BuildContext) -> KernelFn:
    dt = kn.inputs[0].dtype
    fused = kn.op_type == "FusedConv"
    act = activation_of(kn) if fused else ("", 0.0, 0.0)
    has_z = fused and present(kn, 3)
    group = int(kn.attr("group", 1))
    name = kn.name
    w_info = kn.inputs[1]
    w_shape = tuple(w_info.shape) if w_info is not None and w_info.shape is not None else None
    known = w_shape is not None and all(isinstance(d, int) for d in w_shape)
    depthwise = None
    if known and w_shape is not None and w_shape[1] == 1 and len(w_shape) in (3, 4):
        mg = w_shape[0] // group if group > 0 else 0
        if 0 < mg <= DEPTHWISE_MAX_MULTIPLIER:
            k2 = (1, w_shape[2]) if len(w_shape) == 3 else (w_shape[2], w_shape[3])
            # with a residual Z the activation comes after the sum: in the epilogue
            depthwise = depthwise_kernel(k2, dt, "" if has_z else act[0], ctx.parallel)
    # one im2col per dtype, shared by all nodes; nodes that never need it do not compile it
    im2col: list[_Im2col | None] = [None]
    # with threads: gather, product and epilogue of a band in one kernel, by plan kind
    bands: dict[tuple[str, bool], BandKernel] = {}

    def need_bands(kind: str, tile: bool = False) -> None:
        if ctx.parallel and (kind, tile) not in bands and (tile or find_gemm(dt) is not None):
            gather = kind == "gemm"
            bands[kind, tile] = BandKernel(dt, act, present(kn, 2), has_z, gather, tile=tile)

    def need_im2col(tile: bool = False) -> None:
        if tile and not ctx.parallel:  # the serial band kernel pads and gathers itself
            need_small(True, True)
            return
        if im2col[0] is None:
            im2col[0] = _Im2col(dt, ctx.parallel)
        need_bands("gemm", tile)
        need_epilogue(tile)

    # stride-1 convs as shifted products: tile? -> the kernel
    shift: dict[bool, ShiftKernel] = {}

    def need_shift(tile: bool = False) -> None:
        if tile not in shift:
            shift[tile] = ShiftKernel(dt, act, present(kn, 2), has_z, ctx.parallel, tile)

    numpy_conv: list[KernelFn | None] = [None]  # small convs without a GEMM to call

    def need_numpy() -> None:
        if numpy_conv[0] is None:
            numpy_conv[0] = numpy_kernel(kn)

    # small and 1-thread tiled convs: (gather?, tile?) -> the serial band kernel
    serial: dict[tuple[bool, bool], BandKernel] = {}

    def need_small(gather: bool = True, tile: bool = False) -> None:
        if (gather, tile) not in serial:
            bias = present(kn, 2)
            serial[gather, tile] = BandKernel(
                dt, act, bias, has_z, gather=gather, parallel=False, tile=tile
            )

    # 3x3 stride-1 convs as Winograd F(2x2, 3x3) on the register tile
    winograd: list[Winograd | None] = [None]

    def need_winograd() -> None:
        if winograd[0] is None:
            winograd[0] = Winograd(ctx)
        need_epilogue()

    # the bias, residual and activation after the products of the unfused GEMM paths
    epilogue: list[Epilogue | None] = [None]

    def need_epilogue(tile: bool = False) -> None:
        if epilogue[0] is None:
            epilogue[0] = Epilogue(dt, act, ctx.parallel, row=present(kn, 2), full=has_z)
        if ctx.parallel:  # compiled now: the first run's products need it
            prepare_pool_matmul(dt)
            if tile:
                prepare_pool_tile()

    def need_pointwise(tile: bool = False) -> None:
        if tile and not ctx.parallel:
            need_small(False, True)
            return
        need_bands("pw", tile)
        need_epilogue(tile)

    # compiled now for the declared shapes; a run at other shapes compiles what it needs.
    # Each takes whether the products run on the register tile.
    prepare: dict[str, Any] = {
        "shift": need_shift,
        "gemm": need_im2col,
        "pw": need_pointwise,
        "small": lambda tile: need_small(True, tile),
        "small_pw": lambda tile: need_small(False, tile),
        "numpy": lambda tile: need_numpy(),
        "wino": lambda tile: need_winograd(),
    }
    declared = _declared_kind(kn, w_shape, group, dt, depthwise is not None, ctx.parallel)
    # a small conv runs whole on the caller's thread: its products as without threads
    threaded = ctx.parallel and declared not in ("small", "small_pw")
    declared_tile = _declared_tile(kn, w_shape, group, dt, threaded)
    y_shape = kn.outputs[0].shape if kn.outputs[0] is not None else None
    if declared == "shift" and w_shape is not None and y_shape is not None:  # sizes known
        dil_w = int((kn.attr("dilations", None) or [1])[-1])
        stride_w = int((kn.attr("strides", None) or [1])[-1])
        threads = _workers(ctx.parallel)
        out = (int(y_shape[2]), int(y_shape[3]))
        declared_tile = _shift_tile(dt, w_shape, int(w_shape[1]), out, dil_w, threads, stride_w)
    if (
        ctx.parallel
        and declared in ("gemm", "pw")
        and declared_tile
        and _declared_unsplit(kn, w_shape, group, dt)
    ):
        need_small(declared == "gemm", True)  # its run's serial band kernel on the tile
    elif declared in prepare:
        prepare[declared](declared_tile)
    after_dw = Epilogue(dt, act, ctx.parallel, full=True) if has_z else None
    zeros: dict[int, Any] = {}
    plans: dict[tuple[Any, Any], _Plan] = {}
    a0, a1 = act[1], act[2]

    def plan(x: Any, w: Any) -> _Plan:
        if x.ndim not in (3, 4) or w.ndim != x.ndim:
            raise InvalidArgument(f"{name}: X {x.shape} and W {w.shape} must both be 3-D or 4-D")
        kernel = conv_kernel_shape(kn, x.shape, w.shape)
        strides, dilations = spatial_attrs(kn, x.ndim - 2, kernel)
        pb, _pe, out = conv_geometry(kn, x.shape[2:], kernel, strides, dilations)
        n_ = x.shape[0]
        m_ = w.shape[0]
        check_conv_channels(name, x.shape, w.shape, group)
        final = (n_, m_, *out)
        if x.ndim == 3:  # 1-D as 2-D with a unit height
            kernel, strides, dilations = [1, *kernel], [1, *strides], [1, *dilations]
            pb, out = [0, *pb], [1, *out]
            hw = (1, x.shape[2])
        else:
            hw = (x.shape[2], x.shape[3])
        oh_, ow_ = out
        y3 = (n_, m_, oh_ * ow_)
        k2 = (kernel[0], kernel[1])
        mg = m_ // max(group, 1)
        band, fused = _bands(w[0].size, m_, mg, x.itemsize, (oh_, ow_), ctx.parallel)
        # whether the im2col or pointwise products would run on the register tile, and the
        # shifted products' bands (2-D convs)
        on_tile = _tile_applies(dt, mg, w[0].size, fused or band)
        threads = _workers(ctx.parallel)
        shift_tile = x.ndim == 4 and _shift_tile(
            dt, w.shape, x.shape[1], (oh_, ow_), dilations[1], threads, strides[1]
        )
        if depthwise is not None and w.shape == w_shape:
            kind = "dw"
        elif k2 == (1, 1) and strides == [1, 1] and list(pb) == [0, 0] and (oh_, ow_) == hw:
            kind = "pw"
        elif x.ndim == 4 and winograd_applies(dt, w.shape, group, strides, dilations, oh_ * ow_):
            need_winograd()
            work = n_ * m_ * oh_ * ow_ * w[0].size
            pads_before = (int(pb[0]), int(pb[1]))
            return _Plan(
                "wino", final, y3, None, work, threads, 0, 0, None, True, pads_before=pads_before
            )
        elif x.ndim == 4 and _shift_applies(
            w.shape, group, strides, dt, ow_, dilations[1], on_tile, shift_tile
        ):
            kind = "shift"
        else:
            kind = "gemm"
        columns = (w[0].size * oh_ * ow_) if kind in ("gemm", "shift", "pw") else 0
        gather = kind != "pw"
        tile = kind in ("gemm", "pw") and on_tile
        if _small(columns, m_, ctx.parallel):
            split = 0
            if kind in ("gemm", "pw"):
                split = _split_band(group, columns * m_, oh_ * ow_, dt, ctx.parallel)
            if split:  # the parallel band kernel shares its groups or its pixels
                fused = split
                tile = _tile_applies(dt, mg, w[0].size, fused)
            else:
                if ctx.parallel:
                    # it runs whole on the caller's thread: bands and products (register tile
                    # or BLAS) as in a session without threads
                    band = _bands(w[0].size, m_, mg, x.itemsize, (oh_, ow_), False)[0]
                    tile = kind in ("gemm", "pw") and _tile_applies(dt, mg, w[0].size, band)
                kind = "small" if find_gemm(dt) is not None else "numpy"
        win = None
        shape = None
        if kind == "shift":
            tile = shift_tile
            need_shift(tile)
            shape = shift[tile].geometry(
                hw,
                (pb[0], pb[1]),
                (oh_, ow_),
                k2,
                (dilations[0], dilations[1]),
                (x.shape[1], m_),
                threads,
                (strides[0], strides[1]),
            )
        elif (kind in ("gemm", "dw") or (kind == "small" and gather)) and oh_ * ow_ > 0:
            win = plan_window(
                hw,
                k2,
                (strides[0], strides[1]),
                (dilations[0], dilations[1]),
                (pb[0], pb[1]),
                (oh_, ow_),
                row_passes=kind == "dw",
            )
        work = n_ * m_ * oh_ * ow_ * k2[0] * k2[1]
        planes = n_ * m_
        chunks = min(planes, 64) if ctx.parallel and work >= SERIAL_WORK else 1
        if not (kind in ("gemm", "pw") and (tile or find_gemm(dt) is not None)):
            fused = 0
        split = False
        if tile and kind in ("gemm", "pw") and not fused:
            # unfused with threads, a product big enough is split between them, each part
            # on the tile (`pool_matmul`); a smaller one runs whole, as without threads
            split = (
                ctx.parallel
                and numba.get_num_threads() >= 2
                and not _unsplit(w[0].size, mg, (oh_, ow_), fused)
            )
        bound = None
        if kind == "small" or (tile and kind in ("gemm", "pw") and not fused and not split):
            # the serial band kernel's whole run
            need_small(gather, tile)
            bound = _bind_serial(serial[gather, tile], x.shape, w.shape, group, win, band)
        elif kind in prepare:
            prepare[kind](tile)
        chunks = max(chunks, 1)
        made = _Plan(
            kind, final, y3, win, work, chunks, band, fused, shape, tile, bound, split=split
        )
        if kind == "small" and n_ == 1:  # its buffer lists are made's: shared by the copy
            made = replace(made, one_image=_one_image_run(made, dt))
        return made

    def run(x: Any, w: Any, b: Any = None, z: Any = None) -> tuple[Any]:
        if x.dtype != dt or w.dtype != dt:
            raise InvalidArgument(f"{name}: X {x.dtype} and W {w.dtype} must both be {dt}")
        key = (x.shape, w.shape)
        p = plans.get(key)
        if p is None:  # pads/auto_pad/output size: the same for every run at these shapes
            p = plans[key] = plan(x, w)
        if p.kind == "numpy":
            small = numpy_conv[0]
            assert small is not None
            return small(x, w, b) if z is None else small(x, w, b, z)  # type: ignore[return-value]
        m_ = p.y3[1]
        if b is not None and b.shape != (m_,):
            raise InvalidArgument(f"{name}: bias shape {b.shape} must be ({m_},)")
        if p.one_image is not None and z is None:
            return p.one_image(x, w, b)  # type: ignore[no-any-return]
        full = None
        if z is not None:
            try:
                zb = np.broadcast_to(z.astype(dt, copy=False), p.final)
            except ValueError:
                raise InvalidArgument(
                    f"{name}: Z {z.shape} does not broadcast to the output {p.final}"
                ) from None
            full = np.ascontiguousarray(zb).reshape(p.y3)
        y = np.empty(p.y3, dt)
        if y.size == 0:
            return (y.reshape(p.final),)
        x = np.ascontiguousarray(x)
        w = np.ascontiguousarray(w)
        if p.kind == "dw":
            assert depthwise is not None and p.win is not None
            if b is None:
                b = zeros.get(m_)
                if b is None:
                    b = zeros[m_] = np.zeros(m_, dt)
            b = np.ascontiguousarray(b)
            x3 = x.reshape(x.shape[0], x.shape[1], -1)
            w2 = w.reshape(m_, -1)
            depthwise(p.work, x3, w2, b, y, *p.win.args(), p.chunks, a0, a1)
            if after_dw is not None:
                after_dw(y, full=full)
            return (y.reshape(p.final),)
        row = None if b is None else np.ascontiguousarray(b)
        if p.kind == "small":
            _small_conv(x, w, y, p, row, full)
            return (y.reshape(p.final),)
        if p.kind == "wino":
            assert winograd[0] is not None and epilogue[0] is not None
            winograd[0](x, w, y.reshape(p.final), p.pads_before, p.chunks)
            epilogue[0](y, row=row, full=full)
            return (y.reshape(p.final),)
        if p.shift is not None:
            _shifted_conv(x, w, y, p, p.shift, shift[p.tile], row, full)
            return (y.reshape(p.final),)
        if p.tile and not p.fused and not p.split:
            _tiled_conv(x, w, y, p, row, full)
            return (y.reshape(p.final),)
        gemm = find_gemm(dt) if p.fused else None
        if p.fused and (p.tile or gemm is not None):
            _banded_conv(x, w, y, group, p, im2col[0], bands[p.kind, p.tile], gemm, row, full)
        else:
            assert epilogue[0] is not None
            _gemm_conv(x, w, y, group, p, im2col[0], epilogue[0], row, full)
        return (y.reshape(p.final),)

    return run


class _Im2col:
    """The two im2col kernels of one dtype: pad the image, gather a tile of columns."""

    def __init__(self, dtype: np.dtype[Any], parallel: bool) -> None:
        self.pad = pad_kernel(dtype, parallel)
        self.tile = tile_kernel(dtype, parallel)


_BLEN = GEO.index("blen")


def _gemm_conv(
    x: Any,
    w: Any,
    y: Any,
    group: int,
    p: _Plan,
    im2col: _Im2col | None,
    epilogue: Epilogue,
    row: Any,
    full: Any,
) -> None:
    """BLAS GEMMs into the output, a band of output rows at a time: on the input itself
    (pointwise) or on the band's im2col columns (gathered from the image padded once, or with
    each plane padded as it is gathered when the image is one band). Each band's columns are
    multiplied, and its outputs finished (`epilogue`), while they are still in cache
    (`im2col.tile_rows`)."""
    n_, c_ = x.shape[:2]
    m_, cg = w.shape[:2]
    mg = m_ // group
    krows = w[0].size
    wg = w.reshape(group, mg, krows)
    xs = x.reshape(n_, c_, -1)
    hw = p.y3[2]
    step = p.band
    win = p.win
    args = () if win is None else win.args()
    col = padded = None
    if p.kind != "pw":
        assert win is not None and im2col is not None
        col = np.empty(krows * min(step, hw), x.dtype)
        blen = int(win.geo[_BLEN])  # 0: the plan reads the input itself (`direct`)
        # several bands read the image padded once; one band pads each plane as it gathers it.
        # The padded image's buffer is kept with the plan: its padding, zeroed once, stays zero
        # (the copy writes only the input's positions), so a run does not zero it again (a
        # fifth of the padding pass at the yolo stem). Concurrent runs each take their own.
        if blen and step < hw:
            padded = p.pads.pop() if p.pads else np.zeros((c_, blen), x.dtype)
    for n in range(n_):
        src = xs[n]
        if padded is not None:
            assert win is not None and im2col is not None
            im2col.pad(padded.size, src, padded, *args)
            src = padded
        for a in range(0, hw, step):
            b = min(hw, a + step)
            for g in range(group):
                planes = src[g * cg : (g + 1) * cg]
                if col is None:
                    panel = planes[:, a:b]
                else:
                    assert win is not None and im2col is not None
                    panel = col[: krows * (b - a)].reshape(krows, b - a)
                    im2col.tile(panel.size, planes, panel, *args, a, b, padded is None)
                pool_matmul(wg[g], panel, out=y[n, g * mg : (g + 1) * mg, a:b], tile=p.tile)
            if not epilogue.noop:  # bias, residual Z, activation
                zn = None if full is None else full[n : n + 1]
                epilogue(y[n : n + 1], row=row, full=zn, band=(a, b))
    if padded is not None:
        p.pads.append(padded)


def _banded_conv(
    x: Any,
    w: Any,
    y: Any,
    group: int,
    p: _Plan,
    im2col: _Im2col | None,
    bands: BandKernel,
    gemm: Gemm | None,
    row: Any,
    full: Any,
) -> None:
    """A threaded conv as one parallel kernel per image (`conv_bands`), each band of `p.fused`
    output pixels gathered (im2col plans; the image padded once first, unless the plan reads
    it directly) or read in place (pointwise), multiplied and finished by one worker, with the
    plan's padded image and scratch buffers (taken by this run, given back after it:
    concurrent runs each take their own; one scratch row per numba thread). `gemm` None: the
    kernel multiplies with the register tile."""
    run_threads()  # BLAS on one thread in each worker
    n_, c_ = x.shape[:2]
    m_ = w.shape[0]
    w3 = w.reshape(group, m_ // group, -1)
    xs = x.reshape(n_, c_, -1)
    args: tuple[Any, ...] | None = None
    padded = scratch = None
    if p.win is not None:  # im2col
        assert im2col is not None
        args = p.win.args()
        blen = int(p.win.geo[_BLEN])
        padded = (p.pads.pop() if p.pads else np.zeros((c_, blen), x.dtype)) if blen else None
        threads = numba.get_num_threads()
        scratch = p.scratch.pop() if p.scratch else None
        if scratch is None or scratch.shape[0] < threads:
            scratch = np.empty((threads, w3.shape[2] * p.fused), x.dtype)
    address, ilp64 = (0, False) if gemm is None else (gemm.address, gemm.ilp64)
    for n in range(n_):
        src = xs[n]
        if padded is not None:
            assert im2col is not None and args is not None
            im2col.pad(padded.size, src, padded, *args)
            src = padded
        zn = None if full is None else full[n]
        bands(src, w3, y[n], scratch, row, zn, args, p.fused, address, ilp64)
    if scratch is not None:
        p.scratch.append(scratch)
    if padded is not None:
        p.pads.append(padded)


@dataclass(frozen=True)
class _SerialRun:
    """A serial band kernel bound to one plan (`BandKernel.serial_call`: its window, band and
    GEMM arguments), with the shapes a run views its arrays as and the buffers it takes. A
    small conv's run assembles nothing else: that assembly was about a third of the Python
    around a VAD's small convs."""

    call: Any  # (image, w3, y2, scratch, bias, full, padded) -> None
    images: tuple[int, int, int]  # X as (N, C, H*W)
    w3: tuple[int, int, int]  # W as (group, M/group, C/group*KH*KW)
    padded: tuple[int, int] | None  # the padded image (C, blen); None: read as it is
    scratch: tuple[int, int] | None  # the gather's columns (1, K*band); None: pointwise


def _bind_serial(
    kern: BandKernel,
    x_shape: tuple[int, ...],
    w_shape: tuple[int, ...],
    group: int,
    win: Window | None,
    band: int,
) -> _SerialRun:
    """`kern` (serial) bound to a plan's fixed arguments: BLAS's GEMM unless it multiplies
    with the register tile, the window of an im2col plan (None: pointwise)."""
    krows = int(np.prod(w_shape[1:]))
    gemm = None if kern.tile else find_gemm(kern.dtype)
    assert kern.tile or gemm is not None
    address, ilp64 = (0, False) if gemm is None else (gemm.address, gemm.ilp64)
    padded = scratch = None
    if win is not None:
        blen = int(win.geo[_BLEN])
        padded = (x_shape[1], blen) if blen else None
        scratch = (1, krows * band)
    images = (x_shape[0], x_shape[1], int(np.prod(x_shape[2:])))
    call = kern.serial_call(None if win is None else win.args(), band, address, ilp64)
    return _SerialRun(call, images, (group, w_shape[0] // group, krows), padded, scratch)


def _serial_conv(x: Any, w: Any, y: Any, p: _Plan, row: Any, full: Any) -> None:
    """Each image by one call of the plan's bound serial band kernel (`_SerialRun`), which
    pads it when the plan pads, then gathers, multiplies and finishes its bands on the
    caller's thread, with the plan's buffers (taken by this run, given back after it:
    concurrent runs each take their own)."""
    s = p.serial
    assert s is not None
    padded, scratch = _take_buffers(p, s, x.dtype)
    xs = x.reshape(s.images)
    w3 = w.reshape(s.w3)
    call = s.call
    for n in range(s.images[0]):
        call(xs[n], w3, y[n], scratch, row, None if full is None else full[n], padded)
    _give_back(p, padded, scratch)


def _take_buffers(p: _Plan, s: _SerialRun, dt: np.dtype[Any]) -> tuple[Any, Any]:
    """(padded image, scratch) for one run of the bound serial kernel, taken from the plan's
    lists (made when none is free: concurrent runs each take their own); BLAS held to one
    thread, in a session with threads."""
    run_threads()
    padded = scratch = None
    if s.padded is not None:
        padded = p.pads.pop() if p.pads else np.zeros(s.padded, dt)
    if s.scratch is not None:
        scratch = p.scratch.pop() if p.scratch else np.empty(s.scratch, dt)
    return padded, scratch


def _give_back(p: _Plan, padded: Any, scratch: Any) -> None:
    """The buffers `_take_buffers` gave, back to the plan for the next run."""
    if scratch is not None:
        p.scratch.append(scratch)
    if padded is not None:
        p.pads.append(padded)


def _small_conv(x: Any, w: Any, y: Any, p: _Plan, row: Any, full: Any) -> None:
    """A small conv (`SMALL_CONV_COLUMNS`): its whole image in one serial band kernel call
    (`p.band` pixels: the whole image, at these sizes)."""
    _serial_conv(x, w, y, p, row, full)


def _one_image_run(p: _Plan, dt: np.dtype[Any]) -> Any:
    """`run` for a small conv of one image without a residual: `_serial_conv`'s work with the
    weights' 3-D view kept while the same weights come (an initializer: every run), the
    output made in its final shape. The Python around a small conv's few microseconds of
    kernel was as long as the kernel."""
    s = p.serial
    assert s is not None
    call, image, w3_shape = s.call, s.images[1:], s.w3
    y2, final = p.y3[1:], p.final
    last: list[tuple[Any, Any]] = [(None, None)]  # (W, W as w3_shape), replaced together

    def one_image(x: Any, w: Any, b: Any) -> tuple[Any]:
        row = None if b is None else np.ascontiguousarray(b)  # its shape checked by `run`
        seen, w3 = last[0]
        if seen is not w:
            w3 = np.ascontiguousarray(w).reshape(w3_shape)
            if w.flags.c_contiguous:  # a view of w: sees what a caller writes into w
                last[0] = (w, w3)
        y = np.empty(final, dt)
        padded, scratch = _take_buffers(p, s, dt)
        call(np.ascontiguousarray(x).reshape(image), w3, y.reshape(y2), scratch, row, None, padded)
        _give_back(p, padded, scratch)
        return (y,)

    return one_image


def _tiled_conv(x: Any, w: Any, y: Any, p: _Plan, row: Any, full: Any) -> None:
    """A 1-thread im2col or pointwise conv whose products run on the register tile
    (`_tile_applies`): per image one call of the serial band kernel, which gathers, multiplies
    and finishes each band of `p.band` output pixels (`im2col.tile_rows`, cache-sized) in
    turn."""
    _serial_conv(x, w, y, p, row, full)


def _split_band(group: int, macs: int, pixels: int, dt: np.dtype[Any], parallel: bool) -> int:
    """With threads, the output pixels per band of a small conv (`_small`) of `macs`
    multiply-adds that shares its work between the threads on the parallel band kernel (at
    least `GROUP_SPLIT_MACS`): grouped, the whole image as one band, its groups shared;
    otherwise a band of its pixels per thread, each at least `SPLIT_MIN_PIXELS`. 0: it runs
    whole on the caller's thread."""
    threads = numba.get_num_threads()
    if not parallel or threads < 2 or macs < GROUP_SPLIT_MACS or find_gemm(dt) is None:
        return 0
    if group > 1:
        return pixels
    band = -(-pixels // threads)
    return band if band >= SPLIT_MIN_PIXELS else 0


def _small(columns: int, m: int, parallel: bool) -> bool:
    """Whether a conv of `columns` im2col elements (C/group*KH*KW by OH*OW) and `m` outputs
    runs as a small conv (`SMALL_CONV_COLUMNS`): with threads, only where its product would
    run whole in the caller anyway (`pool_matmul.POOL_SERIAL_MACS`)."""
    return 0 < columns <= SMALL_CONV_COLUMNS and (not parallel or columns * m < POOL_SERIAL_MACS)


def _declared_kind(
    kn: KernelNode,
    w_shape: Any,
    group: int,
    dt: np.dtype[Any],
    depthwise: bool,
    parallel: bool,
) -> str | None:
    """The plan kind the declared shapes will take ("dw", "pw", "small", "numpy", "wino",
    "shift", "gemm"), as the first run's `plan` decides it ("small_pw": a small pointwise
    conv); None where the weight's shape is not declared."""
    if w_shape is None or not all(isinstance(d, int) for d in w_shape):
        return None
    if depthwise:
        return "dw"
    strides = kn.attr("strides", None) or [1]
    pointwise = (
        all(k == 1 for k in w_shape[2:])
        and all(s == 1 for s in strides)
        and not any(kn.attr("pads", None) or [0])
        and kn.attr("auto_pad", "NOTSET") in ("NOTSET", "VALID")
    )
    y = kn.outputs[0]
    spatial = tuple(y.shape[2:]) if y is not None and y.shape is not None else ()
    if not spatial or not all(isinstance(d, int) for d in spatial):
        return "pw" if pointwise else "gemm"
    columns = int(np.prod(w_shape[1:])) * int(np.prod(spatial))
    if _small(columns, w_shape[0], parallel):
        if find_gemm(dt) is None:
            return "numpy"
        if _split_band(group, columns * w_shape[0], int(np.prod(spatial)), dt, parallel):
            return "pw" if pointwise else "gemm"
        return "small_pw" if pointwise else "small"
    if pointwise:
        return "pw"
    dilations = kn.attr("dilations", None) or [1]
    if len(spatial) == 2 and winograd_applies(
        dt, w_shape, group, strides, dilations, int(np.prod(spatial))
    ):
        return "wino"
    dil_w = int(dilations[-1])
    tile = _declared_tile(kn, w_shape, group, dt, parallel)
    shift_tile = len(spatial) == 2 and _shift_tile(
        dt,
        w_shape,
        int(w_shape[1]),
        (spatial[0], spatial[1]),
        dil_w,
        _workers(parallel),
        int(strides[-1]),
    )
    if _shift_applies(w_shape, group, strides, dt, spatial[-1], dil_w, tile, shift_tile):
        return "shift"
    return "gemm"


def _declared_bands(
    kn: KernelNode, w_shape: Any, group: int, dt: np.dtype[Any], parallel: bool
) -> tuple[int, int, int, int, tuple[int, int]] | None:
    """(band, fused, mg, krows, output size) of the declared shapes' im2col or pointwise
    products as the first run's `plan` decides them (`_bands`, or a small conv's shared band,
    `_split_band`); None where the weight's or the output's size is not declared."""
    if w_shape is None or not all(isinstance(d, int) for d in w_shape):
        return None
    y = kn.outputs[0]
    spatial = tuple(y.shape[2:]) if y is not None and y.shape is not None else ()
    if not spatial or not all(isinstance(d, int) for d in spatial):
        return None
    mg = w_shape[0] // max(group, 1)
    krows = int(np.prod(w_shape[1:]))
    out = (int(spatial[0]), int(spatial[1])) if len(spatial) == 2 else (1, int(spatial[-1]))
    band, fused = _bands(krows, w_shape[0], mg, dt.itemsize, out, parallel)
    columns = krows * out[0] * out[1]
    if _small(columns, w_shape[0], parallel):
        fused = _split_band(group, columns * w_shape[0], out[0] * out[1], dt, parallel)
    return band, fused, mg, krows, out


def _declared_tile(
    kn: KernelNode, w_shape: Any, group: int, dt: np.dtype[Any], parallel: bool
) -> bool:
    """Whether the declared shapes' im2col or pointwise products run on the register tile
    (`_tile_applies`), as the first run's `plan` decides it; with the output's size not
    declared, whether products of any width would."""
    if w_shape is None or not all(isinstance(d, int) for d in w_shape):
        return False
    declared = _declared_bands(kn, w_shape, group, dt, parallel)
    if declared is None:
        mg = w_shape[0] // max(group, 1)
        return _tile_applies(dt, mg, int(np.prod(w_shape[1:])), 1 << 30)
    band, fused, mg, krows, _ = declared
    return _tile_applies(dt, mg, krows, fused or band)


def _declared_unsplit(kn: KernelNode, w_shape: Any, group: int, dt: np.dtype[Any]) -> bool:
    """`_unsplit` at the declared shapes, with threads; False where they are not declared."""
    declared = _declared_bands(kn, w_shape, group, dt, True)
    if declared is None:
        return False
    _, fused, mg, krows, out = declared
    return _unsplit(krows, mg, out, fused)


def _shift_applies(
    w_shape: Any,
    group: int,
    strides: Any,
    dt: np.dtype[Any],
    out_w: int,
    dilation_w: int,
    tile: bool = False,
    shift_tile: bool = False,
) -> bool:
    """Whether a 2-D conv runs as shifted products (`conv_shift`): group 1, a kernel larger
    than 1x1, and on BLAS (a product per tap) stride 1 and `SHIFT_MIN_CHANNELS` input
    channels, on the register tile (`shift_tile`: one product per band, K = C*KH*KW, the
    image split into its stride phases) any stride and number; outputs wide enough that the
    padded columns each product also computes stay a small share (`SHIFT_MAX_WASTE`, or
    `TILE_SHIFT_MAX_WASTE` where the im2col products would run on the register tile:
    `tile`), and numpy's BLAS GEMM found."""
    waste = TILE_SHIFT_MAX_WASTE if tile else SHIFT_MAX_WASTE
    stride_1 = all(s == 1 for s in strides)
    return (
        len(w_shape) == 4
        and group == 1
        and tuple(w_shape[2:]) != (1, 1)
        and ((stride_1 and w_shape[1] >= SHIFT_MIN_CHANNELS) or shift_tile)
        and phase_width(out_w, w_shape[3], dilation_w, strides[-1]) - out_w <= waste * out_w
        and find_gemm(dt) is not None
    )


def _workers(parallel: bool) -> int:
    """The threads a conv's kernels share: numba's count in the parallel variant, else one."""
    return numba.get_num_threads() if parallel else 1


def _shift_tile(
    dt: np.dtype[Any],
    w_shape: Any,
    channels: int,
    out: tuple[int, int],
    dilation_w: int,
    threads: int,
    stride_w: int = 1,
) -> bool:
    """Whether a shifted-product conv's bands run on the register tile: its products as
    `conv_shift` cuts them (M, K = C*KH*KW, a band of `shift_rows` output rows Wp wide) within
    `_tile_applies`."""
    oh, ow = out
    wp = phase_width(ow, w_shape[3], dilation_w, stride_w)
    rows = shift_rows((channels + w_shape[0]) * dt.itemsize, wp, oh, threads)
    k = int(np.prod(w_shape[1:]))
    return _tile_applies(dt, w_shape[0], k, (rows - 1) * wp + ow)


def _shifted_conv(
    x: Any,
    w: Any,
    y: Any,
    p: _Plan,
    geo: ShiftGeometry,
    kern: ShiftKernel,
    row: Any,
    full: Any,
) -> None:
    """A stride-1 conv by `conv_shift`, with the plan's padded image and scratch buffers
    (taken by this run, given back after it: concurrent runs each take their own)."""
    gemm = find_gemm(x.dtype)
    assert kern.tile or gemm is not None
    address, ilp64 = (0, False) if gemm is None else (gemm.address, gemm.ilp64)
    run_threads()  # BLAS on one thread in each worker
    n_, c_ = x.shape[:2]
    m_ = w.shape[0]
    padded = p.pads.pop() if p.pads else np.zeros((c_, geo.padded_len), x.dtype)
    threads = numba.get_num_threads()
    size = m_ * geo.rows * int(geo.dims[2])
    scratch = p.scratch.pop() if p.scratch else None
    if scratch is None or scratch.shape[0] < threads:
        scratch = np.empty((threads, size), x.dtype)
    kern(x.reshape(n_, c_, -1), kern.packed(w), y, row, full, geo, padded, scratch, address, ilp64)
    p.scratch.append(scratch)
    p.pads.append(padded)


numba_kernel("Conv", since=1, applies=_conv_applies)(_build_conv)
numba_kernel("FusedConv", since=1, domain="ai.turnout", applies=_conv_applies)(_build_conv)
