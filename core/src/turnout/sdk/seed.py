"""The process-wide seed of random ops (`turnout.set_seed`).

It lives in the SDK because kernels read it (`random_state()`) and a kernel may import only the
SDK and the graph layer; `turnout.api.environment` re-exports these with the other settings.
"""

from __future__ import annotations

import numpy as np

__all__ = ["get_seed", "random_state", "set_seed"]

_seed: int | None = None


def set_seed(seed: int) -> None:
    """Seed every random op created from now on that has no `seed` attribute of its own.

    As in onnxruntime, each such op starts from this seed when its session is created and
    advances its own generator from run to run: two sessions made after `set_seed(s)` draw the
    same sequence.
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"set_seed(): the seed must be an int, got {type(seed).__name__}")
    global _seed
    _seed = int(seed)


def get_seed() -> int | None:
    """The seed given to `set_seed`, or None when none was given."""
    return _seed


def random_state() -> np.random.RandomState:
    """The generator a random kernel without a `seed` attribute creates for itself: seeded with
    `set_seed`'s value when one was given, from OS entropy otherwise."""
    if _seed is None:
        return np.random.RandomState()
    return np.random.RandomState(_seed % 2**32)
