"""Reading inputs (Parquet columns, .npy files, images), planning them, and writing the output
file, without Ray."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from turnout import Fail, InvalidArgument, NoSuchFile
from turnout.tools.ray.batching import InputSpec
from turnout.tools.ray.predictor import SECONDS_COLUMN, WORKER_COLUMN
from turnout.tools.ray.readers import column_values, image_layout, load_image, stack_rows
from turnout.tools.ray.sink import write_parquet
from turnout.tools.ray.sources import plan_input
from turnout.tools.ray.summary import BatchSummary, WorkerStats

pa = pytest.importorskip("pyarrow", reason="Parquet needs pyarrow (it comes with turnout[ray])")
pq = pytest.importorskip("pyarrow.parquet", reason="Parquet needs pyarrow")

F32 = np.dtype(np.float32)


def test_columns_of_lists_and_tensors(rng: np.random.Generator) -> None:
    x = rng.random((6, 2, 3), dtype=np.float32)
    fixed = pa.FixedSizeListArray.from_arrays(pa.FixedSizeListArray.from_arrays(x.ravel(), 3), 2)
    np.testing.assert_array_equal(column_values(fixed, "x", 0), x)
    np.testing.assert_array_equal(column_values(fixed.slice(2), "x", 2), x[2:])
    tensor = pa.FixedShapeTensorArray.from_numpy_ndarray(x)
    np.testing.assert_array_equal(column_values(pa.chunked_array([tensor]), "x", 0), x)
    lists = pa.array(x.reshape(6, 6).tolist(), type=pa.list_(pa.float32()))
    np.testing.assert_array_equal(column_values(lists, "x", 0), x.reshape(6, 6))
    np.testing.assert_array_equal(column_values(pa.array([1, 2, 3]), "n", 0), [1, 2, 3])


def test_ragged_and_null_rows() -> None:
    ragged = column_values(pa.array([[1.0, 2.0], [3.0]]), "x", 0)
    assert ragged.dtype == object and [len(r) for r in ragged] == [2, 1]
    with pytest.raises(InvalidArgument, match="column 'x': row 11 is null"):
        column_values(pa.array([[1.0], None]), "x", 10)


def test_stack_rows() -> None:
    assert stack_rows([np.zeros(2), np.ones(2)]).shape == (2, 2)
    mixed = stack_rows([np.zeros(2), np.ones(2, np.float32)])
    assert mixed.dtype == object and len(mixed) == 2


def test_images_follow_the_input_layout(tmp_path: Path, rng: np.random.Generator) -> None:
    from PIL import Image

    pixels = rng.integers(0, 256, (20, 30, 3), dtype=np.uint8)
    path = tmp_path / "a.png"
    Image.fromarray(pixels).save(path)
    nchw = load_image(path, InputSpec("image", F32, ("n", 3, 20, 30)))
    assert nchw.dtype == F32 and nchw.shape == (3, 20, 30)
    np.testing.assert_array_equal(nchw, pixels.transpose(2, 0, 1).astype(F32) / F32.type(255))
    nhwc = load_image(path, InputSpec("image", np.dtype(np.uint8), ("n", 20, 30, 3)))
    np.testing.assert_array_equal(nhwc, pixels)
    gray = load_image(path, InputSpec("image", F32, ("n", 1, 10, 15)))
    assert gray.shape == (1, 10, 15)
    with pytest.raises(InvalidArgument, match="no channel axis"):
        image_layout(InputSpec("image", F32, ("n", 5, 8, 8)))


def _input_file(path: Path, rows: int, row_group_size: int) -> Path:
    x = np.arange(rows * 4, dtype=np.float32).reshape(rows, 4)
    table = pa.table({"features": pa.FixedSizeListArray.from_arrays(x.ravel(), 4)})
    pq.write_table(table, path, row_group_size=row_group_size)
    return path


def test_parquet_plan_numbers_rows_across_files(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    _input_file(folder / "a.parquet", 10, 4)
    _input_file(folder / "b.parquet", 5, 4)
    spec = InputSpec("x", F32, ("n", 4))
    plan = plan_input(folder, [spec], block_rows=3)
    assert plan.rows == 15 and plan.blocks == 5
    assert [i["first_row"] for i in plan.items] == [0, 4, 8, 10, 14]
    pieces = _read(plan, plan.items[1])
    assert [p["row"].tolist() for p in pieces] == [[4, 5, 6], [7]]
    assert pieces[0]["x"].shape == (3, 4)  # the file's only column feeds the only input


def _read(plan: Any, item: dict[str, Any]) -> list[dict[str, np.ndarray]]:
    return list(plan.reader({k: np.array([v]) for k, v in item.items()}, **plan.reader_kwargs))


def test_a_lone_row_group_is_cut_so_every_worker_gets_rows(tmp_path: Path) -> None:
    src = _input_file(tmp_path / "one.parquet", 20, 100)
    plan = plan_input(src, [InputSpec("x", F32, ("n", 4))], block_rows=3, min_blocks=4)
    assert [(i["first_row"], i["skip"], i["rows"]) for i in plan.items] == [
        (0, 0, 6),
        (6, 6, 6),
        (12, 12, 6),
        (18, 18, 2),
    ]
    for item in plan.items:
        ids = np.concatenate([p["row"] for p in _read(plan, item)])
        values = np.concatenate([p["x"] for p in _read(plan, item)])
        np.testing.assert_array_equal(
            ids, np.arange(item["first_row"], item["first_row"] + item["rows"])
        )
        np.testing.assert_array_equal(values[:, 0], ids * 4)


def test_folder_plans(tmp_path: Path) -> None:
    for i in range(5):
        np.save(tmp_path / f"{i:02}.npy", np.full(3, i, np.float32))
    spec = InputSpec("x", F32, ("n", 3))
    plan = plan_input(tmp_path, [spec], block_rows=2, min_blocks=4)
    assert (plan.rows, plan.blocks, plan.keep_columns) == (5, 4, ("path",))
    batch = {k: np.array([item[k] for item in plan.items[:2]]) for k in ("row", "path")}
    loaded = plan.reader(batch, **plan.reader_kwargs)
    np.testing.assert_array_equal(loaded["x"], [[0, 0, 0], [1, 1, 1]])
    (tmp_path / "x.png").write_bytes(b"")
    with pytest.raises(InvalidArgument, match="a mix of npy, image"):
        plan_input(tmp_path, [spec], block_rows=2)
    with pytest.raises(NoSuchFile, match="does not exist"):
        plan_input(tmp_path / "missing", [spec], block_rows=2)


def test_parquet_plan_refuses_unknown_columns(tmp_path: Path) -> None:
    path = tmp_path / "two.parquet"
    pq.write_table(pa.table({"a": [1.0], "b": [2.0]}), path)
    with pytest.raises(InvalidArgument, match=r"has columns \['a', 'b'\]; the model needs"):
        plan_input(path, [InputSpec("x", F32, ("n",))], block_rows=2)


def _batch(rows: range, worker: str) -> dict[str, np.ndarray]:
    ids = np.arange(rows.start, rows.stop)
    return {
        "row": ids,
        "y": np.stack([ids, ids]).T.astype(np.float32),
        WORKER_COLUMN: np.full(len(ids), worker),
        SECONDS_COLUMN: np.full(len(ids), 0.5),
    }


def test_output_file_in_row_order(tmp_path: Path) -> None:
    out = tmp_path / "out.parquet"
    counts = write_parquet([_batch(range(0, 3), "a"), _batch(range(3, 5), "b")], out, 5)
    assert counts == {"a": WorkerStats(3, 1.5), "b": WorkerStats(2, 1.0)}
    table = pq.read_table(out)
    assert table.column_names == ["row", "y"]
    np.testing.assert_array_equal(table.column("row").to_numpy(), np.arange(5))
    y = table.column("y").combine_chunks().to_numpy_ndarray()
    np.testing.assert_array_equal(y[:, 0], np.arange(5))


@pytest.mark.parametrize(
    ("batches", "message"),
    [
        ([range(0, 3), range(4, 6)], "out of sequence after row 2"),
        ([range(0, 3), range(2, 6)], "out of sequence after row 2"),
        ([range(0, 3)], "the output has 3 rows, the input 6"),
    ],
)
def test_a_lost_or_repeated_row_fails_and_leaves_no_file(
    tmp_path: Path, batches: list[range], message: str
) -> None:
    out = tmp_path / "out.parquet"
    with pytest.raises(Fail, match=message):
        write_parquet([_batch(r, "a") for r in batches], out, 6)
    assert list(tmp_path.iterdir()) == []


def test_summary_lines() -> None:
    workers = {"w2": WorkerStats(400, 0.5), "w1": WorkerStats(600, 1.5)}
    lines = BatchSummary(1000, 2.0, 4.0, 0.5, workers).lines()
    assert lines == [
        "rows: 1000",
        "time: 2.00 s (500 rows/s); first rows after 0.50 s; Ray startup 4.00 s",
        "worker w1: 600 rows, 300 rows/s; model busy 1.50 s (400 rows/s while busy)",
        "worker w2: 400 rows, 200 rows/s; model busy 0.50 s (800 rows/s while busy)",
    ]
