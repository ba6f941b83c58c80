"""Output batches to one Parquet file, written by the driver in row order.

The writer is also the run's proof of completeness: row ids must arrive as 0, 1, 2, ... with no
gap and no repeat, so a lost or duplicated row (after a worker was killed and its batch rerun,
say) fails the run instead of reaching the file. It writes to a temporary name and renames at
the end, so a failed run leaves no file that looks finished.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import Fail, InvalidArgument
from .predictor import ROW_COLUMN, WORKER_COLUMN

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
) -> Counter[str]:
    """Write `rows` rows from `batches` (in row order) to `path`; returns rows per worker."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    target = Path(path)
    partial = target.with_name(f".{target.name}.partial")
    per_worker: Counter[str] = Counter()
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
            workers, counts = np.unique(batch[WORKER_COLUMN], return_counts=True)
            per_worker.update(dict(zip(map(str, workers), map(int, counts))))
            table = pa.table({k: to_arrow(k, v) for k, v in batch.items() if k != WORKER_COLUMN})
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
    return per_worker
