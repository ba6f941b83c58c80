"""Op domains that plugins bring (`turnout_custom_ops`): the loader, type inference and the
CPU provider know them; `SessionOptions.register_custom_ops_library` installs them by path."""

from __future__ import annotations

import textwrap
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper

import turnout
from turnout.graph.contrib import Arg, Attr, OpSpec, same_as
from turnout.graph.errors import Fail, InvalidArgument, InvalidGraph
from turnout.graph.errors import NotImplemented as OrtNotImplemented
from turnout.sdk import custom_ops, plugins
from turnout.sdk.custom_ops import CustomOpSet
from turnout.sdk.provider import KernelNode, KernelRegistry

DOMAIN = "example.ops"


def _op_set() -> CustomOpSet:
    kernels = KernelRegistry("example")

    @kernels.register("Scale", since=1, domain=DOMAIN)
    def scale(kn: KernelNode) -> Any:
        factor = float(kn.node.attrs.get("factor", 2.0))
        return lambda x: (x * np.float32(factor),)

    spec = OpSpec(
        name="Scale",
        inputs=(Arg("X", "T"),),
        outputs=(Arg("Y", "T"),),
        types={"T": ("float",)},
        infer=same_as(0),
        attrs=(Attr("factor", "float", 2.0),),
        domain=DOMAIN,
    )
    return CustomOpSet(DOMAIN, kernels, (spec,))


class _EntryPoint:
    name = "example_ops"

    def load(self) -> types.ModuleType:
        mod = types.ModuleType("example_ops")

        @turnout.hookimpl
        def turnout_custom_ops() -> list[CustomOpSet]:
            return [_op_set()]

        mod.turnout_custom_ops = turnout_custom_ops  # type: ignore[attr-defined]
        return mod


@pytest.fixture
def example_ops(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # load the real registry first: modules holding it (provider_selection) would otherwise
    # load it lazily inside this fixture, from the fake entry points, and keep only those
    plugins.registry.all()
    monkeypatch.setattr(plugins, "entry_points", lambda group: [_EntryPoint()])
    monkeypatch.setattr(plugins, "registry", plugins.ProviderRegistry())
    monkeypatch.setattr(turnout.api.session, "registry", plugins.registry)
    plugins.registry.all()
    yield
    custom_ops.forget(DOMAIN)


def _model(op: str = "Scale") -> bytes:
    node = helper.make_node(op, ["x"], ["y"], name="scale", domain=DOMAIN, factor=3.0)
    out = helper.make_empty_tensor_value_info("y")  # its type comes from the op's inference
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])], [out]
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)]
    )
    return bytes(model.SerializeToString())


def test_a_plugin_domain_loads_infers_and_runs(example_ops: None) -> None:
    sess = turnout.InferenceSession(_model(), providers=["CPUExecutionProvider"])
    assert sess.get_outputs()[0].type == "tensor(float)"  # from the schema's inference
    assert sess.get_outputs()[0].shape == [2, 2]
    (y,) = sess.run(None, {"x": np.ones((2, 2), np.float32)})
    np.testing.assert_array_equal(y, np.full((2, 2), 3.0, np.float32))
    (a,) = sess.partition_report().assignments
    assert (a.provider, a.source) == ("CPUExecutionProvider", "custom op")


def test_an_op_the_plugin_lacks_is_refused_naming_it(example_ops: None) -> None:
    with pytest.raises((OrtNotImplemented, InvalidGraph), match="Shift"):
        turnout.InferenceSession(_model("Shift"), providers=["CPUExecutionProvider"])


def test_without_the_plugin_the_domain_is_unknown() -> None:
    with pytest.raises(Fail, match=f"unknown operator domain '{DOMAIN}'"):
        turnout.InferenceSession(_model(), providers=["CPUExecutionProvider"])


def test_bad_hook_answers_are_refused() -> None:
    with pytest.raises(InvalidArgument, match="must return CustomOpSet"):
        custom_ops.install(["nonsense"], "plugin 'x'")
    with pytest.raises(InvalidArgument, match="one turnout defines"):
        custom_ops.install([CustomOpSet("com.microsoft", KernelRegistry("x"))], "plugin 'x'")


_LIBRARY = """
import numpy as np
from turnout.graph.contrib import Arg, OpSpec, same_as
from turnout.sdk.custom_ops import CustomOpSet
from turnout.sdk.provider import KernelRegistry

KERNELS = KernelRegistry("lib")

@KERNELS.register("Negate", since=1, domain="lib.ops")
def negate(kn):
    return lambda x: (-x,)

def turnout_custom_ops():
    spec = OpSpec("Negate", (Arg("X", "T"),), (Arg("Y", "T"),), {"T": ("float",)},
                  same_as(0), domain="lib.ops")
    return [CustomOpSet("lib.ops", KERNELS, (spec,))]
"""


def test_register_custom_ops_library_by_path(tmp_path: Path) -> None:
    path = tmp_path / "lib_ops.py"
    path.write_text(textwrap.dedent(_LIBRARY))
    opts = turnout.SessionOptions()
    opts.register_custom_ops_library(str(path))
    try:
        node = helper.make_node("Negate", ["x"], ["y"], domain="lib.ops")
        graph = helper.make_graph(
            [node],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
        )
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("lib.ops", 1)]
        )
        sess = turnout.InferenceSession(model.SerializeToString(), opts)
        np.testing.assert_array_equal(sess.run(None, {"x": np.ones(3, np.float32)})[0], -1)
    finally:
        custom_ops.forget("lib.ops")
    with pytest.raises(InvalidArgument, match="native onnxruntime plugins"):
        opts.register_custom_ops_library(str(tmp_path / "ops.so"))
