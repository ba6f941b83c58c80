"""Batches to feeds and back, and the predictor called in-process (no Ray needed)."""

from __future__ import annotations

import pickle
import subprocess
import sys

import numpy as np
import pytest

from turnout import InferenceSession, InvalidArgument, SessionOptions
from turnout.tools.models import build_tiny_cnn
from turnout.tools.ray import BatchError, SessionPredictor
from turnout.tools.ray.batching import InputSpec, fixed_batch, model_inputs, run_in_chunks, to_feed
from turnout.tools.ray.predictor import BOOKKEEPING_COLUMNS, choose_providers
from turnout_testbed.zoo import mlp, small_classifier

F32 = np.dtype(np.float32)


def one_thread() -> SessionOptions:
    options = SessionOptions()
    options.intra_op_num_threads = 1
    return options


def test_model_inputs_and_fixed_batch() -> None:
    (spec,) = model_inputs(mlp(batch=64))
    assert (spec.name, spec.dtype, spec.shape) == ("x", F32, (64, 784))
    assert fixed_batch([spec]) == 64
    (cnn,) = model_inputs(build_tiny_cnn())
    assert cnn.shape == ("batch", 1, 28, 28) and cnn.row_shape == (1, 28, 28)
    assert fixed_batch([cnn]) is None
    with pytest.raises(InvalidArgument, match="different batch sizes"):
        fixed_batch([InputSpec("a", F32, (2, 3)), InputSpec("b", F32, (4, 3))])


def test_to_feed_reshapes_flat_rows(rng: np.random.Generator) -> None:
    spec = InputSpec("image", F32, ("batch", 1, 28, 28))
    flat = rng.random((5, 784), dtype=np.float32)
    feed = to_feed(flat, spec, np.arange(5))
    assert feed.shape == (5, 1, 28, 28)
    np.testing.assert_array_equal(feed.reshape(5, -1), flat)


def test_to_feed_names_the_row_that_does_not_fit(rng: np.random.Generator) -> None:
    spec = InputSpec("x", F32, ("n", 4))
    ragged = np.empty(3, dtype=object)
    ragged[:] = [rng.random(4, dtype=np.float32), rng.random(4, dtype=np.float32), np.zeros(3, F32)]
    with pytest.raises(InvalidArgument, match=r"row 12 is float32 \[3\], row 10 is float32 \[4\]"):
        to_feed(ragged, spec, np.arange(10, 13))
    with pytest.raises(InvalidArgument, match="takes float32, its column holds float64"):
        to_feed(np.zeros((2, 4)), spec, np.arange(2))
    with pytest.raises(
        InvalidArgument, match=r"rows of shape \[4\], its column's rows have shape \[5\]"
    ):
        to_feed(np.zeros((2, 5), F32), spec, np.arange(2))


