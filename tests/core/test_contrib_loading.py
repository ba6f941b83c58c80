"""The com.microsoft domain at load: known ops load and get inferred types, unknown ones are
refused as onnxruntime refuses them, unsupported ones at session creation naming the op, and
domains nobody defines load only when the session asks for it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import turnout
from turnout.graph.contrib import DOCUMENTED_OPS, DOMAIN
from turnout.graph.errors import Fail, InvalidGraph, NotImplemented


def _model(
    nodes: list[onnx.NodeProto],
    inputs: dict[str, list[int]],
    outputs: list[str],
    *extra: onnx.OperatorSetIdProto,
) -> onnx.ModelProto:
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
        [helper.make_empty_tensor_value_info(o) for o in outputs],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1), *extra]
    return helper.make_model(g, opset_imports=opsets)


def test_contrib_op_loads_and_its_output_shape_is_inferred() -> None:
    m = _model(
        [
            helper.make_node("BiasGelu", ["x", "b"], ["y"], domain=DOMAIN),
            helper.make_node("Relu", ["y"], ["z"]),
        ],
        {"x": [2, 3, 8], "b": [8]},
        ["z"],
    )
    sess = turnout.InferenceSession(m.SerializeToString())
    assert sess.get_outputs()[0].shape == [2, 3, 8]  # through the contrib op's inference
    (z,) = sess.run(None, {"x": np.ones((2, 3, 8), np.float32), "b": np.ones(8, np.float32)})
    assert z.shape == (2, 3, 8)
    # onnx's own inference runs the contrib op's, and its checker knows the schema
    inferred = onnx.shape_inference.infer_shapes(m, strict_mode=True)
    onnx.checker.check_model(inferred, full_check=True)
    assert inferred.graph.output[0].type.tensor_type.elem_type == TensorProto.FLOAT


def test_input_type_outside_the_schema_is_refused() -> None:
    m = _model([helper.make_node("Gelu", ["x"], ["y"], domain=DOMAIN)], {}, ["y"])
    m.graph.input.append(helper.make_tensor_value_info("x", TensorProto.INT64, [4]))
    with pytest.raises(InvalidGraph, match="tensor\\(int64\\)"):
        turnout.InferenceSession(m.SerializeToString())


def test_op_onnxruntime_does_not_define_is_refused_naming_it() -> None:
    m = _model(
        [helper.make_node("Frob", ["x"], ["y"], domain=DOMAIN, name="n1")], {"x": [2]}, ["y"]
    )
    with pytest.raises(Fail, match=r"'n1'.*com\.microsoft::Frob is not an op onnxruntime"):
        turnout.InferenceSession(m.SerializeToString())


def test_unsupported_contrib_op_is_refused_at_session_creation() -> None:
    assert "BiasSoftmax" in DOCUMENTED_OPS
    m = _model(
        [helper.make_node("BiasSoftmax", ["x", "x"], ["y"], domain=DOMAIN, name="bs")],
        {"x": [2]},
        ["y"],
    )
    with pytest.raises(NotImplemented) as e:
        turnout.InferenceSession(m.SerializeToString())
    message = str(e.value)
    assert "bs (com.microsoft::BiasSoftmax)" in message
    assert "contrib op that turnout does not support" in message
    assert "unknown operator domain" not in message


def test_contrib_opset_other_than_1_is_refused() -> None:
    m = _model([helper.make_node("Gelu", ["x"], ["y"], domain=DOMAIN)], {"x": [2]}, ["y"])
    m.opset_import[1].version = 2
    with pytest.raises(InvalidGraph, match=r"opset 2 of domain 'com\.microsoft'"):
        turnout.InferenceSession(m.SerializeToString())


def test_onnx_reference_still_imports_beside_contrib_schemas() -> None:
    """onnx.reference indexes schemas by name alone; contrib Gelu must not break it."""
    from onnx.reference import ReferenceEvaluator

    node = helper.make_node("Gelu", ["x"], ["y"])
    m = helper.make_model(
        helper.make_graph(
            [node],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        ),
        opset_imports=[helper.make_opsetid("", 20)],
    )
    (y,) = ReferenceEvaluator(m).run(None, {"x": np.zeros(2, np.float32)})
    np.testing.assert_array_equal(y, np.zeros(2, np.float32))


def test_contrib_output_whose_shape_cannot_be_inferred_still_runs(
    rng: np.random.Generator,
) -> None:
    """Attention's inference needs the input's rank: without it the output stays untyped
    and the shapes are learned at run time, as for any op onnx cannot infer."""
    m = _model(
        [
            helper.make_node("Attention", ["x", "w"], ["y"], domain=DOMAIN, num_heads=2),
            helper.make_node("Relu", ["y"], ["z"]),
        ],
        {"w": [16, 48]},
        ["z"],
    )
    m.graph.input.append(helper.make_tensor_value_info("x", TensorProto.FLOAT, None))
    inferred = onnx.shape_inference.infer_shapes(m)
    assert not any(vi.name == "y" for vi in inferred.graph.value_info)
    sess = turnout.InferenceSession(m.SerializeToString())
    x = rng.standard_normal((2, 4, 16)).astype(np.float32)
    w = rng.standard_normal((16, 48)).astype(np.float32)
    (z,) = sess.run(None, {"x": x, "w": w})
    assert z.shape == (2, 4, 16)


@pytest.mark.cpu_means_host
def test_contrib_ops_run_when_a_host_provider_serves_cpu(rng: np.random.Generator) -> None:
    """With a host provider (turnout-numba) serving CPU requests, com.microsoft nodes run on
    the host (the host provider's own numpy path, or the numpy CPU kernels), with the numpy
    kernels' results."""
    m = _model(
        [
            helper.make_node("FastGelu", ["x"], ["y"], domain=DOMAIN, name="fg"),
            helper.make_node("Relu", ["y"], ["z"]),
        ],
        {"x": [2, 8]},
        ["z"],
    )
    sess = turnout.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    x = rng.standard_normal((2, 8)).astype(np.float32)
    (z,) = sess.run(None, {"x": x})
    assert z.shape == (2, 8) and (z >= 0).all()
    report = sess.partition_report()
    placed = {a.node: a.provider for a in report.assignments}
    assert placed["fg"] in {"CPUExecutionProvider", *report.hosts}
    so = turnout.SessionOptions()
    so.add_session_config_entry("session.turnout.cpu_numpy_only", "1")
    numpy_only = turnout.InferenceSession(m.SerializeToString(), so)
    np.testing.assert_allclose(z, numpy_only.run(None, {"x": x})[0], rtol=1e-6, atol=1e-7)


def test_onnx_domain_contrib_ops_are_the_listed_ones() -> None:
    """The loader registers the schemas for a model using one of `ONNX_DOMAIN_OPS` without
    loading them first: the list must name every contrib op of the ONNX domain."""
    # a fresh process: this one may hold other op sets (onnxruntime-extensions' ops, a test's
    # custom op set) in the same spec registry
    _fresh(
        """
        from turnout.graph.contrib import DOMAINS, ONNX_DOMAIN_OPS, specs
        found = specs()
        assert {s.name for s in found if s.domain == ""} == ONNX_DOMAIN_OPS, found
        assert {s.domain for s in found} <= DOMAINS | {""}, {s.domain for s in found}
        """
    )


def _fresh(code: str) -> None:
    """Run `code` in a fresh interpreter (this process registered the schemas long ago)."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]


_NORM_MODEL = """
    import sys
    import numpy as np, turnout
    from onnx import TensorProto as T, helper as h
    def norm_model(op, opset):
        g = h.make_graph(
            [h.make_node(op, ["x", "s"], ["y"], axis=-1), h.make_node("Relu", ["y"], ["z"])],
            "g", [h.make_tensor_value_info("x", T.FLOAT, [2, 8])],
            [h.make_empty_tensor_value_info("z")],
            [h.make_tensor("s", T.FLOAT, [8], [1.0] * 8)])
        return h.make_model(g, opset_imports=[h.make_opsetid("", opset)]).SerializeToString()
    x = np.arange(16, dtype=np.float32).reshape(2, 8)
"""


@pytest.mark.parametrize(
    ("op", "opset", "registers"),
    [
        ("SimplifiedLayerNormalization", 17, True),  # onnx has none
        ("LayerNormalization", 13, True),  # onnx's begins at 17
        ("LayerNormalization", 17, False),
    ],
)
def test_contrib_op_of_the_onnx_domain_loads_in_a_fresh_process(
    op: str, opset: int, registers: bool
) -> None:
    _fresh(
        _NORM_MODEL
        + f"""
    s = turnout.InferenceSession(norm_model({op!r}, {opset}))
    assert s.get_outputs()[0].shape == [2, 8]  # the schema's inference ran
    (z,) = s.run(None, {{"x": x}})
    assert z.shape == (2, 8) and float(z.max()) > 1
    assert ("turnout.graph.contrib.ops.normalization" in sys.modules) is {registers}
    """
    )


def test_contrib_model_loads_in_a_fresh_process() -> None:
    """The loader registers the schemas for a model with com.microsoft nodes: they load, their
    outputs get the schema's types, an op nobody defines is refused naming the node."""
    _fresh(
        f"""
    import numpy as np, onnx, turnout
    from onnx import TensorProto as T, helper as h
    from turnout.graph.errors import Fail
    def model(op):
        g = h.make_graph([h.make_node(op, ["x", "b"], ["y"], name="n1", domain="{DOMAIN}")],
            "g", [h.make_tensor_value_info("x", T.FLOAT, [2, 8]),
                  h.make_tensor_value_info("b", T.FLOAT, [8])],
            [h.make_empty_tensor_value_info("y")])
        ops = [h.make_opsetid("", 17), h.make_opsetid("{DOMAIN}", 1)]
        return h.make_model(g, opset_imports=ops).SerializeToString()
    s = turnout.InferenceSession(model("BiasGelu"))
    assert s.get_outputs()[0].shape == [2, 8]
    (y,) = s.run(None, {{"x": np.ones((2, 8), np.float32), "b": np.zeros(8, np.float32)}})
    assert abs(float(y[0, 0]) - 0.8413) < 1e-3
    try:
        turnout.InferenceSession(model("NoSuchOp"))
    except Fail as e:
        assert "n1" in str(e) and "NoSuchOp" in str(e), e
    else:
        raise SystemExit("no Fail")
    """
    )


def test_optimizer_emitting_a_contrib_op_registers_the_schemas(tmp_path: Path) -> None:
    """A plain model that the optimizer gives com.microsoft nodes (dynamic-quant fusion) runs
    in a fresh process as its unfused graph does: the schemas are registered before the
    optimizer's shape inference sees the fused node."""
    from turnout.tools.quantization import QuantType, quantize_dynamic

    rng = np.random.default_rng(0)
    w = rng.standard_normal((16, 8)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
        [onnx.numpy_helper.from_array(w, "w")],
    )
    src, dst = tmp_path / "f.onnx", tmp_path / "q.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), src)
    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8)
    _fresh(
        f"""
    import sys
    import numpy as np, turnout
    x = np.random.default_rng(1).standard_normal((4, 16)).astype(np.float32)
    s = turnout.InferenceSession({str(dst)!r}, providers=["CPUExecutionProvider"])
    ops = s.optimization_report().ops_after
    assert ops.get("{DOMAIN}::DynamicQuantizeMatMul") == 1, ops
    assert "turnout.graph.contrib.ops.quantized_matmul" in sys.modules
    so = turnout.SessionOptions()
    so.graph_optimization_level = turnout.GraphOptimizationLevel.ORT_ENABLE_BASIC
    plain = turnout.InferenceSession({str(dst)!r}, so, providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(s.run(None, {{"x": x}})[0], plain.run(None, {{"x": x}})[0])
    """
    )


def test_schemas_register_once_when_threads_ask_at_once() -> None:
    _fresh(
        """
    import threading
    from turnout.graph import contrib
    seen = []
    threads = [threading.Thread(target=lambda: seen.append(contrib.spec_of("com.microsoft",
               "BiasGelu"))) for _ in range(8)]
    [t.start() for t in threads]; [t.join() for t in threads]
    assert len(seen) == 8 and None not in seen and len(set(map(id, seen))) == 1
    assert len(contrib.specs()) > 40
    """
    )
