"""Ray batches to model feeds, and model outputs back to columns.

A model call always gets the same number of rows: the model's own batch size when its first
dimension is fixed, else the predictor's `batch_size`. A batch is split into such chunks and the
last one is padded by repeating its last row; the padded rows' outputs are dropped. Besides
fitting fixed-batch models, this makes every row's output independent of where Ray cut the
dataset into batches: some kernels (the numpy convolution, for one) round differently at
different batch sizes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from onnx import ModelProto

from turnout.graph.dtypes import ELEM_TYPE_NAMES, np_dtype
from turnout.graph.errors import InvalidArgument

__all__ = ["InputSpec", "fixed_batch", "model_inputs", "run_in_chunks", "to_feed"]

_DTYPES = {f"tensor({name})": np_dtype(code) for code, name in ELEM_TYPE_NAMES.items()}

RunFn = Callable[[dict[str, np.ndarray]], Sequence[Any]]


@dataclass(frozen=True)
class InputSpec:
    """A model input as a column must fill it: name, element dtype, shape (batch axis first)."""

    name: str
    dtype: np.dtype[Any]
    shape: tuple[int | str | None, ...]

    @staticmethod
    def of(name: str, type_str: str, shape: Sequence[int | str | None]) -> InputSpec:
        """From a NodeArg's fields; only tensor inputs can be fed from columns."""
        if type_str not in _DTYPES:
            raise InvalidArgument(
                f"input {name!r} has type {type_str}; only tensors come from columns"
            )
        return InputSpec(name, _DTYPES[type_str], tuple(shape))

    @property
    def row_shape(self) -> tuple[int, ...] | None:
        """Shape of one row when every dimension past the batch axis is fixed, else None."""
        rest = self.shape[1:]
        if not self.shape or not all(isinstance(d, int) for d in rest):
            return None
        return tuple(int(d) for d in rest)  # type: ignore[arg-type]


def model_inputs(model: ModelProto) -> list[InputSpec]:
    """The inputs a model's feeds fill (graph inputs that are not initializers), read from the
    proto without building a session (the driver only needs names, types and shapes)."""
    graph = model.graph
    initialized = {t.name for t in graph.initializer}
    specs = []
    for vi in graph.input:
        if vi.name in initialized:
            continue
        if not vi.type.HasField("tensor_type"):
            raise InvalidArgument(
                f"input {vi.name!r} is not a tensor; only tensors come from columns"
            )
        tensor = vi.type.tensor_type
        dims = [
            d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
            for d in tensor.shape.dim
        ]
        specs.append(InputSpec(vi.name, np_dtype(tensor.elem_type), tuple(dims)))
    return specs


def fixed_batch(specs: Sequence[InputSpec]) -> int | None:
    """The batch size the model fixes in its inputs' first dimension, or None when it is free."""
    sizes = {s.shape[0] for s in specs if s.shape and isinstance(s.shape[0], int)}
    if len(sizes) > 1:
        raise InvalidArgument(f"the model's inputs fix different batch sizes: {sorted(sizes)}")
    return int(sizes.pop()) if sizes else None


def to_feed(column: np.ndarray, spec: InputSpec, ids: np.ndarray) -> np.ndarray:
    """One input's feed from its column: ragged rows stacked, dtype checked, rows reshaped to
    the model's row shape when they hold the same number of elements (a flat 784 to 1x28x28).
    Errors name the first offending row by its id."""
    values = column if spec.dtype == np.dtype(object) else _stack(column, spec.name, ids)
    if values.dtype != spec.dtype:
        raise InvalidArgument(
            f"input {spec.name!r} takes {spec.dtype}, its column holds {values.dtype}"
        )
    row_shape = spec.row_shape
    if row_shape is not None and values.shape[1:] != row_shape:
        if math.prod(values.shape[1:]) != math.prod(row_shape):
            raise InvalidArgument(
                f"input {spec.name!r} takes rows of shape {list(row_shape)}, "
                f"its column's rows have shape {list(values.shape[1:])}"
            )
        values = values.reshape((len(values), *row_shape))
    return values


def _stack(column: np.ndarray, name: str, ids: np.ndarray) -> np.ndarray:
    """A column whose rows Ray kept as separate arrays (ragged: object dtype) as one array."""
    if column.dtype != np.dtype(object):
        return column
    rows = [np.asarray(r) for r in column]
    if not rows:
        return np.asarray(column)
    first = rows[0]
    for i, r in enumerate(rows):
        if r.shape != first.shape or r.dtype != first.dtype:
            raise InvalidArgument(
                f"input {name!r}: row {int(ids[i])} is {r.dtype} {list(r.shape)}, "
                f"row {int(ids[0])} is {first.dtype} {list(first.shape)}"
            )
    return np.stack(rows)


def run_in_chunks(
    run: RunFn, feeds: Mapping[str, np.ndarray], rows: int, size: int, output_names: Sequence[str]
) -> list[np.ndarray]:
    """Run `rows` rows in calls of exactly `size` rows (the last padded), outputs trimmed and
    joined. Every output must be a tensor with the batch axis first."""
    parts: list[list[np.ndarray]] = []
    for start in range(0, max(rows, 1), size):
        stop = min(start + size, rows)
        outs = run({k: _pad(v[start:stop], size) for k, v in feeds.items()})
        for name, out in zip(output_names, outs):
            if not isinstance(out, np.ndarray) or out.ndim == 0 or out.shape[0] != size:
                got = (
                    f"{out.dtype} {list(out.shape)}"
                    if isinstance(out, np.ndarray)
                    else type(out).__name__
                )
                raise InvalidArgument(
                    f"output {name!r} is {got} for {size} rows: a column needs the rows first"
                )
        parts.append([out[: stop - start] for out in outs])
    return [np.concatenate(p) for p in zip(*parts)]


def _pad(values: np.ndarray, size: int) -> np.ndarray:
    """`values` grown to `size` rows by repeating its last row (a real row, so padding cannot
    produce inputs the model has never seen, such as zeros where it divides)."""
    missing = size - len(values)
    if missing == 0:
        return values
    if len(values) == 0:
        return np.zeros((size, *values.shape[1:]), values.dtype)
    return np.concatenate([values, np.repeat(values[-1:], missing, axis=0)])
