"""`run_batch`: a model over a file or folder of rows, to one Parquet file, on Ray (a cluster
it joins, or an embedded local Ray it starts and stops). What `turnout batch` runs."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import onnx

from turnout.graph.errors import InvalidArgument, InvalidProtobuf, NoSuchFile
from turnout.tools.ray.batching import model_inputs
from turnout.tools.ray.errors import from_ray
from turnout.tools.ray.predict import predict
from turnout.tools.ray.predictor import DEFAULT_BATCH_SIZE, ProviderSpec, SessionPredictor
from turnout.tools.ray.runtime import cluster, require_ray
from turnout.tools.ray.sink import write_parquet
from turnout.tools.ray.sources import plan_input
from turnout.tools.ray.summary import BatchSummary

__all__ = ["run_batch"]

T = TypeVar("T")

BLOCKS_PER_BATCH = 4
"""Rows are read in blocks of this many batches: big enough that a block's overhead is
small, small enough that the workers share the last blocks evenly."""


def run_batch(
    model: str | Path,
    input: str | Path,
    output: str | Path,
    *,
    workers: int = 1,
    batch_size: int = DEFAULT_BATCH_SIZE,
    providers: Sequence[ProviderSpec] | None = None,
    address: str | None = None,
    cpus_per_worker: float = 1,
    gpus_per_worker: float = 0,
    progress: bool = True,
    predictor: type[SessionPredictor] = SessionPredictor,
    predictor_kwargs: Mapping[str, Any] | None = None,
) -> BatchSummary:
    """Score every row of `input` with `model` into `output` (Parquet: a `row` column, a `path`
    column for folder inputs, one column per model output), rows in input order. `predictor`
    may be a subclass that adds pre- or post-processing, with `predictor_kwargs`."""
    require_ray()  # the extra's packages (Ray Data, pyarrow), or a typed error naming it
    model_path = Path(model)
    if not model_path.is_file():
        raise NoSuchFile(f"model {str(model_path)!r} does not exist")
    try:
        proto = onnx.load(str(model_path), load_external_data=False)
    except Exception as e:  # protobuf's DecodeError, or a file that is not a model at all
        raise InvalidProtobuf(f"model {str(model_path)!r} is not an ONNX model: {e}") from e
    inputs = model_inputs(proto)
    external = any(t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer)
    # bytes travel through the object store to any node; a model with external data must be
    # read from its folder, which every node must then see
    shared: str | bytes = str(model_path.resolve()) if external else model_path.read_bytes()
    plan = plan_input(
        input, inputs, block_rows=BLOCKS_PER_BATCH * batch_size, min_blocks=2 * workers
    )
    started = time.perf_counter()
    with cluster(address) as ray:
        _check_resources(ray.cluster_resources(), workers, cpus_per_worker, gpus_per_worker)
        startup = time.perf_counter() - started
        began = time.perf_counter()
        outputs = predict(
            plan.dataset(cpus_per_worker, gpus_per_worker),
            shared,
            workers=workers,
            batch_size=batch_size,
            providers=providers,
            num_cpus=cpus_per_worker,
            num_gpus=gpus_per_worker,
            keep_columns=plan.keep_columns,
            predictor=predictor,
            predictor_kwargs=predictor_kwargs,
            whole_blocks=True,  # the plan's rows are files and row groups, one block each
        )
        outputs.context.enable_progress_bars = progress
        first: list[float] = []
        try:
            batches = outputs.iter_batches(batch_size=None, batch_format="numpy")
            per_worker = write_parquet(_stamp_first(batches, first), output, plan.rows)
        except Exception as e:
            ours = from_ray(e)
            if ours is not None:
                raise ours from e
            raise
        seconds = time.perf_counter() - began
    first_rows = (first[0] if first else time.perf_counter()) - began
    return BatchSummary(plan.rows, seconds, startup, first_rows, per_worker)


def _stamp_first(batches: Iterable[T], stamps: list[float]) -> Iterator[T]:
    """`batches`, noting in `stamps` when the first one arrived."""
    for batch in batches:
        if not stamps:
            stamps.append(time.perf_counter())
        yield batch


def _check_resources(resources: dict[str, float], workers: int, cpus: float, gpus: float) -> None:
    """Refuse a pool the cluster cannot hold: Ray would wait for it forever."""
    if workers < 1:
        raise InvalidArgument(f"workers must be at least 1, not {workers}")
    for name, each in (("CPU", cpus), ("GPU", gpus)):
        have = resources.get(name, 0.0)
        if workers * each > have:
            raise InvalidArgument(
                f"{workers} workers with {each:g} {name} each need {workers * each:g} {name}s; "
                f"the Ray cluster has {have:g}"
            )
