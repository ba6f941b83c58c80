"""Winograd F(2x2, 3x3) convs (`kernels/winograd.py`) against onnx.reference in float64.

Every geometry must really take the Winograd path (a spy on `Winograd.__call__`): odd and even
output sizes (a last block half outside), pads on either side or none, `auto_pad`, several
images, bias and activation through the conv's epilogue, 1 and 2 threads; the weights'
transform is kept for an initializer and made again for a fed weight changed in place.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from turnout.tools.testing import provider_session, run_reference
from turnout_numba.kernels import conv as conv_mod
from turnout_numba.kernels import winograd as wino

pytestmark = pytest.mark.skipif(
    not wino.winograd_applies(np.dtype(np.float32), (64, 64, 3, 3), 1, (1, 1), (1, 1), 10**6),
    reason="Winograd runs on the AVX-512 register tile, which this host lacks",
)


@pytest.fixture
def wino_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, ...]]:
    """The output shapes of each Winograd call."""
    calls: list[tuple[int, ...]] = []
    real = wino.Winograd.__call__

    def spy(self: Any, x: Any, w: Any, y4: Any, pads: Any, threads: int) -> None:
        calls.append(y4.shape)
        real(self, x, w, y4, pads, threads)

    monkeypatch.setattr(wino.Winograd, "__call__", spy)
    return calls


def _graph_model(nodes: list[Any], x_shape: tuple[int, ...], weights: dict[str, Any]) -> Any:
    """A model of `nodes` from input "x" to output "y", `weights` its initializers."""
    graph = helper.make_graph(
        nodes,
        "wino",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in weights.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _model(x_shape: tuple[int, ...], w: Any, b: Any, attrs: dict[str, Any], relu: bool) -> Any:
    weights = {"w": w} if b is None else {"w": w, "b": b}
    nodes = [helper.make_node("Conv", ["x", *weights], ["c" if relu else "y"], **attrs)]
    if relu:
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    return _graph_model(nodes, x_shape, weights)


def _reference(x: Any, w: Any, b: Any, attrs: dict[str, Any], relu: bool) -> Any:
    inputs = [x.astype(np.float64), w.astype(np.float64)]
    if b is not None:
        inputs.append(b.astype(np.float64))
    names = ["x", "w", "b"][: len(inputs)]
    want = run_reference(helper.make_node("Conv", names, ["y"], **attrs), inputs, 17)[0]
    return np.maximum(want, 0) if relu else want


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(
    ("x_shape", "m", "attrs", "bias", "relu"),
    [
        ((1, 64, 21, 20), 64, {"pads": [1, 1, 1, 1]}, True, True),
        ((2, 64, 20, 23), 40, {"pads": [1, 1, 1, 1]}, False, False),
        ((1, 72, 24, 22), 32, {"pads": [0, 0, 0, 0]}, True, False),
        ((1, 64, 22, 21), 48, {"pads": [2, 0, 0, 1]}, True, True),
        ((3, 64, 21, 21), 33, {"auto_pad": "SAME_UPPER"}, True, False),
    ],
    ids=["same-relu", "two-images-odd-width", "valid", "uneven-pads", "auto-pad-three-images"],
)
def test_winograd_matches_reference(
    wino_calls: list[tuple[int, ...]],
    threads: int,
    x_shape: tuple[int, ...],
    m: int,
    attrs: dict[str, Any],
    bias: bool,
    relu: bool,
) -> None:
    rng = np.random.default_rng(sum(x_shape) + m)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = (rng.standard_normal((m, x_shape[1], 3, 3)) * 0.1).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32) if bias else None
    attrs = {"kernel_shape": [3, 3], **attrs}
    sess = provider_session(
        _model(x_shape, w, b, attrs, relu), "NumbaExecutionProvider", intra_op_num_threads=threads
    )
    want = _reference(x, w, b, attrs, relu)
    for _ in range(2):  # the second run reuses the weights' transform and the scratch
        got = sess.run(None, {"x": x})[0]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    assert wino_calls and all(shape == want.shape for shape in wino_calls)


def test_a_fed_weight_changed_in_place_is_transformed_again(
    wino_calls: list[tuple[int, ...]],
) -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 64, 20, 20)).astype(np.float32)
    w = (rng.standard_normal((64, 64, 3, 3)) * 0.1).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], pads=[1] * 4)
    graph = helper.make_graph(
        [node],
        "fed",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape)),
            helper.make_tensor_value_info("w", TensorProto.FLOAT, list(w.shape)),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = provider_session(model, "NumbaExecutionProvider", intra_op_num_threads=1)
    for scale in (1.0, -2.0):
        w *= np.float32(scale)
        got = sess.run(None, {"x": x, "w": w})[0]
        want = run_reference(node, [x.astype(np.float64), w.astype(np.float64)], 17)[0]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    assert len(wino_calls) == 2


def test_an_initializer_is_transformed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[tuple[int, ...]] = []
    real = wino.transform_weights

    def counted(w: Any) -> Any:
        made.append(w.shape)
        return real(w)

    monkeypatch.setattr(wino, "transform_weights", counted)
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 64, 20, 20)).astype(np.float32)
    w = (rng.standard_normal((64, 64, 3, 3)) * 0.1).astype(np.float32)
    attrs = {"kernel_shape": [3, 3], "pads": [1] * 4}
    sess = provider_session(_model(x.shape, w, None, attrs, False), "NumbaExecutionProvider")
    for _ in range(3):
        sess.run(None, {"x": x})
    assert made == [(64, 64, 3, 3)]


@pytest.mark.parametrize(
    ("w_shape", "group", "strides", "dilations", "pixels", "dt"),
    [
        ((64, 64, 3, 3), 1, (2, 2), (1, 1), 10**4, np.float32),
        ((64, 64, 3, 3), 1, (1, 1), (2, 2), 10**4, np.float32),
        ((64, 32, 3, 3), 2, (1, 1), (1, 1), 10**4, np.float32),
        ((64, 64, 5, 5), 1, (1, 1), (1, 1), 10**4, np.float32),
        ((64, 64, 3, 3), 1, (1, 1), (1, 1), 10**4, np.float64),
        ((64, wino.WINO_MIN_CHANNELS - 1, 3, 3), 1, (1, 1), (1, 1), 10**4, np.float32),
        ((wino.WINO_MIN_OUTPUTS - 1, 64, 3, 3), 1, (1, 1), (1, 1), 10**4, np.float32),
        ((64, 64, 3, 3), 1, (1, 1), (1, 1), wino.WINO_MIN_PIXELS - 1, np.float32),
    ],
    ids=["stride", "dilation", "groups", "5x5", "float64", "few-inputs", "few-outputs", "small"],
)
def test_what_winograd_does_not_take(
    w_shape: Any, group: int, strides: Any, dilations: Any, pixels: int, dt: Any
) -> None:
    assert not wino.winograd_applies(np.dtype(dt), w_shape, group, strides, dilations, pixels)
    assert conv_mod.winograd_applies is wino.winograd_applies  # the rule conv.py applies


def test_a_residual_sum_and_relu_follow_the_products(wino_calls: list[tuple[int, ...]]) -> None:
    """Conv -> Add(residual) -> Relu, as a ResNet block ends: the sum and the activation run in
    the conv's epilogue after the Winograd products (FusedConv's Z where the optimizer fuses)."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((1, 64, 20, 22)).astype(np.float32)
    w = (rng.standard_normal((64, 64, 3, 3)) * 0.1).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1] * 4),
        helper.make_node("Add", ["c", "x"], ["s"]),
        helper.make_node("Relu", ["s"], ["y"]),
    ]
    model = _graph_model(nodes, x.shape, {"w": w, "b": b})
    got = provider_session(model, "NumbaExecutionProvider").run(None, {"x": x})[0]
    conv = _reference(x, w, b, {"kernel_shape": [3, 3], "pads": [1] * 4}, False)
    want = np.maximum(conv + x, 0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    assert wino_calls == [want.shape]


def test_convs_share_scratch_and_concurrent_runs_take_their_own(
    wino_calls: list[tuple[int, ...]],
) -> None:
    """Two Winograd convs in a row leave one scratch buffer in the pool; runs from four Python
    threads at once each take their own and all get the reference answer."""
    import threading

    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 64, 20, 20)).astype(np.float32)
    w1 = (rng.standard_normal((64, 64, 3, 3)) * 0.1).astype(np.float32)
    w2 = (rng.standard_normal((80, 64, 3, 3)) * 0.1).astype(np.float32)
    attrs = {"kernel_shape": [3, 3], "pads": [1] * 4}
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["h"], **attrs),
        helper.make_node("Conv", ["h", "w2"], ["y"], **attrs),
    ]
    model = _graph_model(nodes, x.shape, {"w1": w1, "w2": w2})
    sess = provider_session(model, "NumbaExecutionProvider", intra_op_num_threads=1)
    wino._FREE.clear()
    sess.run(None, {"x": x})
    assert len(wino_calls) == 2 and len(wino._FREE) == 1
    inputs = [rng.standard_normal(x.shape).astype(np.float32) for _ in range(4)]
    wants = []
    for xi in inputs:
        h = _reference(xi, w1, None, attrs, False)
        wants.append(_reference(h.astype(np.float32), w2, None, attrs, False))
    errors: list[str] = []

    def work(i: int) -> None:
        for _ in range(10):
            got = sess.run(None, {"x": inputs[i]})[0]
            if not np.allclose(got, wants[i], rtol=1e-4, atol=1e-4 * np.abs(wants[i]).max()):
                errors.append(f"thread {i}: wrong answer")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_the_weights_transform_is_g_g_gt() -> None:
    """`transform_weights` against G g G^T written out per kernel, in float64."""
    g_mat = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]])
    w = np.random.default_rng(9).standard_normal((5, 3, 3, 3)).astype(np.float32)
    got = wino.transform_weights(w)
    for m in range(5):
        for c in range(3):
            want = g_mat @ w[m, c].astype(np.float64) @ g_mat.T
            np.testing.assert_allclose(got[:, m, c], want.reshape(16), rtol=1e-6, atol=1e-7)
