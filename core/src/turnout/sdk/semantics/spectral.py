"""What a DFT, STFT or MelWeightMatrix node means: sizes, directions and input checks.

X holds real (last dimension 1) or complex (last dimension 2: real, imaginary) signals; the
transform runs along `axis` (an attribute default 1 in opset 17, an input default -2 from
opset 20; never the last dimension) over `dft_length` points (default: the axis' size, or
2 * (size - 1) for a one-sided inverse, whose output is real). A one-sided forward transform
of real input keeps the first length // 2 + 1 frequencies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from turnout.graph.errors import InvalidArgument

__all__ = ["DftPlan", "StftPlan", "dft_plan", "mel_bin_edges", "stft_plan"]


@dataclass(frozen=True)
class DftPlan:
    axis: int
    length: int
    inverse: bool
    onesided: bool
    complex_input: bool

    @property
    def out_points(self) -> int:
        """Points along the axis in the output."""
        if self.onesided and not self.inverse:
            return self.length // 2 + 1
        return self.length


def dft_plan(
    name: str,
    x_shape: Any,
    axis: int,
    length: int | None,
    inverse: bool,
    onesided: bool,
) -> DftPlan:
    """Check one run's input shape and sizes (`axis` and `length` read from the attribute or
    the host inputs, None for an absent length) and return the plan."""
    shape = tuple(int(s) for s in x_shape)
    r = len(shape)
    if r < 2 or shape[-1] not in (1, 2):
        raise InvalidArgument(
            f"{name}: input {shape} must end in a dimension of 1 (real) or 2 (complex)"
        )
    if not -r <= axis < r or axis % r == r - 1:
        raise InvalidArgument(f"{name}: axis {axis} must name a signal axis of {shape}")
    ax = axis % r
    if length is None:
        length = 2 * (shape[ax] - 1) if inverse and onesided else shape[ax]
    if length < 1:
        raise InvalidArgument(f"{name}: dft_length must be positive, got {length}")
    if onesided and shape[-1] != (2 if inverse else 1):
        kind = "an inverse DFT needs complex" if inverse else "a forward DFT needs real"
        raise InvalidArgument(f"{name}: one-sided, {kind} input, got {shape}")
    return DftPlan(ax, int(length), inverse, onesided, shape[-1] == 2)


@dataclass(frozen=True)
class StftPlan:
    """An STFT's frames: `frames` windows of `length` samples, `step` apart; each frame is a
    forward DFT of `length` points (one-sided: the first length // 2 + 1 frequencies)."""

    frames: int
    length: int
    step: int
    onesided: bool
    complex_input: bool


def stft_plan(
    name: str,
    x_shape: Any,
    step: int,
    window_len: int | None,
    frame_length: int | None,
    onesided: bool,
) -> StftPlan:
    """Check an STFT run (signal (batch, length, 1 | 2), the host scalars, the window's
    length) and return its frames. The frame length defaults to the window's, else the
    signal's."""
    shape = tuple(int(s) for s in x_shape)
    if len(shape) != 3 or shape[-1] not in (1, 2):
        raise InvalidArgument(f"{name}: signal {shape} must be (batch, length, 1 or 2)")
    n = frame_length if frame_length is not None else window_len or shape[1]
    if window_len is not None and window_len != n:
        raise InvalidArgument(f"{name}: window of {window_len} for frames of {n}")
    if step < 1 or n < 1 or n > shape[1]:
        raise InvalidArgument(
            f"{name}: frames of {n} samples every {step} do not fit a signal of {shape[1]}"
        )
    if onesided and shape[-1] == 2:
        raise InvalidArgument(f"{name}: a one-sided STFT needs a real signal")
    return StftPlan(1 + (shape[1] - n) // step, n, step, onesided, shape[-1] == 2)


def mel_bin_edges(
    name: str, bins: int, dft_length: int, sample_rate: int, lower: float, upper: float
) -> np.ndarray:
    """MelWeightMatrix's bins + 2 triangle edges as DFT bin indices (int64, host): evenly
    spaced on the mel scale from `lower` to `upper` hertz, the step being the range over
    bins + 2 as onnx.reference divides it; each of the `bins` filters rises from edge i to
    edge i + 1 and falls to edge i + 2."""
    if bins < 1 or dft_length < 1 or sample_rate < 1 or not 0 <= lower < upper:
        raise InvalidArgument(
            f"{name}: num_mel_bins {bins}, dft_length {dft_length}, sample_rate {sample_rate} "
            f"and edges {lower}..{upper} Hz must be positive and increasing"
        )
    mel_lo, mel_hi = (2595 * np.log1p(f / 700) / np.log(10) for f in (lower, upper))
    mels = np.arange(bins + 2) * ((mel_hi - mel_lo) / (bins + 2)) + mel_lo
    hertz = 700 * np.expm1(mels / 2595 * np.log(10))
    edges: np.ndarray = (((dft_length + 1) * hertz) // sample_rate).astype(np.int64)
    if edges[-1] > dft_length // 2:
        raise InvalidArgument(
            f"{name}: upper_edge_hertz {upper} lies past the {dft_length // 2 + 1} DFT bins"
        )
    return edges
