"""What a NonMaxSuppression node means: its thresholds and input checks.

Boxes (batch, boxes, 4) are corners [y1, x1, y2, x2] in any order (center_point_box 0) or
[x_center, y_center, width, height] (1); scores are (batch, classes, boxes). Per batch and
class, boxes scoring above score_threshold (strictly; all boxes without one) are visited by
descending score, ties by ascending index, and a box is selected unless its IoU with an
already selected box of that class exceeds iou_threshold, up to max_output_boxes_per_class
(absent or 0: none). Output rows are (batch, class, box) in that order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from turnout.graph.errors import InvalidArgument

__all__ = ["NmsParams", "nms_params"]


@dataclass(frozen=True)
class NmsParams:
    batch: int
    classes: int
    boxes: int
    max_per_class: int
    iou_threshold: float
    score_threshold: float | None


def _first(v: Any) -> Any:
    a = np.asarray(v).reshape(-1)
    return a[0] if a.size else None


def nms_params(
    name: str, boxes: Any, scores: Any, scalars: Sequence[Any], center_point_box: int = 0
) -> NmsParams:
    """Check the shapes (tuples of ints) of boxes and scores; `scalars` are the optional
    host inputs max_output_boxes_per_class, iou_threshold and score_threshold (absent: None
    or empty)."""
    boxes, scores = tuple(boxes), tuple(scores)
    if len(boxes) != 3 or boxes[2] != 4:
        raise InvalidArgument(f"{name}: boxes must be (batch, boxes, 4), got {boxes}")
    if len(scores) != 3 or scores[0] != boxes[0] or scores[2] != boxes[1]:
        raise InvalidArgument(
            f"{name}: scores {scores} must be (batch, classes, boxes) for boxes {boxes}"
        )
    if center_point_box not in (0, 1):
        raise InvalidArgument(f"{name}: center_point_box must be 0 or 1, got {center_point_box}")
    m, t, s = (None if v is None else _first(v) for v in (*scalars, None, None, None)[:3])
    return NmsParams(
        boxes[0],
        scores[1],
        boxes[1],
        max(int(m), 0) if m is not None else 0,
        float(t) if t is not None else 0.0,
        float(s) if s is not None else None,
    )
