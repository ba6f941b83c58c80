"""What a DFT node means: its axis, length and direction, and the input checks.

X holds real (last dimension 1) or complex (last dimension 2: real, imaginary) signals; the
transform runs along `axis` (an attribute default 1 in opset 17, an input default -2 from
opset 20; never the last dimension) over `dft_length` points (default: the axis' size, or
2 * (size - 1) for a one-sided inverse, whose output is real). A one-sided forward transform
of real input keeps the first length // 2 + 1 frequencies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import InvalidArgument

__all__ = ["DftPlan", "dft_plan"]


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