def test_run_in_chunks_pads_and_trims(rng: np.random.Generator) -> None:
    calls: list[int] = []

    def run(feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        calls.append(len(feeds["x"]))
        return [feeds["x"] * 2]

    x = rng.random((10, 3), dtype=np.float32)
    (out,) = run_in_chunks(run, {"x": x}, 10, 4, ["y"])
    assert calls == [4, 4, 4]
    np.testing.assert_array_equal(out, x * 2)


def test_run_in_chunks_needs_rows_first() -> None:
    with pytest.raises(InvalidArgument, match="output 'total' is float32 \\[\\] for 4 rows"):
        run_in_chunks(lambda f: [np.array(1, F32)], {"x": np.zeros((4, 2))}, 4, 4, ["total"])


def test_predictor_equals_a_session_on_fixed_batches(rng: np.random.Generator) -> None:
    model = mlp(batch=8).SerializeToString()
    predictor = SessionPredictor(model, session_options=one_thread(), batch_size=100)
    assert predictor.rows_per_call == 8  # the model fixes it
    x = rng.random((20, 784), dtype=np.float32)
    out = predictor({"row": np.arange(100, 120), "x": x, "other": np.zeros(20)})
    assert sorted(out) == sorted(["row", "logits", *BOOKKEEPING_COLUMNS])
    np.testing.assert_array_equal(out["row"], np.arange(100, 120))
    session = InferenceSession(model, one_thread())
    padded = np.concatenate([x, np.repeat(x[-1:], 4, axis=0)])
    expected = np.concatenate([session.run(None, {"x": padded[i : i + 8]})[0] for i in (0, 8, 16)])
    np.testing.assert_array_equal(out["logits"], expected[:20])


def test_predictor_keeps_columns_and_maps_inputs(rng: np.random.Generator) -> None:
    predictor = SessionPredictor(
        small_classifier(width=4), batch_size=3, columns={"x": "features"}, keep_columns=["path"]
    )
    batch = {
        "row": np.arange(5),
        "path": np.array([f"f{i}" for i in range(5)]),
        "features": rng.random((5, 4), dtype=np.float32),
    }
    out = predictor(batch)
    assert out["y"].shape == (5, 4)
    np.testing.assert_array_equal(out["path"], batch["path"])


def test_failing_batch_names_its_rows() -> None:
    predictor = SessionPredictor(small_classifier(width=4), batch_size=4)
    with pytest.raises(BatchError, match=r"rows 40-44 failed: InvalidArgument: input 'x'") as e:
        predictor({"row": np.arange(40, 45), "x": np.zeros((5, 4), np.float64)})
    assert (e.value.first_row, e.value.last_row) == (40, 44)
    with pytest.raises(BatchError, match="no column 'x' for model input 'x'"):
        predictor({"row": np.arange(2), "y": np.zeros((2, 4), np.float32)})
    with pytest.raises(BatchError, match="positions in the batch: no 'row' column"):
        predictor({"x": np.zeros((2, 4), np.float64)})


def test_batch_error_survives_pickling() -> None:
    err = pickle.loads(pickle.dumps(BatchError(3, 9, "ValueError: bad")))
    assert (err.first_row, err.last_row, err.error, str(err)) == (
        3,
        9,
        "ValueError: bad",
        "rows 3-9 failed: ValueError: bad",
    )


def test_bad_predictor_arguments() -> None:
    with pytest.raises(InvalidArgument, match="batch_size must be at least 1"):
        SessionPredictor(small_classifier(), batch_size=0)
    with pytest.raises(InvalidArgument, match="not int"):
        SessionPredictor(3)


def test_gpu_actors_take_the_cupy_provider_when_it_exists() -> None:
    installed = ["CuPyExecutionProvider", "CPUExecutionProvider"]
    assert choose_providers(None, True, installed) == installed
    assert choose_providers(None, True, ["CPUExecutionProvider"]) is None
    assert choose_providers(None, False, installed) is None
    assert choose_providers(["numba"], True, installed) == ["numba"]


def test_importing_turnout_or_its_cli_does_not_import_ray() -> None:
    code = (
        "import sys, turnout, turnout.tools.ray\n"
        "from turnout.tools.cli import build_parser\n"
        "build_parser()\n"
        "assert 'ray' not in sys.modules and 'pyarrow' not in sys.modules, 'imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_errors_from_ray_come_back_typed() -> None:
    from turnout import Fail
    from turnout.tools.ray.errors import from_ray

    class TaskError(Exception):  # what Ray raises for a task: the worker's error as `cause`
        cause = BatchError(1, 2, "ValueError: x")

    class InitError(Exception):  # an actor whose constructor raised: only text comes back
        actor_init_failed = True

    assert from_ray(TaskError()) is TaskError.cause
    err = from_ray(InitError("Traceback ...\n  File ...\nturnout.graph.errors.InvalidGraph: no\n"))
    assert isinstance(err, Fail)
    assert str(err) == "a worker could not build its session: turnout.graph.errors.InvalidGraph: no"
    assert from_ray(ValueError("other")) is None
