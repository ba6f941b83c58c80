"""NonMaxSuppression on the emulated backend against onnx.reference beyond the node cases:
several batches and classes, heavily overlapping random boxes in both box formats, tied
scores (visited by ascending index), a score threshold and a per-class limit."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import helper


@pytest.mark.parametrize("center", [0, 1])
@pytest.mark.parametrize(("max_out", "score"), [(3, None), (20, 0.3), (0, None)])
def test_nms(node_check: Any, center: int, max_out: int, score: Any) -> None:
    rng = np.random.default_rng(11)
    b, n, c = 2, 12, 3
    xy = rng.uniform(0, 4, (b, n, 2))
    wh = rng.uniform(0.5, 3, (b, n, 2))
    if center:
        boxes = np.concatenate([xy, wh], axis=2)
    else:  # corners in either order
        boxes = np.concatenate([xy + wh, xy], axis=2)[..., [1, 0, 3, 2]]
    scores = rng.choice([0.1, 0.4, 0.4, 0.7, 0.9], (b, c, n))  # ties
    feeds: dict[str, Any] = {
        "boxes": boxes.astype(np.float32),
        "scores": scores.astype(np.float32),
        "max": np.array([max_out], np.int64),
        "iou": np.array([0.25], np.float32),
    }
    if score is not None:
        feeds["score"] = np.array([score], np.float32)
    node = helper.make_node("NonMaxSuppression", list(feeds), ["sel"], center_point_box=center)
    node_check.against_reference(node, feeds, 11, 0)
