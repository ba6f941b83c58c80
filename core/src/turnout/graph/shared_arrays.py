"""Arrays another placement of the same model already holds, found by content.

A session optimizes its model twice (the numpy tier, then the compiled tier in the background),
and each optimization computes the same folded weights (Conv+BatchNormalization, Conv+Mul, ...)
from the same originals: without this, both tiers' copies live together until the compiled
tier takes over. `SharedArrays` indexes the arrays of the first placement; the second one's
optimizer looks each new array up (`find`) and keeps the held one instead, so the new copy is
freed as soon as it is made. Arrays are compared bit for bit (NaN payloads and -0.0 included),
never by value.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

__all__ = ["MIN_BYTES", "SharedArrays"]

MIN_BYTES = 1 << 16
"""Arrays smaller than this are not looked up: the memory they would save is not worth a
comparison (shape tensors, biases, scalars)."""

_SAMPLES = 64  # elements read into an array's key: equal arrays have equal keys

_Key = tuple[str, tuple[int, ...], bytes]


def _plain(a: object) -> bool:
    """A C-contiguous numeric array in native byte order, big enough to look up."""
    return (
        type(a) is np.ndarray
        and a.dtype.kind in "biufc"
        and a.dtype.isnative
        and a.flags.c_contiguous
        and a.nbytes >= MIN_BYTES
    )


def _key(a: np.ndarray[Any, Any]) -> _Key:
    """Type, shape and a few elements spread over the array (a cheap first filter)."""
    flat = a.reshape(-1)
    step = max(1, flat.size // _SAMPLES)
    return a.dtype.str, a.shape, flat[::step][:_SAMPLES].tobytes()


def _bits(a: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """`a`'s bytes as unsigned integers of its item size (one per element where possible)."""
    size = a.dtype.itemsize
    return a.view(f"u{size}") if size in (1, 2, 4, 8) else a.view(np.uint8)


class SharedArrays:
    """The big plain arrays among `arrays` (others are ignored), to be found by content."""

    def __init__(self, arrays: Iterable[object]) -> None:
        self._by_key: dict[_Key, list[np.ndarray[Any, Any]]] = {}
        for a in arrays:
            if _plain(a):
                assert isinstance(a, np.ndarray)
                bucket = self._by_key.setdefault(_key(a), [])
                if not any(held is a for held in bucket):
                    bucket.append(a)

    def __len__(self) -> int:
        return sum(len(b) for b in self._by_key.values())

    def find(self, a: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """A held array with `a`'s type, shape and bytes, else `a` itself."""
        if not self._by_key or not _plain(a):
            return a
        for held in self._by_key.get(_key(a), ()):
            if held is a or np.array_equal(_bits(held), _bits(a)):
                return held
        return a
