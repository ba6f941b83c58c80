"""The application-shaped builders (turnout_testbed.apps): valid models that turnout runs as
onnxruntime does, on the numpy kernels and on the numba provider."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import pytest

from turnout import InferenceSession
from turnout_testbed import apps

ort = pytest.importorskip("onnxruntime")

RTOL, ATOL = 1e-4, 1e-5
PROVIDERS = {
    "cpu": ["CPUExecutionProvider"],  # the numpy kernels (tests set the numpy-only switch)
    "numba": ["NumbaExecutionProvider", "CPUExecutionProvider"],
}


def _numba_installed() -> bool:
    try:
        import turnout_numba  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture(params=list(PROVIDERS))
def providers(request: pytest.FixtureRequest) -> list[str]:
    if request.param == "numba" and not _numba_installed():
        pytest.skip("turnout-numba is not installed")
    return PROVIDERS[request.param]


_built: dict[str, bytes] = {}


def _model(name: str, build: Callable[[], onnx.ModelProto]) -> bytes:
    """Each model is built once per test process (the builders take tens of milliseconds, the
    sessions longer)."""
    if name not in _built:
        _built[name] = build().SerializeToString()
    return _built[name]


def _compare(data: bytes, providers: list[str], feeds_list: list[dict[str, Any]]) -> None:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    expected_sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    sess = InferenceSession(data, providers=providers)
    for feeds in feeds_list:
        expected = expected_sess.run(None, feeds)
        got = sess.run(None, feeds)
        assert len(got) == len(expected)
        for g, e, info in zip(got, expected, sess.get_outputs()):
            assert g.shape == e.shape and g.dtype == e.dtype, info.name
            # atol in units of the output's scale: boxes are in pixels (hundreds), and x - w / 2
            # cancels, leaving float32's rounding of the hundreds on small corners
            atol = ATOL * max(1.0, float(np.abs(e).max()))
            np.testing.assert_allclose(g, e, rtol=RTOL, atol=atol, err_msg=info.name)


@pytest.mark.parametrize("name", list(apps.APP_MODELS))
def test_matches_onnxruntime(name: str, providers: list[str]) -> None:
    am = apps.APP_MODELS[name]
    feeds_list = [am.feeds(0), am.feeds(1)]
    if name == "vad_like":  # both branches of the If, and a batch of two
        feeds_list += [apps.vad_feeds(sr=8000), apps.vad_feeds(batch=2, sr=8000, seed=2)]
        feeds_list += [apps.vad_feeds(batch=2, seed=3)]
    _compare(_model(name, am.build), providers, feeds_list)


def test_vad_state_carries_over_chunks(providers: list[str]) -> None:
    """A stream as applications run it: each chunk's stateN is the next chunk's state."""
    data = _model("vad_like", apps.vad_like)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    expected_sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    sess = InferenceSession(data, providers=providers)
    for sr in (16000, 8000):
        state_e = state_g = np.zeros((2, 1, 128), np.float32)
        probs = []
        for i in range(4):
            feeds = apps.vad_feeds(sr=sr, seed=10 + i)
            prob_e, state_e = expected_sess.run(None, {**feeds, "state": state_e})
            prob_g, state_g = sess.run(None, {**feeds, "state": state_g})
            np.testing.assert_allclose(prob_g, prob_e, rtol=RTOL, atol=ATOL)
            np.testing.assert_allclose(state_g, state_e, rtol=RTOL, atol=ATOL)
            probs.append(float(prob_e[0, 0]))
        assert len(set(probs)) == len(probs)  # the state changes what the model says


def test_crnn_width_is_symbolic() -> None:
    data = _model("crnn_ocr_like", apps.crnn_ocr_like)
    feeds = [apps.crnn_ocr_feeds(160), apps.crnn_ocr_feeds(480)]
    _compare(data, PROVIDERS["cpu"], feeds)


def test_vad_branches_are_written_like_an_export() -> None:
    """Constant nodes for shapes, axes and weights, shape arithmetic through Shape/Gather/
    Unsqueeze/Concat, nested rank-check Ifs, and no initializers inside the branches."""
    m = apps.vad_like()
    (if_node,) = [n for n in m.graph.node if n.op_type == "If"]
    branches = {a.name: a.g for a in if_node.attribute}
    assert set(branches) == {"then_branch", "else_branch"}
    convs = {}
    for key, body in branches.items():
        ops = Counter(n.op_type for n in body.node)
        assert ops["Constant"] >= 40, ops
        for op in ("Shape", "Gather", "Unsqueeze", "Concat", "Reshape", "Pad", "LSTM"):
            assert ops[op] >= 1, (key, op)
        assert ops["If"] == 5 and ops["Conv"] == 6, ops
        assert not body.initializer
        pad = next(n for n in body.node if n.op_type == "Pad")
        assert onnx.helper.get_attribute_value(pad.attribute[0]) == b"reflect"
        convs[key] = [n for n in body.node if n.op_type == "Conv"]
    # the STFT: 258 channels over 256 samples at 16 kHz, 130 over 128 at 8 kHz
    stft = {k: onnx.helper.get_node_attr_value(v[0], "kernel_shape") for k, v in convs.items()}
    assert stft == {"then_branch": [256], "else_branch": [128]}
    inputs = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]
              for i in m.graph.input}  # fmt: skip
    assert inputs == {"input": ["batch", "samples"], "state": [2, "batch", 128], "sr": []}


def test_builders_are_seeded() -> None:
    for am in apps.APP_MODELS.values():
        assert am.build().SerializeToString() == am.build().SerializeToString()
    assert (
        apps.text_cnn_like(seed=1).SerializeToString() != apps.text_cnn_like().SerializeToString()
    )


def test_structure_of_the_other_models() -> None:
    ops = {name: Counter(n.op_type for n in am.build().graph.node)
           for name, am in apps.APP_MODELS.items() if name != "vad_like"}  # fmt: skip
    crnn, yolo, text = ops["crnn_ocr_like"], ops["yolo_det_like"], ops["text_cnn_like"]
    assert crnn["HardSwish"] == 9 and crnn["BatchNormalization"] == 17 and crnn["LSTM"] == 1
    assert crnn["MaxPool"] == 1 and crnn["AveragePool"] == 1
    for op in ("Shape", "Gather", "Concat", "Reshape", "Transpose", "Sigmoid", "Split", "Pow"):
        assert yolo[op] >= 3, op
    assert text["Gather"] == 1 and text["Conv"] == 3 and text["GlobalMaxPool"] == 1
    assert text["ReduceMax"] == 2 and text["Gemm"] == 1
    depthwise = [n for n in apps.crnn_ocr_like().graph.node if n.op_type == "Conv"
                 and onnx.helper.get_node_attr_value(n, "group") > 1]  # fmt: skip
    assert len(depthwise) == 8
