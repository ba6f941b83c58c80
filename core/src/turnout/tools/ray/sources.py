"""`turnout batch`'s INPUT as a Ray dataset of numbered rows: a Parquet file or folder of them,
or a folder of `.npy` files or images (one row per file, in name order).

The driver only plans (`plan_input`, before Ray starts, so a bad INPUT fails at once): it lists
files and Parquet row groups and numbers the rows, and the dataset holds only that plan. The
workers read: the read step asks for the same resources as the predictor, so Ray Data fuses it
into the predictor's actors. Rows then go from file to model in one process, no worker process
is started for reading, and reading never waits for a CPU the workers hold. On a cluster the
files must be where every node sees them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from turnout.graph.errors import InvalidArgument, NoSuchFile
from turnout.tools.ray.batching import InputSpec
from turnout.tools.ray.errors import BatchError
from turnout.tools.ray.predictor import ROW_COLUMN
from turnout.tools.ray.readers import (
    IMAGE_SUFFIXES,
    column_values,
    load_image,
    load_npy,
    stack_rows,
)
from turnout.tools.ray.runtime import require_ray

__all__ = ["PATH_COLUMN", "InputPlan", "plan_input"]

PATH_COLUMN = "path"
"""The file each row came from, for inputs that are folders of files."""


@dataclass(frozen=True)
class InputPlan:
    """A planned input: the work items (`items`, in `blocks` blocks, each a call of `reader`
    with `reader_kwargs`), the row count, and the columns to carry to the output."""

    items: list[dict[str, Any]]
    blocks: int
    reader: Callable[..., Any]
    reader_kwargs: dict[str, Any]
    rows: int
    keep_columns: tuple[str, ...]

    def dataset(self, num_cpus: float = 1, num_gpus: float = 0) -> Any:
        """The Ray dataset of numbered rows, columns named after the model's inputs; give it
        the predictor's `num_cpus` and `num_gpus`, so that Ray fuses reading into its actors."""
        ray = require_ray()
        return ray.data.from_items(self.items, override_num_blocks=self.blocks).map_batches(
            self.reader,
            fn_kwargs=self.reader_kwargs,
            batch_size=None,
            num_cpus=num_cpus,
            num_gpus=num_gpus,
        )


def plan_input(
    path: str | Path, inputs: Sequence[InputSpec], *, block_rows: int, min_blocks: int = 1
) -> InputPlan:
    """Plan reading `path` for a model with `inputs`, in blocks of about `block_rows` rows
    (at least `min_blocks` of them, so that every worker gets work)."""
    src = Path(path)
    if not src.exists():
        raise NoSuchFile(f"input {str(src)!r} does not exist")
    if src.is_file():
        if src.suffix != ".parquet":
            raise InvalidArgument(f"input {str(src)!r}: a file must be Parquet (.parquet)")
        return _parquet([src], inputs, block_rows, min_blocks)
    files = sorted(p for p in src.iterdir() if p.is_file() and not p.name.startswith("."))
    kinds = {
        "parquet": [p for p in files if p.suffix == ".parquet"],
        "npy": [p for p in files if p.suffix == ".npy"],
        "image": [p for p in files if p.suffix.lower() in IMAGE_SUFFIXES],
    }
    found = [k for k, v in kinds.items() if v]
    if len(found) != 1:
        what = "a mix of " + ", ".join(found) if found else "no .parquet, .npy or image files"
        raise InvalidArgument(f"input folder {str(src)!r} holds {what}; it must hold one kind")
    if found[0] == "parquet":
        return _parquet(kinds["parquet"], inputs, block_rows, min_blocks)
    return _files(kinds[found[0]], found[0], inputs, block_rows, min_blocks)


