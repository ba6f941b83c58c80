"""ExampleExecutionProvider's own tests: discovery, correctness, that its kernels ran, fallback.

Run them after `pip install -e .` with `pytest`. They build small models with onnx.helper and
compare with numpy; `turnout conformance --provider example` runs the ONNX node tests of every op
the provider claims.
"""

from __future__ import annotations

from importlib.metadata import entry_points

import numpy as np
import pytest
import turnout
from onnx import TensorProto, helper
from turnout.sdk.plugins import registry

from turnout_example import ALIAS, PROVIDER_NAME
from turnout_example.kernels import CALLS

SHAPE = [2, 3, 4]


def _model(dtype: int = TensorProto.FLOAT, extra_op: str | None = None) -> bytes:
    """y = Relu(Add(Relu(Add(x, b)), c)) [then `extra_op`(y, c)]: a chain of claimed ops."""
    nodes = [
        helper.make_node("Add", ["x", "b"], ["t1"], name="add0"),
        helper.make_node("Relu", ["t1"], ["t2"], name="relu0"),
        helper.make_node("Add", ["t2", "c"], ["t3"], name="add1"),
        helper.make_node("Relu", ["t3"], ["y" if extra_op is None else "t4"], name="relu1"),
    ]
    if extra_op is not None:
        nodes.append(helper.make_node(extra_op, ["t4", "c"], ["y"], name="extra"))
    inputs = [helper.make_tensor_value_info(v, dtype, SHAPE) for v in ("x", "b", "c")]
    graph = helper.make_graph(
        nodes, "chain", inputs, [helper.make_tensor_value_info("y", dtype, SHAPE)]
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _feeds(dtype: type = np.float32) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {k: rng.standard_normal(SHAPE).astype(dtype) for k in ("x", "b", "c")}


def _expected(f: dict[str, np.ndarray]) -> np.ndarray:
    return np.maximum(np.maximum(f["x"] + f["b"], 0) + f["c"], 0)


def _session(model: bytes, fallback: str, **options: object) -> turnout.InferenceSession:
    so = turnout.SessionOptions()
    so.fallback = fallback
    return turnout.InferenceSession(model, so, providers=[(PROVIDER_NAME, options)])


def test_discovered_through_the_entry_point() -> None:
    eps = {ep.name: ep.value for ep in entry_points(group="turnout")}
    assert eps.get(ALIAS) == "turnout_example.plugin"
    assert PROVIDER_NAME in turnout.get_available_providers()
    factory = registry.find(ALIAS)
    assert factory is not None and factory.name == PROVIDER_NAME
    availability = factory.probe()
    assert availability.ok and availability.devices, availability.reason


@pytest.mark.parametrize("fuse", [True, False])
def test_claimed_ops_match_numpy_and_run_here(fuse: bool) -> None:
    sess = _session(_model(), "error", fuse=fuse)  # "error": nothing may fall back to CPU
    feeds = _feeds()
    before = sum(CALLS.values())
    (y,) = sess.run(None, feeds)
    np.testing.assert_allclose(y, _expected(feeds), rtol=1e-6)
    assert y.dtype == np.float32
    assert sum(CALLS.values()) - before == 4  # each node ran once, on this provider's kernels
    report = sess.partition_report()
    assert {a.provider for a in report.assignments} == {PROVIDER_NAME}
    groups = {a.group for a in report.assignments}
    assert groups == ({f"{ALIAS}_fused_add0"} if fuse else {None})


def test_option_values_are_checked() -> None:
    with pytest.raises(turnout.InvalidArgument, match="unknown provider option"):
        _session(_model(), "error", no_such_option=1)
    with pytest.raises(turnout.InvalidArgument, match="option 'fuse' must be bool"):
        _session(_model(), "error", fuse="maybe")


def test_declined_op_falls_back_with_a_reason() -> None:
    with pytest.raises(turnout.FallbackError, match="extra"):
        _session(_model(extra_op="Mul"), "error")
    sess = _session(_model(extra_op="Mul"), "allow")
    report = sess.partition_report()
    placed = {a.node: a.provider for a in report.assignments}
    assert placed["extra"] == "CPUExecutionProvider"
    assert placed["add0"] == PROVIDER_NAME
    reasons = {d["node"]: d["reason"] for d in report.declines[PROVIDER_NAME]}
    assert "Mul" in reasons["extra"]
    feeds = _feeds()
    (y,) = sess.run(None, feeds)
    np.testing.assert_allclose(y, _expected(feeds) * feeds["c"], rtol=1e-6)


def test_unsupported_dtype_is_declined() -> None:
    sess = _session(_model(TensorProto.DOUBLE), "allow")
    report = sess.partition_report()
    assert {a.provider for a in report.assignments} == {"CPUExecutionProvider"}
    reasons = [d["reason"] for d in report.declines[PROVIDER_NAME]]
    assert all("dtype double" in r for r in reasons), reasons
