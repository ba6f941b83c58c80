"""Peak memory of a plan, per device: the most bytes its values hold at once.

A plan releases each intermediate value right after its last reader (`v = None` in the
generated code), so the memory behind it is free for the values that come later: that is
turnout's buffer reuse by lifetime, and `SessionOptions.enable_mem_reuse = False` turns it off
(every intermediate lives to the end of the run). This module replays a plan's steps with the
size of each value and says how high the live bytes climb on each device, with the release or
without it. Feeds and initializers are not counted: they live for the whole run either way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from turnout.engine.executor.step import Step

__all__ = ["ALIASES", "HOST_RESULTS", "peak_live_bytes", "static_sizes", "value_bytes"]


def value_bytes(value: Any) -> int:
    """The bytes a value holds: an array's buffer (a device array reports `nbytes` too), the
    sum over a sequence; 0 for what has no size."""
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, (list, tuple)):
        return sum(value_bytes(v) for v in value)
    nbytes = getattr(value, "nbytes", None)
    return int(nbytes) if isinstance(nbytes, (int, np.integer)) else 0


HOST_RESULTS = frozenset({"MemcpyToHost", "EventWait"})
"""Steps a device provider owns whose outputs live in host memory."""
ALIASES = frozenset({"EventWait"})
"""Steps that hand their inputs on under new names (no new memory)."""


def peak_live_bytes(
    steps: Sequence[Step],
    sizes: Mapping[str, int],
    device_of: Callable[[Step], str],
    keep: set[str],
    release: bool = True,
) -> dict[str, int]:
    """Replay `steps`: each step's outputs become live on its device (a copy to the host's on
    the host); with `release`, a value other than those in `keep` (graph outputs) is freed
    after its last reader. Values of unknown size (absent from `sizes`) count as 0."""
    last_use: dict[str, int] = {}
    for i, st in enumerate(steps):
        for x in st.inputs:
            if x:
                last_use[x] = i
    sizes = dict(sizes)
    home: dict[str, str] = {}
    live: dict[str, int] = {}
    peak: dict[str, int] = {}

    for i, st in enumerate(steps):
        device = "cpu" if st.op_type in HOST_RESULTS else device_of(st)
        alias = st.op_type in ALIASES
        if alias:  # the values move to their new names: never counted twice
            for x, y in zip(st.inputs, st.outputs):
                sizes[y] = sizes.pop(x, 0)
                if x in home:
                    live[home[x]] -= sizes[y]
        for y in st.outputs:
            if y and y not in home:
                home[y] = device
                live[device] = live.get(device, 0) + sizes.get(y, 0)
        peak[device] = max(peak.get(device, 0), live.get(device, 0))
        if not release:
            continue
        for x in dict.fromkeys(st.inputs):
            if x in home and last_use.get(x) == i and x not in keep:
                live[home[x]] -= sizes.get(x, 0)
        for y in st.outputs:  # produced, never read, not an output: released at once
            if y in home and y not in last_use and y not in keep:
                live[home[y]] -= sizes.get(y, 0)
    return peak


def static_sizes(steps: Sequence[Step], infos: Mapping[str, Any]) -> tuple[dict[str, int], int]:
    """Bytes of each value the steps produce whose dtype and shape were inferred at session
    creation (`ValueInfo`s by name), and how many produced values have no static size."""
    sizes: dict[str, int] = {}
    unsized = 0
    for st in steps:
        for y in st.outputs:
            if not y:
                continue
            info = infos.get(y)
            dtype = info.dtype if info is not None else None
            shape = info.shape if info is not None else None
            if dtype is None or shape is None or not all(isinstance(d, int) for d in shape):
                unsized += 1
                continue
            sizes[y] = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    return sizes, unsized
