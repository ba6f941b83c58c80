"""DFT and STFT on `be.xp`'s FFT (cuFFT through CuPy), and MelWeightMatrix.

The axis, length and direction are `turnout.sdk.semantics.spectral`'s. The (real, imaginary)
pairs of the last dimension become a complex array (complex64 for float16/float32 input),
transformed with fft, ifft or, for a one-sided inverse, irfft (real output), and split back.
dft_length and axis (opset 20) are host inputs: they set the transform's size.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from turnout.graph.dtypes import np_dtype
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.spectral import dft_plan, mel_bin_edges, stft_plan

from ..backend import Backend
from .registry import cuda_kernel, float_only

__all__: list[str] = []


def _scalar(v: Any) -> int | None:
    return None if v is None else int(np.asarray(v).reshape(-1)[0])


def _signal(xp: Any, x: Any, complex_input: bool) -> Any:
    """(..., 1 | 2) real or (real, imaginary) values as one complex array: complex64 for
    16/32-bit floats, as onnx.reference computes them (numpy's single-precision FFT). The ONNX
    DFT test data carry that FFT's rounding (1.9e-7 where the exact value is 0, against an
    atol of 1e-7), so a double-precision transform fails them; another single-precision FFT
    (cuFFT) may round those elements differently too: unverified until a GPU run."""
    cdt = np.complex128 if x.dtype == np.float64 else np.complex64
    sig = x[..., 0].astype(cdt)
    return sig + 1j * x[..., 1].astype(cdt) if complex_input else sig


def _pairs(xp: Any, y: Any, axis: int, points: int, dtype: Any) -> Any:
    """A complex result, its first `points` along `axis` kept, as (..., 2) pairs."""
    if points != y.shape[axis]:
        y = xp.take(y, xp.arange(points), axis=axis)
    return xp.stack([y.real, y.imag], axis=-1).astype(dtype)


def _dft(axis_is_input: bool) -> Any:
    def build(kn: KernelNode, be: Backend) -> KernelFn:
        xp = be.xp
        inverse, onesided = bool(kn.attr("inverse", 0)), bool(kn.attr("onesided", 0))
        axis_attr = int(kn.attr("axis", 1))

        def run(x: Any, length: Any = None, axis_in: Any = None) -> tuple[Any]:
            axis = axis_attr
            if axis_is_input:
                axis = -2 if axis_in is None else int(np.asarray(axis_in).reshape(-1)[0])
            p = dft_plan(kn.name, x.shape, axis, _scalar(length), inverse, onesided)
            sig = _signal(xp, x, p.complex_input)
            if inverse and onesided:
                real = xp.fft.irfft(sig, n=p.length, axis=p.axis)
                return (real[..., None].astype(x.dtype),)
            f = xp.fft.ifft if inverse else xp.fft.fft
            return (_pairs(xp, f(sig, n=p.length, axis=p.axis), p.axis, p.out_points, x.dtype),)

        return run

    return build


cuda_kernel("DFT", 17, until=19, applies=float_only, host_inputs=(1,))(_dft(False))
cuda_kernel("DFT", 20, applies=float_only, host_inputs=(1, 2))(_dft(True))


@cuda_kernel("STFT", 17, applies=float_only, host_inputs=(1, 3))
def stft(kn: KernelNode, be: Backend) -> KernelFn:
    """Frames gathered by one index array (frame start + sample offset), weighted by the
    window, and transformed together by one batched FFT along the sample axis."""
    xp = be.xp
    onesided = bool(kn.attr("onesided", 1))

    def run(x: Any, step: Any, window: Any = None, length: Any = None) -> tuple[Any]:
        n_win = None if window is None else int(window.shape[0])
        hop = int(np.asarray(step).reshape(-1)[0])
        p = stft_plan(kn.name, x.shape, hop, n_win, _scalar(length), onesided)
        starts = xp.arange(p.frames)[:, None] * p.step
        frames = x[:, starts + xp.arange(p.length)]  # (batch, frames, length, 1 | 2)
        if window is not None:
            frames = frames * window.astype(x.dtype)[:, None]
        sig = _signal(xp, frames, p.complex_input)
        points = p.length // 2 + 1 if onesided else p.length
        return (_pairs(xp, xp.fft.fft(sig, n=p.length, axis=2), 2, points, x.dtype),)

    return run


@cuda_kernel("MelWeightMatrix", 17, host_inputs=(0, 1, 2, 3, 4))
def mel_weight_matrix(kn: KernelNode, be: Backend) -> KernelFn:
    """The triangle filters built on the device from their edges (host scalars: they set the
    output's shape): rising (j - lo) / (center - lo) up to the center, falling
    (hi - j) / (hi - center) after it, a single 1 where the rise is empty."""
    xp = be.xp
    out_dtype = np_dtype(int(kn.attr("output_datatype", 1)))

    def run(bins: Any, n: Any, rate: Any, lower: Any, upper: Any) -> tuple[Any]:
        nb, dft_length, sr = (int(np.asarray(v).reshape(-1)[0]) for v in (bins, n, rate))
        lo_hz, hi_hz = (float(np.asarray(v).reshape(-1)[0]) for v in (lower, upper))
        edges = mel_bin_edges(kn.name, nb, dft_length, sr, lo_hz, hi_hz)
        e = xp.asarray(edges, dtype=np.float64)
        lo, mid, hi = e[:-2], e[1:-1], e[2:]
        j = xp.arange(dft_length // 2 + 1, dtype=np.float64)[:, None]
        rise = xp.where(mid > lo, (j - lo) / xp.where(mid > lo, mid - lo, 1), 1.0)
        fall = (hi - j) / xp.where(hi > mid, hi - mid, 1)
        w = xp.where((j >= lo) & (j <= mid), rise, 0.0)
        w = xp.where((j >= mid) & (j < hi), fall, w)
        w = xp.where((mid == lo) & (j == mid), 1.0, w)
        return (w.astype(out_dtype),)

    return run
