"""`predict(dataset, model)`: a Ray dataset's rows through a model on a pool of actors, with the
order, fault tolerance and sharing that batch scoring wants set once here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from onnx import ModelProto

from turnout.api.options import SessionOptions
from turnout.graph.errors import InvalidArgument
from turnout.tools.ray.predictor import DEFAULT_BATCH_SIZE, ProviderSpec, SessionPredictor
from turnout.tools.ray.runtime import require_ray

__all__ = ["predict"]


def predict(
    dataset: Any,
    model: Any,
    *,
    workers: int = 1,
    batch_size: int = DEFAULT_BATCH_SIZE,
    providers: Sequence[ProviderSpec] | None = None,
    provider_options: Sequence[dict[str, Any]] | None = None,
    session_options: SessionOptions | None = None,
    num_cpus: float = 1,
    num_gpus: float = 0,
    columns: Mapping[str, str] | None = None,
    keep_columns: Sequence[str] = (),
    predictor: type[SessionPredictor] = SessionPredictor,
    predictor_kwargs: Mapping[str, Any] | None = None,
    whole_blocks: bool = False,
) -> Any:
    """The lazily mapped `ray.data.Dataset` of `model`'s outputs for `dataset`'s rows.

    `workers` actors, each with `num_cpus` and `num_gpus` (a GPU actor gets the CuPy provider,
    when installed, unless `providers` says otherwise), each holding one session that uses
    `num_cpus` threads unless `session_options` says otherwise. A model given as bytes or a
    ModelProto is put in Ray's object store once.

    Outputs keep the input's row order: this sets `preserve_order` (and
    `raise_original_map_exception`, so that a failing batch raises `BatchError` naming its
    rows) on the dataset's DataContext, which Ray shares with the datasets it was derived from.
    A killed actor is restarted and its batch rerun: Ray Data's actor pools restart and retry
    without limit by default (its per-call settings for this are deprecated since Ray 2.60).

    `predictor` may be a subclass of `SessionPredictor` that adds pre- or post-processing, and
    `predictor_kwargs` its own constructor arguments. With `whole_blocks`, each of the
    dataset's blocks is handed to the predictor whole (it still runs the model in calls of
    `batch_size` rows): for datasets whose rows are work items that a fused read step turns
    into data, as `turnout batch`'s are, where Ray would otherwise bundle `batch_size` items
    into one task.
    """
    ray = require_ray()
    if workers < 1:
        raise InvalidArgument(f"workers must be at least 1, not {workers}")
    if isinstance(model, ModelProto):
        model = model.SerializeToString()
    if isinstance(model, bytes):
        model = ray.put(model)
    if session_options is None:
        session_options = SessionOptions()
        session_options.intra_op_num_threads = max(1, int(num_cpus))
    mapped = dataset.map_batches(
        predictor,
        fn_constructor_kwargs={
            "model": model,
            "providers": providers,
            "provider_options": provider_options,
            "session_options": session_options,
            "batch_size": batch_size,
            "columns": columns,
            "keep_columns": tuple(keep_columns),
            **(predictor_kwargs or {}),
        },
        batch_size=None if whole_blocks else batch_size,
        batch_format="numpy",
        zero_copy_batch=True,
        compute=ray.data.ActorPoolStrategy(size=workers),
        num_cpus=num_cpus,
        num_gpus=num_gpus,
    )
    mapped.context.execution_options.preserve_order = True
    mapped.context.raise_original_map_exception = True
    return mapped
