"""Dropout's ratio, mode and mask, the same on every provider.

The ratio and training mode come from attributes before opset 12 (training unless `is_test`
before opset 7, inference from 7 to 11) and from inputs since. In training mode a seeded node
draws the same mask on every run from numpy's `RandomState(seed)` (as the ONNX tests expect),
an unseeded one a fresh mask from the generator `turnout.set_seed` seeds; a provider keeps the
same draw, so a seeded model gives the same output on every provider.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from turnout.graph.errors import InvalidArgument
from turnout.sdk.seed import random_state

__all__ = ["DropoutMode", "dropout_mask_dtype"]


def dropout_mask_dtype(node: Any, x_dtype: Any) -> np.dtype[Any]:
    """The mask's type: the input's before opset 10, bool since."""
    return np.dtype(bool) if node.since_version >= 10 else np.dtype(x_dtype)


class DropoutMode:
    """One Dropout node's ratio/mode decoding and its mask generator."""

    def __init__(self, node: Any) -> None:
        self.node = node
        self.version = node.since_version
        self.ratio_attr = float(node.attr("ratio", 0.5))
        self.training_attr = self.version < 7 and not node.attr("is_test", 0)
        seed = node.attr("seed")
        self.seed = None if seed is None else int(seed)
        self._session_rng = random_state()

    def ratio_and_training(self, ratio: Any = None, training: Any = None) -> tuple[float, bool]:
        """(ratio, training) of one run, from the host-side `ratio` and `training_mode`
        inputs where the opset has them; a ratio outside [0, 1) is an InvalidArgument."""
        v = self.version
        r = self.ratio_attr if ratio is None or v < 12 else float(np.asarray(ratio).reshape(()))
        train = (
            self.training_attr if v < 12 else bool(training is not None and np.asarray(training))
        )
        if not 0 <= r < 1:
            raise InvalidArgument(f"{self.node.name}: Dropout ratio must be in [0, 1), got {r}")
        return r, train

    def keep(self, shape: tuple[int, ...], ratio: float) -> np.ndarray[Any, Any]:
        """A host mask of `shape`: True where an element is kept."""
        rng = np.random.RandomState(self.seed) if self.seed is not None else self._session_rng
        keep: np.ndarray[Any, Any] = rng.uniform(0, 1.0, shape) >= ratio
        return keep

    def apply(
        self, xp: Any, x: Any, ratio: Any = None, training: Any = None, to_xp: Any = None
    ) -> tuple[Any, Any]:
        """(output, mask) of one run on array module `xp`: the input itself and an all-true
        mask at inference, else the kept elements scaled by 1 / (1 - ratio). `to_xp` moves
        the host mask to `xp`'s memory (None: `xp.asarray`)."""
        r, train = self.ratio_and_training(ratio, training)
        mask_dt = dropout_mask_dtype(self.node, x.dtype)
        if not train or r == 0:
            return x, xp.ones(x.shape, dtype=mask_dt)
        keep = (to_xp or xp.asarray)(self.keep(tuple(x.shape), r))
        return (keep * x * (1.0 / (1.0 - r))).astype(x.dtype), keep.astype(mask_dt)
