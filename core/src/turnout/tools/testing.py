"""Helpers for kernel tests: run one node with turnout's own kernel, or with onnx.reference.

Kernel tests compare the two on random data (STYLE: never hand-typed expected numbers when a
reference exists). `run_own_kernel` fails if the CPU provider has no kernel of its own for the
node, so a test cannot silently exercise the reference fallback instead.
"""

from __future__ import annotations

import functools
import itertools
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from turnout.graph.one_node import one_node_model, positional_inputs

__all__ = [
    "NodeCase",
    "assert_outputs_close",
    "check_official_case",
    "conv_activation_model",
    "cpu_session",
    "float_graph_model",
    "iter_node_cases",
    "kernel_error",
    "named_outputs",
    "normalize_values",
    "one_node_model",
    "onnxruntime_exact_8bit",
    "onnxruntime_mlas_fma3",
    "optional_outputs",
    "output_variants",
    "positional_inputs",
    "provider_session",
    "run_onnxruntime",
    "run_own_kernel",
    "run_reference",
]


def float_graph_model(
    nodes: Sequence[onnx.NodeProto], outputs: Sequence[str], n_inputs: int = 1, size: int = 4
) -> onnx.ModelProto:
    """A model of `nodes` over float32 vectors of `size`: inputs `x0`, `x1`, ... and the named
    outputs, opset 17. Partition and placement tests need graphs, not data, so one shape does."""
    inputs = [
        helper.make_tensor_value_info(f"x{i}", onnx.TensorProto.FLOAT, [size])
        for i in range(n_inputs)
    ]
    outs = [helper.make_tensor_value_info(o, onnx.TensorProto.FLOAT, [size]) for o in outputs]
    g = helper.make_graph(list(nodes), "g", inputs, outs)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def conv_activation_model(
    act: str, shape: Sequence[int], depthwise: bool = False
) -> onnx.ModelProto:
    """A float32 Conv whose output is its input exactly (identity 1x1 weights, or a depthwise
    3x3 with only its centre tap, 1) over NCHW `shape`, then `act` ("SiLU": Sigmoid and Mul):
    an optimizer folds the activation into its fused Conv, so the Conv epilogue's activation can
    be held to the op's own, value for value. Opset 17."""
    c = int(shape[1])
    f = onnx.TensorProto.FLOAT
    if depthwise:
        wt = np.zeros((c, 1, 3, 3), np.float32)
        wt[:, 0, 1, 1] = 1
        conv = helper.make_node("Conv", ["x", "w"], ["c"], group=c, pads=[1, 1, 1, 1])
    else:
        wt = np.eye(c, dtype=np.float32).reshape(c, c, 1, 1)
        conv = helper.make_node("Conv", ["x", "w"], ["c"])
    nodes = [conv]
    if act == "SiLU":
        nodes += [
            helper.make_node("Sigmoid", ["c"], ["s"]),
            helper.make_node("Mul", ["c", "s"], ["y"]),
        ]
    else:
        nodes.append(helper.make_node(act, ["c"], ["y"]))
    g = helper.make_graph(
        nodes,
        "conv_act",
        [helper.make_tensor_value_info("x", f, list(shape))],
        [helper.make_tensor_value_info("y", f, list(shape))],
        [numpy_helper.from_array(wt, "w")],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


_OPTIONAL = onnx.defs.OpSchema.FormalParameterOption.Optional


def optional_outputs(node: onnx.NodeProto, opsets: Mapping[str, int]) -> list[bool]:
    """For each of `node`'s outputs, whether its schema (onnx.defs, which knows the contrib ops
    too) marks it optional. A variadic output is not: its count is the op's meaning (Split's
    pieces, a Loop's carried values), so it is never left out. Unknown ops: none optional."""
    domain = "" if node.domain == "ai.onnx" else node.domain
    try:
        schema = onnx.defs.get_schema(node.op_type, opsets.get(domain, 1), domain)
    except onnx.defs.SchemaError:
        return [False] * len(node.output)
    formal = schema.outputs
    return [i < len(formal) and formal[i].option == _OPTIONAL for i in range(len(node.output))]


def output_variants(model: onnx.ModelProto) -> list[onnx.ModelProto]:
    """The one-node `model` with some of its node's optional outputs left out, every way ONNX
    accepts: trailing ones dropped, others blanked to "" (an absent optional output), at least
    one output kept; the graph outputs follow. "Accepts" is onnx's node checker (output count)
    and its strict shape inference (BatchNormalization in training mode wants all three,
    Attention's present_key and present_value go together). The model itself is not listed.
    """
    node = model.graph.node[0]
    opsets = {d.domain: d.version for d in model.opset_import}
    optional = optional_outputs(node, opsets)
    names = list(node.output)
    droppable = [i for i, name in enumerate(names) if name and optional[i]]
    required = {i for i, name in enumerate(names) if name and not optional[i]}
    variants = []
    for k in range(len(droppable)):  # keep k of the optional outputs: fewer than all
        for kept in itertools.combinations(droppable, k):
            keep = required.union(kept)
            if not keep:
                continue
            outputs = [name if i in keep else "" for i, name in enumerate(names)]
            variant = _with_outputs(model, outputs[: max(keep) + 1])
            if _onnx_accepts(variant):
                variants.append(variant)
    return variants


def _with_outputs(model: onnx.ModelProto, outputs: Sequence[str]) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    node = out.graph.node[0]
    del node.output[:]
    node.output.extend(outputs)
    graph_outputs = [vi for vi in out.graph.output if vi.name in outputs]
    del out.graph.output[:]
    out.graph.output.extend(graph_outputs)
    return out


def _onnx_accepts(model: onnx.ModelProto) -> bool:
    """onnx's node checker and strict shape inference pass (graph outputs untyped: a declared
    output type that onnx's inference disagrees with is the test data's business)."""
    bare = onnx.ModelProto()
    bare.CopyFrom(model)
    names = [vi.name for vi in bare.graph.output]
    del bare.graph.output[:]
    bare.graph.output.extend(helper.make_empty_tensor_value_info(n) for n in names)
    ctx = onnx.checker.C.CheckerContext()
    ctx.ir_version = bare.ir_version
    ctx.opset_imports = {d.domain: d.version for d in bare.opset_import}
    try:
        onnx.checker.check_node(bare.graph.node[0], ctx)
        onnx.shape_inference.infer_shapes(bare, check_type=True, strict_mode=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError):
        return False
    return True


def run_own_kernel(
    node: onnx.NodeProto, inputs: Sequence[Any], opsets: Mapping[str, int] | int = 21
) -> list[Any]:
    """Run `node` with the CPU provider's own registered kernel (never the reference)."""
    from turnout.graph.ir import Graph, schema_since_version
    from turnout.providers.cpu import kernels as _  # noqa: F401 - registers the kernels
    from turnout.providers.cpu.registry import CPU_KERNELS
    from turnout.sdk.provider import KernelNode

    model = one_node_model(node, inputs, opsets)
    opset_map = {d.domain: d.version for d in model.opset_import}
    graph = Graph.from_proto(model.graph, opset_map)
    n = graph.nodes[0]
    opset = opset_map.get(n.domain, 1)
    since = schema_since_version(n.domain, n.op_type, opset) or opset
    kn = KernelNode(n, opset, since)
    kdef, reason = CPU_KERNELS.match(kn)
    if kdef is None:
        raise AssertionError(f"no own CPU kernel for {n.op_type}: {reason}")
    fn = kdef.factory(kn)
    feeds = positional_inputs(node, inputs)
    with np.errstate(all="ignore"):
        out = fn(*feeds)
    if not isinstance(out, (tuple, list)):
        raise AssertionError(f"kernel {n.op_type} returned {type(out).__name__}, not a tuple")
    return list(out)


def provider_session(model: onnx.ModelProto, provider: str, **options: Any) -> Any:
    """A session on `provider` alone with fallback "error": a node the provider declines fails
    the session instead of running on CPU unnoticed (what a provider's tests want)."""
    from turnout.api.options import SessionOptions
    from turnout.api.session import InferenceSession

    so = SessionOptions()
    so.fallback = "error"
    return InferenceSession(model.SerializeToString(), so, providers=[(provider, options)])


def cpu_session(model: onnx.ModelProto) -> Any:
    """A session on turnout's numpy CPU kernels: the reference a provider's kernels are held to.

    It keeps the numpy kernels only (`session.turnout.cpu_numpy_only`): a plain
    `CPUExecutionProvider` request runs on an installed host provider (numba), which would then
    be compared with itself."""
    from turnout.api.options import SessionOptions
    from turnout.api.session import InferenceSession
    from turnout.engine.provider_selection import CPU_NUMPY_ONLY_KEY

    opts = SessionOptions()
    opts.add_session_config_entry(CPU_NUMPY_ONLY_KEY, "1")
    return InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def kernel_error(
    make_session: Callable[[onnx.ModelProto], Any],
    node: onnx.NodeProto,
    inputs: Sequence[Any],
    opsets: Mapping[str, int] | int = 21,
) -> Exception:
    """The error a kernel raises running `node` on `inputs`, in a session `make_session` builds.

    The model's input shapes are left unknown, so that a bad shape or axis reaches the kernel
    instead of failing the session's shape inference: what a test comparing two providers'
    errors on the same input needs. A run that succeeds is an AssertionError.
    """
    model = one_node_model(node, inputs, opsets)
    for vi in model.graph.input:
        vi.type.tensor_type.ClearField("shape")
    feeds = {n: v for n, v in zip(node.input, positional_inputs(node, inputs)) if n}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # onnx's own deprecation warnings for old opsets
        sess = make_session(model)
    try:
        sess.run(None, feeds)
    except Exception as e:  # the error itself is the result
        return e
    raise AssertionError(f"{node.op_type} ran on inputs it should refuse")


def named_outputs(node: onnx.NodeProto, outputs: Sequence[Any]) -> list[Any]:
    """The outputs of the node's non-empty output names: what an official case lists."""
    return [o for o, name in zip(outputs, node.output) if name]


def check_official_case(case: NodeCase) -> None:
    """Assert that turnout's own kernel reproduces an official case's expected outputs."""
    got = run_own_kernel(case.node, case.inputs, case.opsets)
    assert_outputs_close(case.outputs, named_outputs(case.node, got), case.rtol, case.atol)


def run_onnxruntime(
    node: onnx.NodeProto, inputs: Sequence[Any], opsets: Mapping[str, int] | int = 21
) -> list[Any]:
    """Run `node` with onnxruntime's CPU provider: the oracle where onnx.reference is wrong.

    `inputs` hold one value per node input or per non-empty input name, as for
    `run_own_kernel`; onnxruntime's own log output below errors is silenced.
    """
    import onnxruntime as ort

    model = one_node_model(node, inputs, opsets)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    feeds = {
        n: np.asarray(v) if isinstance(v, np.generic) else v
        for n, v in zip(node.input, positional_inputs(node, inputs))
        if n
    }
    return list(sess.run(None, feeds))


@functools.cache
def onnxruntime_mlas_fma3() -> bool:
    """Whether this host's onnxruntime computes float32 Sigmoid and Tanh as
    `turnout.sdk.semantics.mlas_logistic` and `mlas_tanh` do (MLAS's x86-64 kernels with FMA3, as in
    onnxruntime 1.32): where it does, turnout's float32 Sigmoid, Tanh and DynamicQuantizeLSTM
    are held to onnxruntime's bit for bit; an ARM build, say, computes them otherwise. False
    without onnxruntime."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    from turnout.sdk.semantics import mlas_logistic, mlas_tanh

    x = np.linspace(-20, 20, 4001, dtype=np.float32)
    for op, ours in (("Sigmoid", mlas_logistic), ("Tanh", mlas_tanh)):
        theirs = run_onnxruntime(helper.make_node(op, ["x"], ["y"]), [x], 17)[0]
        if np.asarray(theirs).tobytes() != ours(x).tobytes():
            return False
    return True


@functools.cache
def onnxruntime_exact_8bit(ta: Any, tb: Any) -> bool:
    """Whether this host's onnxruntime multiplies 8-bit types `ta` by `tb` (numpy types)
    exactly, as turnout and the ONNX reference do. Without VNNI, MLAS's uint8 x int8 kernels
    (AVX2, AVX-512BW) add each pair of products in int16 (`vpmaddubsw`), which saturates
    (255 * 127 * 2 does not fit): there tests hold turnout to onnxruntime's formula over exact
    sums instead of its output. Probed with both types' extreme codes; False without
    onnxruntime."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    ia, ib = np.iinfo(ta), np.iinfo(tb)
    a = np.array([[ia.max] * 64, [ia.min] * 64], ta)
    b = np.stack([np.full(64, ib.max, tb), np.full(64, ib.min, tb)], 1)
    got = run_onnxruntime(helper.make_node("MatMulInteger", ["a", "b"], ["y"]), [a, b], 13)[0]
    return bool(np.array_equal(got, a.astype(np.int64) @ b.astype(np.int64)))


def run_reference(
    node: onnx.NodeProto, inputs: Sequence[Any], opsets: Mapping[str, int] | int = 21
) -> list[Any]:
    """Run `node` with onnx.reference's evaluator."""
    from onnx.reference import ReferenceEvaluator

    model = one_node_model(node, inputs, opsets)
    ev = ReferenceEvaluator(model)
    feeds = {n: v for n, v in zip(node.input, positional_inputs(node, inputs)) if n}
    return list(ev.run(None, feeds))


@functools.lru_cache(maxsize=1)
def _all_node_cases() -> tuple[Any, ...]:
    import warnings

    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return tuple(load_model_tests(kind="node"))


def iter_node_cases(op_types: set[str] | frozenset[str], domain: str = "") -> Iterator[NodeCase]:
    """The onnx package's node test cases whose graph is one node of one of `op_types`.

    Yields `NodeCase`s, so kernel tests can check turnout's own kernels against the official
    expected outputs (use `pytest.mark.parametrize(..., ids=lambda c: c.name)`).
    """
    for case in _all_node_cases():
        g = case.model.graph
        if len(g.node) != 1:
            continue
        n = g.node[0]
        if n.op_type not in op_types or (n.domain or "") != domain:
            continue
        opsets = {d.domain: d.version for d in case.model.opset_import}
        for inputs, outputs in case.data_sets:
            yield NodeCase(
                case.name,
                n,
                opsets,
                normalize_values(inputs),
                normalize_values(outputs),
                case.rtol,
                case.atol,
            )


def normalize_values(values: Sequence[Any]) -> list[Any]:
    """Test data as runtime values: the onnx cases hold TensorProtos for some dtypes, and numpy
    scalars that onnxruntime's backend passes as 0-d arrays (its session refuses scalars)."""
    return [
        numpy_helper.to_array(v)
        if isinstance(v, onnx.TensorProto)
        else np.asarray(v)
        if isinstance(v, np.generic)
        else v
        for v in values
    ]


@dataclass(frozen=True)
class NodeCase:
    """One data set of one single-node onnx test case."""

    name: str
    node: onnx.NodeProto
    opsets: dict[str, int]
    inputs: list[Any]
    outputs: list[Any]
    rtol: float
    atol: float


def assert_outputs_close(
    expected: Sequence[Any], got: Sequence[Any], rtol: float = 1e-3, atol: float = 1e-7
) -> None:
    """Compare outputs as onnx's backend test runner does (dtype, shape, tolerance).

    Sequences and maps are compared element by element: the runner itself recurses into a
    sequence with `len()`, which fails on 0-d elements (seen in test_loop16_seq_none).
    """
    from onnx.backend.test.runner import Runner

    if len(expected) != len(got):
        raise AssertionError(f"expected {len(expected)} outputs, got {len(got)}")
    for i, (e, g) in enumerate(zip(expected, got)):
        if isinstance(e, (list, tuple)):
            if not isinstance(g, (list, tuple)) or len(e) != len(g):
                raise AssertionError(f"output {i}: expected a sequence of {len(e)}, got {g!r}")
            assert_outputs_close(list(e), list(g), rtol, atol)
        elif isinstance(e, dict):
            if not isinstance(g, dict) or sorted(e) != sorted(g):
                raise AssertionError(f"output {i}: expected map keys {sorted(e)}, got {g!r}")
            assert_outputs_close([e[k] for k in sorted(e)], [g[k] for k in sorted(g)], rtol, atol)
        elif e is None:
            if g is not None:
                raise AssertionError(f"output {i}: expected an empty optional, got {g!r}")
        else:
            Runner.assert_similar_outputs([e], [g], rtol, atol)