def _parquet(
    files: list[Path], inputs: Sequence[InputSpec], block_rows: int, min_blocks: int
) -> InputPlan:
    """One block per row group, or per part of one: a row group is cut (at multiples of
    `block_rows`) when there would be fewer than `min_blocks` blocks otherwise. Each part of a
    cut group decodes the group from its start, so only inputs with few groups are cut."""
    import pyarrow.parquet as pq

    columns: dict[str, str] | None = None
    groups: list[tuple[str, int, int]] = []
    for f in files:
        meta = pq.ParquetFile(f).metadata
        names = meta.schema.to_arrow_schema().names
        found = _input_columns(names, inputs, f)
        if columns is not None and found != columns:
            raise InvalidArgument(f"{str(f)!r} has other columns than {str(files[0])!r}")
        columns = found
        groups += [(str(f), g, meta.row_group(g).num_rows) for g in range(meta.num_row_groups)]
    rows = sum(n for _, _, n in groups)
    if not rows:
        raise InvalidArgument(f"input {str(files[0].parent)!r}: no rows")
    part = rows  # a whole group, unless there are too few groups
    if len(groups) < min_blocks:
        part = block_rows * max(1, math.ceil(rows / min_blocks / block_rows))
    fragments: list[dict[str, Any]] = []
    first = 0
    for path, group, n in groups:
        for skip in range(0, n, part):
            take = min(part, n - skip)
            fragments.append(
                {"path": path, "row_group": group, "first_row": first, "skip": skip, "rows": take}
            )
            first += take
    kwargs = {"columns": columns, "block_rows": block_rows}
    return InputPlan(fragments, len(fragments), _read_parquet, kwargs, rows, ())


def _input_columns(names: list[str], inputs: Sequence[InputSpec], f: Path) -> dict[str, str]:
    """Input name -> column: by name; a model with one input also takes a file's only column."""
    if all(s.name in names for s in inputs):
        return {s.name: s.name for s in inputs}
    data = [n for n in names if n != ROW_COLUMN]
    if len(inputs) == 1 and len(data) == 1:
        return {inputs[0].name: data[0]}
    wanted = [s.name for s in inputs]
    raise InvalidArgument(f"{str(f)!r} has columns {names}; the model needs columns {wanted}")


def _read_parquet(
    batch: Mapping[str, np.ndarray], columns: dict[str, str], block_rows: int
) -> Iterator[dict[str, np.ndarray]]:
    """Reader: rows `skip` to `skip + rows` of a row group, streamed in pieces of
    `block_rows` rows, columns renamed to the model's inputs."""
    import pyarrow.parquet as pq

    fragments = zip(
        batch["path"], batch["row_group"], batch["first_row"], batch["skip"], batch["rows"]
    )
    for path, group, first, skip, rows in fragments:
        reader = pq.ParquetFile(str(path))
        chunks = reader.iter_batches(
            batch_size=block_rows, row_groups=[int(group)], columns=list(columns.values())
        )
        offset, at, stop = int(first), 0, int(skip) + int(rows)
        for piece in chunks:
            start, at = at, at + piece.num_rows
            if at <= skip:
                continue
            if start >= stop:
                break
            chunk = piece.slice(max(0, int(skip) - start), min(at, stop) - max(start, int(skip)))
            n = chunk.num_rows
            out = {ROW_COLUMN: np.arange(offset, offset + n, dtype=np.int64)}
            try:
                for name, column in columns.items():
                    out[name] = column_values(chunk.column(column), column, offset)
            except Exception as e:
                raise BatchError(offset, offset + n - 1, f"{type(e).__name__}: {e}") from e
            yield out
            offset += n


def _files(
    files: list[Path], kind: str, inputs: Sequence[InputSpec], block_rows: int, min_blocks: int
) -> InputPlan:
    if len(inputs) != 1:
        raise InvalidArgument(
            f"a folder of {kind} files feeds one input; the model has {[s.name for s in inputs]}"
        )
    items = [{ROW_COLUMN: i, PATH_COLUMN: str(p)} for i, p in enumerate(files)]
    blocks = min(len(items), max(min_blocks, math.ceil(len(items) / block_rows)))
    kwargs = {"spec": inputs[0], "kind": kind}
    return InputPlan(items, blocks, _load_files, kwargs, len(items), (PATH_COLUMN,))


def _load_files(batch: Mapping[str, np.ndarray], spec: InputSpec, kind: str) -> dict[str, Any]:
    """Reader: one row per file, in the column named after the model's input."""
    ids, paths = batch[ROW_COLUMN], batch[PATH_COLUMN]
    rows = []
    for i, p in zip(ids, paths):
        try:
            rows.append(load_npy(p) if kind == "npy" else load_image(p, spec))
        except Exception as e:
            raise BatchError(int(i), int(i), f"{p}: {type(e).__name__}: {e}") from e
    return {ROW_COLUMN: ids, PATH_COLUMN: paths, spec.name: stack_rows(rows)}
