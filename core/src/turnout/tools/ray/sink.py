"""Output batches to one Parquet file, written by the driver in row order.

The writer is also the run's proof of completeness: row ids must arrive as 0, 1, 2, ... with no
gap and no repeat, so a lost or duplicated row (after a worker was killed and its batch rerun,
say) fails the run instead of reaching the file. It writes to a temporary name and renames at
the end, so a failed run leaves no file that looks finished.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from turnout.graph.errors import Fail, InvalidArgument
from turnout.tools.ray.predictor import (
    BOOKKEEPING_COLUMNS,
    ROW_COLUMN,
    SECONDS_COLUMN,
    WORKER_COLUMN,
)
from turnout.tools.ray.summary import WorkerStats

__all__ = ["to_arrow", "write_parquet"]


def to_arrow(name: str, values: np.ndarray) -> Any:
    """A column as Arrow: scalars per row as they are, tensors per row as Arrow's fixed-shape
    tensor type (pandas and Ray read it; `to_numpy_ndarray()` gives the array back)."""
    import pyarrow as pa

    try:
        if values.ndim > 1:
            return pa.FixedShapeTensorArray.from_numpy_ndarray(np.ascontiguousarray(values))
        return pa.array(values)
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise InvalidArgument(
            f"column {name!r} ({values.dtype}) cannot be stored in Parquet: {e}"
        ) from e


def write_parquet(
    batches: Iterable[Mapping[str, np.ndarray]], path: str | Path, rows: int
) -> dict[str, WorkerStats]:
    """Write `rows` rows from `batches` (in row order) to `path`; returns what each worker
    ran (from the predictor's bookkeeping columns, which the file does not get)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    target = Path(path)
    partial = target.with_name(f".{target.name}.partial")
    tally: defaultdict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    expected = 0
    writer = None
    try:
        for batch in batches:
            ids = np.asarray(batch[ROW_COLUMN])
            if not np.array_equal(ids, np.arange(expected, expected + len(ids))):
                raise Fail(
                    f"output rows out of sequence after row {expected - 1}: got rows "
                    f"{ids[:5].tolist()}...; a row was lost or repeated"
                )
            expected += len(ids)
            workers, where = np.unique(batch[WORKER_COLUMN], return_inverse=True)
            counts = np.bincount(where, minlength=len(workers))
            seconds = np.bincount(where, weights=batch[SECONDS_COLUMN], minlength=len(workers))
            for worker, n, s in zip(workers, counts, seconds):
                tally[str(worker)][0] += int(n)
                tally[str(worker)][1] += float(s)
            columns = {k: v for k, v in batch.items() if k not in BOOKKEEPING_COLUMNS}
            table = pa.table({k: to_arrow(k, v) for k, v in columns.items()})
            if writer is None:
                writer = pq.ParquetWriter(partial, table.schema)
            writer.write_table(table)
        if expected != rows:
            raise Fail(f"the output has {expected} rows, the input {rows}")
        if writer is not None:
            writer.close()
            writer = None
            os.replace(partial, target)
    finally:
        if writer is not None:
            writer.close()
        partial.unlink(missing_ok=True)
    return {w: WorkerStats(int(n), s) for w, (n, s) in tally.items()}
