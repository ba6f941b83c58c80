"""The placement cache: one JSON file of measured times per model, providers, device and shapes.

Files live under `<root>/placement/`, where `<root>` is `turnout.sdk.cache_dir.cache_root()`,
the root the numba provider's kernel cache uses too. A file holds the kernel time
of every candidate and the copy times, so a later session of the same model places without
timing anything; a file that cannot be read or written is ignored (the session times again).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import onnx

from turnout.graph.logs import logger
from turnout.sdk.cache_dir import cache_root
from turnout.sdk.plugins import registry
from turnout.sdk.provider import ExecutionProvider

__all__ = ["FORMAT", "cache_root", "load", "model_digest", "path_for", "placement_key", "store"]

FORMAT = 1


def model_digest(model: onnx.ModelProto) -> str:
    """A digest of the graph as placed: nodes, inputs, outputs, value types and the
    initializers' names, types and shapes (not their data: times do not depend on it)."""
    h = hashlib.sha256()
    g = model.graph
    for node in g.node:
        h.update(node.SerializeToString())
    for vi in (*g.input, *g.output, *g.value_info):
        h.update(vi.SerializeToString())
    # sorted: the optimizer may list the initializers it writes in another order each process
    for entry in sorted(f"{t.name}:{t.data_type}:{list(t.dims)}" for t in g.initializer):
        h.update(entry.encode())
    for o in model.opset_import:
        h.update(f"{o.domain}:{o.version}".encode())
    return h.hexdigest()


def placement_key(
    model: str, providers: Iterable[ExecutionProvider], shapes: Mapping[str, Any]
) -> str:
    """The cache key: the model's digest, each provider's name, version, device and options,
    the machine, and the input shapes the times were taken at."""
    parts: list[Any] = [FORMAT, model, platform.machine(), platform.processor(), os.cpu_count()]
    for p in providers:
        factory = registry.find(p.name)
        version = getattr(factory, "version", "") if factory is not None else ""
        options = sorted((str(k), str(v)) for k, v in p.requested_options.items())
        parts.append([p.name, str(version), str(p.device), options])
    parts.append(sorted(shapes.items()))
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:32]


def path_for(key: str) -> Path:
    """The file that holds (or will hold) the times stored under `key`."""
    return cache_root() / "placement" / f"{key}.json"


def load(key: str) -> dict[str, Any] | None:
    """The stored times for `key`, or None."""
    path = path_for(key)
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        logger.info("placement cache %s unreadable (%s): timing again", path, e)
        return None
    return data if isinstance(data, dict) and data.get("format") == FORMAT else None


def store(key: str, data: dict[str, Any]) -> str | None:
    """Write `data` under `key` (atomically); the file's path, or None when it cannot be."""
    path = path_for(key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump({**data, "format": FORMAT}, f)
        os.replace(tmp, path)
    except OSError as e:
        logger.info("placement cache %s not written: %s", path, e)
        return None
    return str(path)
