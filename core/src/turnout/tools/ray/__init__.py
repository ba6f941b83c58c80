"""Batch inference on Ray Data: one turnout session per actor, rows spread over a cluster (or an
embedded local Ray on this machine). Install with `pip install 'turnout[ray]'`; see docs/batch.md.

- `SessionPredictor`: the class to give `Dataset.map_batches` (one session per actor).
- `predict(dataset, model, workers=...)`: that, with row order, sharing and fault tolerance set.
- `run_batch(model, input, output)`: files in, one Parquet file out (`turnout batch`).

Importing this package does not import Ray; using it does.
"""

from __future__ import annotations

from types import ModuleType

from turnout._submodules import submodule
from turnout.tools.ray.errors import BatchError
from turnout.tools.ray.job import run_batch
from turnout.tools.ray.predict import predict
from turnout.tools.ray.predictor import (
    DEFAULT_BATCH_SIZE,
    ROW_COLUMN,
    WORKER_COLUMN,
    SessionPredictor,
)
from turnout.tools.ray.summary import BatchSummary, WorkerStats

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "ROW_COLUMN",
    "WORKER_COLUMN",
    "BatchError",
    "BatchSummary",
    "SessionPredictor",
    "WorkerStats",
    "predict",
    "run_batch",
]


def __getattr__(name: str) -> ModuleType:
    """A submodule, imported on first read (see `turnout._submodules`)."""
    return submodule(__name__, name)
