"""NonMaxSuppression on `be.xp`, every batch and class at once.

The thresholds and checks are `turnout.sdk.semantics.nms`'s. Per batch, the pairwise
"suppresses" matrix (IoU above the threshold, boxes of positive area) is computed on the
device; each class's boxes are ordered by a stable descending sort of their scores. The greedy
pass then walks the sorted positions once for all (batch, class) pairs together: a box is kept
when it passes the score threshold, is not suppressed by a kept box and its class is below
max_output_boxes_per_class, and then suppresses its row. The result's size depends on the
data: the count of kept boxes is read on the host (nonzero), as NonZero does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.nms import nms_params

from ..backend import Backend
from .registry import cuda_kernel, float_only

__all__: list[str] = []


def _corners(xp: Any, boxes: Any, center: bool) -> tuple[Any, Any, Any, Any]:
    """(y_min, x_min, y_max, x_max), each (batch, boxes)."""
    b = boxes.astype(np.float32) if boxes.dtype.itemsize < 4 else boxes
    if center:
        xc, yc, hw, hh = b[..., 0], b[..., 1], b[..., 2] / 2, b[..., 3] / 2
        return yc - hh, xc - hw, yc + hh, xc + hw
    y1, x1, y2, x2 = b[..., 0], b[..., 1], b[..., 2], b[..., 3]
    return xp.minimum(y1, y2), xp.minimum(x1, x2), xp.maximum(y1, y2), xp.maximum(x1, x2)


def _suppresses(xp: Any, boxes: Any, center: bool, threshold: float) -> Any:
    """(batch, boxes, boxes): box i's IoU with box j exceeds the threshold."""
    y0, x0, y1, x1 = _corners(xp, boxes, center)
    ih = xp.minimum(y1[:, :, None], y1[:, None, :]) - xp.maximum(y0[:, :, None], y0[:, None, :])
    iw = xp.minimum(x1[:, :, None], x1[:, None, :]) - xp.maximum(x0[:, :, None], x0[:, None, :])
    overlap = (ih > 0) & (iw > 0)
    inter = xp.where(overlap, ih * iw, 0)
    area = (y1 - y0) * (x1 - x0)
    union = area[:, :, None] + area[:, None, :] - inter
    ok = overlap & (area[:, :, None] > 0) & (area[:, None, :] > 0) & (union > 0)
    return ok & (inter / xp.where(ok, union, 1) > threshold)


@cuda_kernel("NonMaxSuppression", 10, applies=float_only, host_inputs=(2, 3, 4))
def non_max_suppression(kn: KernelNode, be: Backend) -> KernelFn:
    xp = be.xp
    center = int(kn.attr("center_point_box", 0))

    def run(boxes: Any, scores: Any, *scalars: Any) -> tuple[Any]:
        p = nms_params(kn.name, boxes.shape, scores.shape, scalars, center)
        if p.max_per_class == 0 or p.boxes == 0 or p.classes == 0:
            return (xp.zeros((0, 3), np.int64),)
        sup = _suppresses(xp, boxes, bool(center), p.iou_threshold)
        order = xp.argsort(-scores, axis=2, kind="stable")  # descending, ties by index
        ranked = xp.take_along_axis(scores, order, axis=2)
        valid = xp.ones(ranked.shape, bool)
        if p.score_threshold is not None:
            valid = ranked > p.score_threshold
        bi = xp.arange(p.batch)[:, None]
        hit = xp.zeros(ranked.shape, bool)  # suppressed by a kept box, in sorted order
        kept = xp.zeros(ranked.shape, bool)
        count = xp.zeros((p.batch, p.classes), np.int64)
        for j in range(p.boxes):
            keep = valid[:, :, j] & ~hit[:, :, j] & (count < p.max_per_class)
            kept[:, :, j] = keep
            count = count + keep
            row = xp.take_along_axis(sup[bi, order[:, :, j]], order, axis=2)
            hit = hit | (keep[:, :, None] & row)
        b, c, j = xp.nonzero(kept)  # host sync: the output's size is the kept count
        return (xp.stack([b, c, order[b, c, j]], axis=1).astype(np.int64),)

    return run
