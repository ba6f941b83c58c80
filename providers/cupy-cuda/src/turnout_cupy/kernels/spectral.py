"""DFT on `be.xp`'s FFT (cuFFT through CuPy).

The axis, length and direction are `turnout.semantics.spectral`'s. The (real, imaginary)
pairs of the last dimension become a complex array (complex64 for float16/float32 input),
transformed with fft, ifft or, for a one-sided inverse, irfft (real output), and split back.
dft_length and axis (opset 20) are host inputs: they set the transform's size.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from turnout.provider import KernelFn, KernelNode
from turnout.semantics.spectral import dft_plan

from ..backend import Backend
from .registry import cuda_kernel, float_only

__all__: list[str] = []


def _scalar(v: Any) -> int | None:
    return None if v is None else int(np.asarray(v).reshape(-1)[0])


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
            cdt = np.complex128 if x.dtype == np.float64 else np.complex64
            sig = x[..., 0].astype(cdt)
            if p.complex_input:
                sig = sig + 1j * x[..., 1].astype(cdt)
            if inverse and onesided:
                real = xp.fft.irfft(sig, n=p.length, axis=p.axis)
                return (real[..., None].astype(x.dtype),)
            f = xp.fft.ifft if inverse else xp.fft.fft
            y = f(sig, n=p.length, axis=p.axis)
            if p.out_points != p.length:
                y = xp.take(y, xp.arange(p.out_points), axis=p.axis)
            return (xp.stack([y.real, y.imag], axis=-1).astype(x.dtype),)

        return run

    return build


cuda_kernel("DFT", 17, until=19, applies=float_only, host_inputs=(1,))(_dft(False))
cuda_kernel("DFT", 20, applies=float_only, host_inputs=(1, 2))(_dft(True))
