"""Batch runs on an embedded Ray with two CPUs: outputs match one in-process session's row for
row, in input order; a failing batch fails the run and names its rows; a worker killed part way
costs no row and repeats none. The long runs (100,000 rows, 10,000 images, the killed worker)
are marked slow."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from turnout import Fail
from turnout.tools.cli import main
from turnout.tools.models import shipped_model
from turnout.tools.ray import BatchError, SessionPredictor, predict, run_batch
from turnout.tools.ray.batching import InputSpec
from turnout.tools.ray.readers import load_image
from turnout_testbed.zoo import mlp

# Ray warns about its own deprecated settings when it builds its default context
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:ray")

pq = pytest.importorskip(
    "pyarrow.parquet", reason="Parquet needs pyarrow (comes with turnout[ray])"
)

TINY_CNN = shipped_model("tiny_cnn")


def read_output(path: Path) -> dict[str, np.ndarray]:
    table = pq.read_table(path)
    out = {}
    for name in table.column_names:
        column = table.column(name).combine_chunks()
        out[name] = (
            column.to_numpy_ndarray()
            if hasattr(column, "to_numpy_ndarray")
            else column.to_numpy(zero_copy_only=False)
        )
    return out


def assert_rows_match(got: np.ndarray, expected: np.ndarray) -> None:
    """The same rows in the same order. Close, not bit for bit: a Ray worker process's BLAS may
    take another code path than this process's for the same product (seen on an AMD EPYC VM:
    1 float32 ulp on the tiny CNN's probabilities, 5e-6 on the MLP's logits), while a lost,
    repeated or reordered row of random inputs is off by far more."""
    assert got.shape == expected.shape and got.dtype == expected.dtype
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def digits(rows: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).random((rows, 784), dtype=np.float32)


def test_cli_scores_a_parquet_file(
    ray_cluster: Any,
    tmp_path: Path,
    parquet_input: Callable[..., Path],
    reference: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    x = digits(600, 1)
    src = parquet_input(tmp_path / "in.parquet", {"image": x}, row_group_size=200)
    out = tmp_path / "out.parquet"
    argv = ["batch", str(TINY_CNN), str(src), str(out), "--workers", "2", "--batch-size", "64"]
    assert main([*argv, "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "rows: 600" in printed and "worker " in printed
    got = read_output(out)
    assert list(got) == ["row", "probabilities"]
    np.testing.assert_array_equal(got["row"], np.arange(600))
    (expected,) = reference(str(TINY_CNN), {"image": x.reshape(600, 1, 28, 28)}, 64)
    assert_rows_match(got["probabilities"], expected)


def test_a_failing_batch_fails_the_run_and_names_its_rows(
    ray_cluster: Any, tmp_path: Path, parquet_input: Callable[..., Path]
) -> None:
    import pyarrow as pa

    rows = [r.tolist() for r in digits(300, 2)]
    rows[250] = rows[250][:783]
    column = pa.array(rows, type=pa.list_(pa.float32()))
    src = parquet_input(tmp_path / "in.parquet", {"image": column}, row_group_size=100)
    out = tmp_path / "out.parquet"
    with pytest.raises(BatchError, match=r"input 'image': row 250 is float32 \[783\]") as e:
        run_batch(TINY_CNN, src, out, batch_size=64, progress=False)
    assert 200 <= e.value.first_row <= 250 <= e.value.last_row <= 299  # its row group at most
    assert list(tmp_path.iterdir()) == [src]


@pytest.mark.slow
def test_100k_rows_through_the_mlp(
    ray_cluster: Any, tmp_path: Path, parquet_input: Callable[..., Path], reference: Any
) -> None:
    model = tmp_path / "mlp.onnx"
    model.write_bytes(mlp(batch=64).SerializeToString())
    x = digits(100_000, 3)
    src = parquet_input(tmp_path / "in.parquet", {"x": x}, row_group_size=10_000)
    summary = run_batch(
        model, src, tmp_path / "out.parquet", workers=2, batch_size=512, progress=False
    )
    assert summary.rows == sum(w.rows for w in summary.per_worker.values()) == 100_000
    got = read_output(tmp_path / "out.parquet")
    np.testing.assert_array_equal(got["row"], np.arange(100_000))
    (expected,) = reference(str(model), {"x": x}, 64)
    assert_rows_match(got["logits"], expected)


@pytest.mark.slow
def test_10k_images_through_the_tiny_cnn(ray_cluster: Any, tmp_path: Path, reference: Any) -> None:
    from PIL import Image

    folder = tmp_path / "images"
    folder.mkdir()
    pixels = np.random.default_rng(4).integers(0, 256, (10_000, 28, 28), dtype=np.uint8)
    for i, p in enumerate(pixels):
        Image.fromarray(p).save(folder / f"{i:05}.png")
    out = tmp_path / "out.parquet"
    summary = run_batch(TINY_CNN, folder, out, workers=2, batch_size=128, progress=False)
    assert summary.rows == 10_000
    got = read_output(out)
    np.testing.assert_array_equal(got["row"], np.arange(10_000))
    assert got["path"][123] == str(folder / "00123.png")
    spec = InputSpec("image", np.dtype(np.float32), ("batch", 1, 28, 28))
    images = np.stack([load_image(folder / f"{i:05}.png", spec) for i in range(10_000)])
    np.testing.assert_array_equal(images[:, 0], pixels.astype(np.float32) / np.float32(255))
    (expected,) = reference(str(TINY_CNN), {"image": images}, 128)
    assert_rows_match(got["probabilities"], expected)


class KillOnce(SessionPredictor):
    """Kills its own worker process (SIGKILL: no cleanup, as the OOM killer or a lost node
    would) on the first batch past `at_row`, the first time only (a marker file remembers)."""

    def __init__(self, model: Any, *, marker: str, at_row: int, **kwargs: Any) -> None:
        super().__init__(model, **kwargs)
        self.marker, self.at_row = marker, at_row

    def __call__(self, batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if batch["row"][-1] >= self.at_row and not os.path.exists(self.marker):
            Path(self.marker).write_text(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)
        return super().__call__(batch)


@pytest.mark.slow
def test_a_killed_worker_loses_no_row_and_repeats_none(
    ray_cluster: Any, tmp_path: Path, parquet_input: Callable[..., Path], reference: Any
) -> None:
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers can't import tests
    x = digits(6000, 5)
    dataset = ray_cluster.data.from_items(
        [{"row": i, "image": x[i]} for i in range(6000)], override_num_blocks=12
    )
    marker = tmp_path / "killed"
    outputs = predict(
        dataset,
        ray_cluster.put(TINY_CNN.read_bytes()),
        workers=2,
        batch_size=100,
        predictor=KillOnce,
        predictor_kwargs={"marker": str(marker), "at_row": 3000},
    )
    rows, probabilities = [], []
    for batch in outputs.iter_batches(batch_size=None, batch_format="numpy"):
        rows.append(batch["row"])
        probabilities.append(batch["probabilities"])
    assert marker.exists(), "no worker was killed"
    ids = np.concatenate(rows)
    assert len(ids) == 6000 and len(np.unique(ids)) == 6000
    np.testing.assert_array_equal(ids, np.arange(6000))
    (expected,) = reference(str(TINY_CNN), {"image": x.reshape(-1, 1, 28, 28)}, 100)
    assert_rows_match(np.concatenate(probabilities), expected)


@pytest.mark.slow
def test_a_model_the_workers_cannot_load_fails_the_run(
    ray_cluster: Any, tmp_path: Path, parquet_input: Callable[..., Path]
) -> None:
    from onnx import TensorProto, helper, save

    node = helper.make_node("Bar", ["x"], ["y"], domain="no.such.domain")
    info = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["n", 4]) for n in "xy"]
    graph = helper.make_graph([node], "g", info[:1], info[1:])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("no.such.domain", 1)]
    model = tmp_path / "bad.onnx"
    save(helper.make_model(graph, opset_imports=opsets), model)
    src = parquet_input(tmp_path / "in.parquet", {"x": np.zeros((8, 4), np.float32)}, 8)
    with pytest.raises(Fail, match=r"could not build its session: .*unknown operator domain"):
        run_batch(model, src, tmp_path / "out.parquet", progress=False)


@pytest.mark.slow
def test_a_folder_of_npy_files(ray_cluster: Any, tmp_path: Path, reference: Any) -> None:
    folder = tmp_path / "rows"
    folder.mkdir()
    x = digits(200, 6)
    for i, row in enumerate(x):
        np.save(folder / f"{i:03}.npy", row)
    out = tmp_path / "out.parquet"
    summary = run_batch(TINY_CNN, folder, out, workers=2, batch_size=32, progress=False)
    assert summary.rows == 200
    got = read_output(out)
    assert list(got) == ["row", "path", "probabilities"]
    assert got["path"][7] == str(folder / "007.npy")
    (expected,) = reference(str(TINY_CNN), {"image": x.reshape(200, 1, 28, 28)}, 32)
    assert_rows_match(got["probabilities"], expected)
