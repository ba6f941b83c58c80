"""The class Ray Data's `map_batches` instantiates once per actor: one session per actor, the
model loaded once, then every batch turned into feeds, run, and returned as columns."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from onnx import ModelProto

from turnout.api.options import SessionOptions
from turnout.api.session import InferenceSession, get_available_providers
from turnout.graph.errors import InvalidArgument
from turnout.tools.ray.batching import InputSpec, fixed_batch, run_in_chunks, to_feed
from turnout.tools.ray.errors import BatchError
from turnout.tools.ray.runtime import gpu_ids, worker_name

__all__ = [
    "BOOKKEEPING_COLUMNS",
    "DEFAULT_BATCH_SIZE",
    "ROW_COLUMN",
    "SECONDS_COLUMN",
    "WORKER_COLUMN",
    "SessionPredictor",
    "choose_providers",
]

DEFAULT_BATCH_SIZE = 256
ROW_COLUMN = "row"
"""The row-id column: it places a failing batch, and proves every row came back exactly once."""
WORKER_COLUMN = "_turnout_worker"
"""Added to every output batch: which worker ran it (for the run's summary; drop before use)."""
SECONDS_COLUMN = "_turnout_seconds"
"""Added to every output batch: the seconds the predictor spent on it, shared out evenly over
its rows, so that a worker's sum is its busy time (for the summary; drop before use)."""
BOOKKEEPING_COLUMNS = (WORKER_COLUMN, SECONDS_COLUMN)

GPU_PROVIDER = "CuPyExecutionProvider"

ProviderSpec = str | tuple[str, dict[str, Any]]


def choose_providers(
    requested: Sequence[ProviderSpec] | None, has_gpu: bool, available: Sequence[str]
) -> list[ProviderSpec] | None:
    """The providers an actor's session asks for: the requested ones, else the CuPy provider
    (ahead of the host) on an actor Ray gave a GPU, when that provider is installed, else the
    session's default (None)."""
    if requested is not None:
        return list(requested)
    if has_gpu and GPU_PROVIDER in available:
        return [GPU_PROVIDER, "CPUExecutionProvider"]
    return None


def _resolve_model(model: Any) -> str | os.PathLike[str] | bytes | ModelProto:
    """A path, bytes or ModelProto as given; a Ray object ref fetched (once, in __init__)."""
    if isinstance(model, (str, os.PathLike, bytes, ModelProto)):
        return model
    ray = sys.modules.get("ray")  # without Ray imported, nothing is an object ref
    if ray is not None and isinstance(model, ray.ObjectRef):
        return _resolve_model(ray.get(model))
    raise InvalidArgument(
        "model must be a path, bytes, a ModelProto or a Ray object ref of one, "
        f"not {type(model).__name__}"
    )


class SessionPredictor:
    """A `map_batches`-ready callable class: pass it to `Dataset.map_batches` with
    `fn_constructor_kwargs`, and Ray builds one per actor.

    `model` is a path (which every node must see), bytes, a ModelProto, or a Ray object ref of
    one (`ray.put` it once, and actors fetch it from the object store). `providers`,
    `provider_options` and `session_options` are InferenceSession's. `columns` maps a model input
    to its column when the names differ; `keep_columns` are passed through to the output.
    """

    def __init__(
        self,
        model: Any,
        *,
        providers: Sequence[ProviderSpec] | None = None,
        provider_options: Sequence[dict[str, Any]] | None = None,
        session_options: SessionOptions | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        columns: Mapping[str, str] | None = None,
        keep_columns: Sequence[str] = (),
    ) -> None:
        if batch_size < 1:
            raise InvalidArgument(f"batch_size must be at least 1, not {batch_size}")
        chosen = choose_providers(providers, bool(gpu_ids()), get_available_providers())
        self.session = InferenceSession(
            _resolve_model(model), session_options, chosen, provider_options
        )
        self.inputs = [InputSpec.of(a.name, a.type, a.shape) for a in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]
        self.rows_per_call = fixed_batch(self.inputs) or batch_size
        self.columns = {s.name: (columns or {}).get(s.name, s.name) for s in self.inputs}
        self.keep_columns = [ROW_COLUMN, *keep_columns]
        self.worker = worker_name()

    def __call__(self, batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Outputs for one batch as columns, in the batch's row order, with the kept columns."""
        began = time.perf_counter()
        rows = len(next(iter(batch.values()))) if batch else 0
        numbered = ROW_COLUMN in batch
        ids = batch[ROW_COLUMN] if numbered else np.arange(rows)
        try:
            feeds = {s.name: to_feed(self._column(batch, s.name), s, ids) for s in self.inputs}
            outs = run_in_chunks(self._run, feeds, rows, self.rows_per_call, self.output_names)
        except Exception as e:
            first, last = (int(ids[0]), int(ids[-1])) if rows else (0, -1)
            where = "" if numbered else f" (positions in the batch: no {ROW_COLUMN!r} column)"
            raise BatchError(first, last, f"{type(e).__name__}: {e}{where}") from e
        result = {c: batch[c] for c in self.keep_columns if c in batch}
        result.update(zip(self.output_names, outs))
        result[WORKER_COLUMN] = np.full(rows, self.worker)
        result[SECONDS_COLUMN] = np.full(rows, (time.perf_counter() - began) / max(rows, 1))
        return result

    def _column(self, batch: Mapping[str, np.ndarray], input_name: str) -> np.ndarray:
        name = self.columns[input_name]
        if name not in batch:
            raise InvalidArgument(
                f"no column {name!r} for model input {input_name!r} (columns: {sorted(batch)})"
            )
        return batch[name]

    def _run(self, feeds: dict[str, np.ndarray]) -> list[Any]:
        return self.session.run(self.output_names, feeds)
