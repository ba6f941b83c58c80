"""Fixtures for turnout.tools.ray's tests: an embedded Ray with two CPUs (started once, shut down at
the end), and the in-process reference a batch run's outputs must match row for row.

The actors run the numpy CPU kernels, as every test's sessions do (the root conftest's switch
travels to Ray's worker processes through the runtime environment).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from turnout import InferenceSession, SessionOptions


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    ray = pytest.importorskip(
        "ray", reason="turnout.tools.ray's runs need Ray: pip install 'turnout[ray]'"
    )
    pytest.importorskip(
        "ray.data", reason="turnout.tools.ray needs Ray Data: pip install 'ray[data]'"
    )
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        object_store_memory=500 * 2**20,
        log_to_driver=False,
        runtime_env={"env_vars": {"TURNOUT_CPU_NUMPY_ONLY": "1"}},
    )
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield ray
    ray.shutdown()


Reference = Callable[[Any, Mapping[str, np.ndarray], int], list[np.ndarray]]


@pytest.fixture
def reference() -> Reference:
    """Outputs of one in-process session for all rows, run as a batch job runs them: calls of
    exactly `size` rows, the last padded with copies of its last row, one thread (BLAS rounds
    differently with more)."""

    def run(model: Any, feeds: Mapping[str, np.ndarray], size: int) -> list[np.ndarray]:
        options = SessionOptions()
        options.intra_op_num_threads = 1
        session = InferenceSession(model, options)
        rows = len(next(iter(feeds.values())))
        parts = []
        for start in range(0, rows, size):
            chunk = {}
            for name, values in feeds.items():
                piece = values[start : start + size]
                pad = np.repeat(piece[-1:], size - len(piece), axis=0)
                chunk[name] = np.concatenate([piece, pad])
            parts.append([o[: min(size, rows - start)] for o in session.run(None, chunk)])
        return [np.concatenate(p) for p in zip(*parts)]

    return run


def write_parquet_input(path: Path, columns: Mapping[str, Any], row_group_size: int) -> Path:
    """A Parquet input file; 2-D numpy columns become fixed-size lists, Arrow arrays stay."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    arrays = {}
    for name, values in columns.items():
        if isinstance(values, pa.Array):
            arrays[name] = values
        elif isinstance(values, np.ndarray) and values.ndim == 2:
            arrays[name] = pa.FixedSizeListArray.from_arrays(values.ravel(), values.shape[1])
        else:
            arrays[name] = pa.array(values)
    pq.write_table(pa.table(arrays), path, row_group_size=row_group_size)
    return path


@pytest.fixture
def parquet_input() -> Callable[..., Path]:
    return write_parquet_input
