"""Profiling: per-node timings written as Chrome-trace JSON (opens in Perfetto/chrome://tracing)."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np

from turnout.engine.executor.plan import Step
from turnout.graph.dtypes import ELEM_TYPE_NAMES, elem_type_of
from turnout.graph.errors import InvalidArgument

__all__ = ["Profiler", "placement_by_step"]


def _elem_name(dtype: np.dtype[Any]) -> str:
    """ONNX element names as onnxruntime's profiler writes them ("float", "int64")."""
    try:
        return ELEM_TYPE_NAMES[elem_type_of(dtype)]
    except (KeyError, InvalidArgument):
        return str(dtype)


def _type_shape(values: Sequence[Any]) -> list[dict[str, list[int]]]:
    out = []
    for v in values:
        if isinstance(v, np.ndarray):
            out.append({_elem_name(v.dtype): [int(d) for d in v.shape]})
        elif isinstance(v, list):
            out.append({"sequence": [len(v)]})
    return out


def placement_by_step(report: Any) -> dict[str, Any]:
    """Measured placement's record (`PartitionReport.placement`) per step name: a node's
    step by its name, a fused group's by the group's name (a list, one entry per member)."""
    nodes = (report.placement or {}).get("nodes", {})
    out: dict[str, Any] = {}
    for a in report.assignments:
        entry = nodes.get(a.node)
        if entry is None:
            continue
        if a.group is None:
            out[a.node] = entry
        else:
            out.setdefault(a.group, []).append({"node": a.node, **entry})
    return out


class Profiler:
    """Collects trace events for one session; `end()` writes them and returns the file name."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.start_ns = time.perf_counter_ns()
        self.start_wall_ns = time.time_ns()
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self.pid = os.getpid()
        self.placement: dict[str, Any] = {}
        """Per step name, how measured placement chose its node(s) (`placement_by_step`);
        empty under priority placement."""

    def _us(self, t_ns: int) -> float:
        return (t_ns - self.start_ns) / 1000.0

    def event(self, cat: str, name: str, start_ns: int, dur_ns: int, args: dict[str, Any]) -> None:
        ev = {
            "cat": cat,
            "pid": self.pid,
            "tid": threading.get_ident() % 100000,
            "dur": dur_ns / 1000.0,
            "ts": self._us(start_ns),
            "ph": "X",
            "name": name,
            "args": args,
        }
        with self._lock:
            self.events.append(ev)

    def record_step(
        self, step: Step, start_ns: int, dur_ns: int, ins: list[Any], outs: Sequence[Any]
    ) -> None:
        args = {
            "op_name": step.op_type,
            "provider": step.provider,
            "input_type_shape": _type_shape(ins),
            "output_type_shape": _type_shape(outs),
        }
        chosen = self.placement.get(step.name)
        if chosen is not None:
            args["placement"] = chosen
        self.event("Node", f"{step.name}_kernel_time", start_ns, dur_ns, args)

    def end(self) -> str:
        stamp = datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
        path = f"{self.prefix}_{stamp}_{os.getpid()}_{id(self) % 10000}.json"
        with self._lock, open(path, "w") as f:
            json.dump({"traceEvents": self.events, "displayTimeUnit": "ms"}, f)
        return path
