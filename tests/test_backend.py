"""turnout.api.backend through onnx's own BackendTest runner, and its prepare/run_model/run_node."""

from __future__ import annotations

import importlib
import re
import unittest
import warnings
from unittest import mock

import numpy as np
import onnx
import onnx.backend.test
import pytest
from onnx import TensorProto, helper
from onnx.backend.test import loader

import turnout.api.backend as tb

OPS = ("relu", "add", "conv", "gemm")


def _node_cases_for(ops: tuple[str, ...]):
    """Only the node-case modules of `ops`: importing all of them costs 15-40 s."""

    def load_model_tests(data_dir: str = loader.DATA_DIR, kind: str | None = None):
        if kind != "node":
            return loader.load_model_tests(data_dir, kind)
        for op in ops:
            importlib.import_module(f"onnx.backend.test.case.node.{op}")
        from onnx.backend.test.case.node import _NodeTestCases

        return _NodeTestCases

    return load_model_tests


def _backend_tests() -> list[tuple[type[unittest.TestCase], str]]:
    with (
        warnings.catch_warnings(),
        np.errstate(all="ignore"),
        mock.patch("onnx.backend.test.runner.load_model_tests", _node_cases_for(OPS)),
    ):
        warnings.simplefilter("ignore")
        bt = onnx.backend.test.BackendTest(tb.TurnoutBackend, __name__)
    pattern = re.compile(rf"test_({'|'.join(OPS)})_")
    bt.include(pattern.pattern)  # the runner skips everything else; collect only what runs
    return [
        (cls, name)
        for cls in bt.test_cases.values()
        for name in unittest.defaultTestLoader.getTestCaseNames(cls)
        if name.endswith("_cpu") and pattern.search(name)
    ]


TESTS = _backend_tests()


def test_backend_test_selection_is_not_empty() -> None:
    names = {name for _, name in TESTS}
    for op in OPS:
        assert any(n.startswith(f"test_{op}_") for n in names), op
    assert len(TESTS) >= 20


@pytest.mark.parametrize("cls, name", TESTS, ids=[n for _, n in TESTS])
def test_onnx_backend_node_case(cls: type[unittest.TestCase], name: str) -> None:
    result = unittest.TestResult()
    cls(name).run(result)
    problems = [tb_text for _, tb_text in result.failures + result.errors]
    assert not problems, problems[0]
    assert not result.skipped, result.skipped
    assert result.testsRun == 1


def _add_model(with_initializer_input: bool = False) -> onnx.ModelProto:
    inputs = [
        helper.make_tensor_value_info("A", TensorProto.FLOAT, [2, 3]),
        helper.make_tensor_value_info("B", TensorProto.FLOAT, [3]),
    ]
    inits = []
    if with_initializer_input:  # B listed first and backed by an initializer (IR<4 style)
        inputs.reverse()
        inits = [helper.make_tensor("B", TensorProto.FLOAT, [3], [1.0, 2.0, 3.0])]
    g = helper.make_graph(
        [helper.make_node("Add", ["A", "B"], ["C"])],
        "g",
        inputs,
        [helper.make_tensor_value_info("C", TensorProto.FLOAT, [2, 3])],
        inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


A = np.arange(6, dtype=np.float32).reshape(2, 3)
B = np.array([10.0, 20.0, 30.0], np.float32)


@pytest.mark.parametrize("form", ["proto", "bytes", "path"])
def test_prepare_and_run(form: str, tmp_path) -> None:
    model = _add_model()
    src = {"proto": model, "bytes": model.SerializeToString(), "path": str(tmp_path / "m.onnx")}[
        form
    ]
    onnx.save(model, str(tmp_path / "m.onnx"))
    rep = tb.prepare(src, "CPU")
    for feed in ([A, B], (A, B), {"A": A, "B": B}):
        out = rep.run(feed)
        assert out._fields == ("C",)
        np.testing.assert_array_equal(out.C, A + B)
        np.testing.assert_array_equal(out[0], A + B)


def test_run_model_and_run_node() -> None:
    np.testing.assert_array_equal(tb.run_model(_add_model(), [A, B])[0], A + B)
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], alpha=0.5, transB=1)
    a = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    c = np.ones(3, np.float32)
    (y,) = tb.TurnoutBackend.run_node(node, [a, b, c])
    np.testing.assert_allclose(y, 0.5 * a @ b.T + c, rtol=1e-5, atol=1e-6)
    (r,) = tb.TurnoutBackend.run_node(helper.make_node("Relu", ["x"], ["r"]), [a - 0.5])
    np.testing.assert_array_equal(r, np.maximum(a - 0.5, 0))


def test_supports_device() -> None:
    assert tb.supports_device("CPU") and tb.TurnoutBackend.is_compatible(_add_model())
    assert not tb.supports_device("CUDA")


def test_single_array_for_single_input_model() -> None:
    g = helper.make_graph(
        [helper.make_node("Relu", ["X"], ["Y"])],
        "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [3])],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    x = np.array([-1.0, 0.0, 2.0], np.float32)
    np.testing.assert_array_equal(tb.prepare(model).run(x)[0], np.maximum(x, 0))


def test_positional_inputs_skip_initializer_inputs_like_onnxruntime_backend() -> None:
    with warnings.catch_warnings():  # onnxruntime.backend imports the deprecated onnx.version
        warnings.simplefilter("ignore", DeprecationWarning)
        import onnxruntime.backend as ort_backend

    model = _add_model(with_initializer_input=True)
    want = ort_backend.prepare(model.SerializeToString(), "CPU").run([A])[0]
    np.testing.assert_array_equal(want, A + np.array([1.0, 2.0, 3.0], np.float32))
    np.testing.assert_array_equal(tb.prepare(model).run([A])[0], want)
