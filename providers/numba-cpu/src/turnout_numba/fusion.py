"""Fused groups for the numba provider: maximal convex sets of connected elementwise nodes.

The graph analysis (producer/reader index, convex grouping, group boundaries) is core's
`turnout.sdk.fusion`, shared with every fusing provider; it is re-exported here for this package's
callers. Numba's own rule, which nodes are fusible (an `EW_OPS` op with a numba kernel, not
float16/bfloat16 so each op rounds to its dtype as unfused), is decided while claiming nodes in
`provider._get_capability`. No shape rule: the generated kernel loops over the broadcast
iteration space of the group's inputs (`codegen`).
"""

from __future__ import annotations

from turnout.sdk.fusion import GraphIndex, find_groups, group_outputs

__all__ = ["GraphIndex", "find_groups", "group_outputs"]
