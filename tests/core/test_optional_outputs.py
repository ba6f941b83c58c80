"""Optional outputs left out, on every provider: a kernel returns exactly one value per entry of
`node.outputs`, whatever subset of its optional outputs a node declares.

The ops and which outputs are optional come from onnx.defs (`turnout.tools.testing.output_variants`:
trailing optional outputs dropped, the others blanked to "", each subset ONNX accepts). Every
single-node ONNX node test whose node declares an optional output is run that way, each variant
compared with the case's expected outputs at the case's tolerances. The com.microsoft ops with
optional outputs have no node tests: a small table gives them inputs, and turnout's numpy
kernels with every output declared are their reference.

Each provider runs alone (fallback "error"), so its own kernel is what runs: a variant it
declines is counted, not failed, and an op it declines every variant of is skipped saying so.
The CuPy kernels run here on the emulated (numpy) backend; on a GPU they also run as themselves.
Before: Unique returned all four outputs on every provider (CPU, numba through the numpy kernel,
CuPy), LayerNormalization all three on CuPy, and GroupQueryAttention three of its four.
"""

from __future__ import annotations

import warnings
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper

from turnout.api.options import SessionOptions
from turnout.api.session import InferenceSession
from turnout.engine.provider_selection import CPU_NUMPY_ONLY_KEY
from turnout.graph import errors
from turnout.sdk.plugins import registry
from turnout.tools.testing import (
    _all_node_cases,
    assert_outputs_close,
    cpu_session,
    normalize_values,
    one_node_model,
    output_variants,
)

EMULATED = "CuPyEmulatedExecutionProvider"
PROVIDERS = {
    "cpu": "CPUExecutionProvider",
    "numba": "NumbaExecutionProvider",
    "opencl": "OpenCLExecutionProvider",
    "cupy-emulated": EMULATED,
    "cupy": "CuPyExecutionProvider",
}


def _unavailable(name: str) -> str | None:
    """Why provider `name` cannot run here, or None."""
    if name == EMULATED:
        try:
            import turnout_cupy.emulated  # noqa: F401
        except ImportError as e:
            return f"turnout-cupy is not installed ({e})"
        return None
    factory = registry.find(name)
    if factory is None:
        return "not installed"
    avail = registry.probe(factory)
    return None if avail.ok else avail.reason


def _provider_params() -> list[Any]:
    params = []
    for key, name in PROVIDERS.items():
        why = _unavailable(name)
        marks = [pytest.mark.skip(reason=f"{name}: {why}")] if why else []
        params.append(pytest.param(name, id=key, marks=marks))
    return params


@pytest.fixture(scope="module", params=_provider_params())
def provider(request: pytest.FixtureRequest) -> Iterator[str]:
    """Each provider's name in turn; the emulated CuPy provider registered while it is used."""
    name: str = request.param
    if name != EMULATED:
        yield name
        return
    from turnout_cupy.emulated import EmulatedFactory

    registry.register(EmulatedFactory())
    try:
        yield name
    finally:
        registry.unregister(name)


# ------------------------------------------------------------------------------ the check


@dataclass(frozen=True)
class Subject:
    """A one-node model's variants and its data sets: (feeds, expected outputs by name)."""

    name: str
    variants: tuple[onnx.ModelProto, ...]
    data: Callable[[], list[tuple[dict[str, Any], dict[str, Any]]]]
    rtol: float = 1e-3
    atol: float = 1e-7


def _session(model: onnx.ModelProto, provider: str) -> InferenceSession | None:
    """`provider` alone (None when it declines a node): its own kernel runs, never CPU's."""
    so = SessionOptions()
    so.fallback = "error"
    so.add_session_config_entry(CPU_NUMPY_ONLY_KEY, "1")  # "CPU" is the numpy kernels
    try:
        return InferenceSession(model.SerializeToString(), so, providers=[provider])
    except (errors.FallbackError, errors.NotImplemented):
        return None


def _check(subjects: Sequence[Subject], provider: str, what: str) -> None:
    """Run every variant of every subject on `provider`; fail listing each wrong one."""
    failures: list[str] = []
    ran = declined = 0
    factory = registry.find(provider)
    known = factory.expected_failures() if factory is not None else {}
    for subject in subjects:
        if subject.name in known:  # fails with every output declared: conformance tracks it
            continue
        data = subject.data()
        for variant in subject.variants:
            outputs = list(variant.graph.node[0].output)
            label = f"{subject.name} outputs {outputs}"
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")  # onnx's deprecation warnings for old opsets
                sess = _session(variant, provider)
                if sess is None:
                    declined += 1
                    continue
                ran += 1
                try:
                    for feeds, want in data:
                        got = sess.run(None, feeds)
                        expect = [want[o.name] for o in variant.graph.output]
                        assert_outputs_close(expect, got, subject.rtol, subject.atol)
                except Exception as e:  # the count, a value or the error itself is reported
                    failures.append(f"{label}: {type(e).__name__}: {str(e)[:400]}")
    assert not failures, f"{len(failures)} of {ran} variants wrong:\n" + "\n".join(failures)
    if not ran:
        pytest.skip(f"{provider} declines all {declined} variant(s) of {what}")


# ------------------------------------------------------------------------------ node tests


def _node_subjects() -> dict[str, list[Subject]]:
    """op -> the single-node node tests whose node has outputs that can be left out."""
    by_op: dict[str, list[Subject]] = defaultdict(list)
    for case in _all_node_cases():
        graph = case.model.graph
        if len(graph.node) != 1:
            continue
        variants = output_variants(case.model)
        if not variants:
            continue
        node = graph.node[0]
        op = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
        by_op[op].append(
            Subject(
                case.name,
                tuple(variants),
                lambda case=case: _node_data(case),
                case.rtol,
                case.atol,
            )
        )
    return dict(sorted(by_op.items()))


def _node_data(case: Any) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    inputs = [i.name for i in case.model.graph.input]
    outputs = [o.name for o in case.model.graph.output]
    return [
        (
            dict(zip(inputs, normalize_values(feeds))),
            dict(zip(outputs, normalize_values(expected))),
        )
        for feeds, expected in case.data_sets
    ]


NODE_SUBJECTS = _node_subjects()


@pytest.mark.parametrize("op", sorted(NODE_SUBJECTS))
def test_node_tests_with_optional_outputs_left_out(op: str, provider: str) -> None:
    _check(NODE_SUBJECTS[op], provider, op)


def test_the_node_tests_cover_the_ops_with_optional_outputs() -> None:
    """The ops the node tests give variants of (a changed onnx shows here, not as silence)."""
    assert {
        "Attention",
        "BatchNormalization",
        "Dropout",
        "GRU",
        "LSTM",
        "LayerNormalization",
        "MaxPool",
        "RNN",
        "SoftmaxCrossEntropyLoss",
        "Unique",
    } <= set(NODE_SUBJECTS)


# ------------------------------------------------------------------------------ contrib ops

MS = "com.microsoft"
Inputs = Callable[[np.random.Generator], list[Any]]


def _f32(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def _i8(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.integers(-100, 100, shape).astype(np.int8)


def _u8(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.integers(0, 256, shape).astype(np.uint8)


def _ids(rng: np.random.Generator, high: int) -> np.ndarray:
    return rng.integers(0, high, (2, 3)).astype(np.int32)


# (op, domain, inputs ("" absent), outputs, attributes, opset, values) of ops with optional
# outputs and no node test; tiny shapes: the check is the output count
CONTRIB: dict[str, tuple[str, str, list[str], int, dict[str, Any], int, Inputs]] = {
    "SkipLayerNormalization": (
        "SkipLayerNormalization", MS, ["x", "skip", "gamma", "beta", "bias"], 4, {}, 17,
        lambda r: [_f32(r, 2, 3, 8), _f32(r, 2, 3, 8), _f32(r, 8), _f32(r, 8), _f32(r, 8)],
    ),
    "SkipSimplifiedLayerNormalization": (
        "SkipSimplifiedLayerNormalization", MS, ["x", "skip", "gamma", "bias"], 4, {}, 17,
        lambda r: [_f32(r, 2, 3, 8), _f32(r, 2, 3, 8), _f32(r, 8), _f32(r, 8)],
    ),
    "SimplifiedLayerNormalization": (
        "SimplifiedLayerNormalization", "", ["x", "scale"], 2, {}, 17,
        lambda r: [_f32(r, 2, 3, 8), _f32(r, 8)],
    ),
    "LayerNormalization-1": (  # onnxruntime's contrib version, before ONNX's opset 17
        "LayerNormalization", "", ["x", "scale", "b"], 3, {}, 16,
        lambda r: [_f32(r, 2, 3, 8), _f32(r, 8), _f32(r, 8)],
    ),
    "EmbedLayerNormalization": (
        "EmbedLayerNormalization", MS,
        ["ids", "segment", "word", "position", "segment_emb", "gamma", "beta", "mask"], 3, {}, 17,
        lambda r: [
            _ids(r, 10), _ids(r, 2), _f32(r, 10, 8), _f32(r, 6, 8), _f32(r, 2, 8), _f32(r, 8),
            _f32(r, 8), np.ones((2, 3), np.int32),
        ],
    ),
    "Attention": (
        "Attention", MS, ["x", "w", "b", "", "past"], 2, {"num_heads": 2}, 17,
        lambda r: [_f32(r, 1, 2, 8), _f32(r, 8, 24), _f32(r, 24), None, _f32(r, 2, 1, 2, 1, 4)],
    ),
    "QAttention": (
        "QAttention", MS, ["x", "w", "b", "x_scale", "w_scale", "", "x_zero", "w_zero", "past"],
        2, {"num_heads": 2}, 17,
        lambda r: [
            _u8(r, 1, 2, 8), _u8(r, 8, 24), _f32(r, 24), np.array(0.02, np.float32),
            np.array(0.03, np.float32), None, np.array(128, np.uint8), np.array(128, np.uint8),
            _f32(r, 2, 1, 2, 1, 4),
        ],
    ),
    "MultiHeadAttention": (
        "MultiHeadAttention", MS, ["q", "k", "v", "", "", "", "past_k", "past_v"], 4,
        {"num_heads": 2}, 17,
        lambda r: [
            _f32(r, 1, 2, 8), _f32(r, 1, 2, 8), _f32(r, 1, 2, 8), None, None, None,
            _f32(r, 1, 2, 1, 4), _f32(r, 1, 2, 1, 4),
        ],
    ),
    "GroupQueryAttention": (
        "GroupQueryAttention", MS, ["q", "k", "v", "past_k", "past_v", "seqlens_k", "total"], 4,
        {"num_heads": 2, "kv_num_heads": 1}, 17,
        lambda r: [
            _f32(r, 1, 2, 8), _f32(r, 1, 2, 4), _f32(r, 1, 2, 4), _f32(r, 1, 1, 1, 4),
            _f32(r, 1, 1, 1, 4), np.array([2], np.int32), np.array(3, np.int32),
        ],
    ),
    "DynamicQuantizeLSTM": (
        "DynamicQuantizeLSTM", MS,
        ["x", "w", "r", "b", "", "", "", "", "w_scale", "w_zero", "r_scale", "r_zero"], 3,
        {"hidden_size": 2}, 17,
        lambda r: [
            _f32(r, 2, 1, 3), _i8(r, 1, 3, 8), _i8(r, 1, 2, 8), _f32(r, 1, 16), None, None, None,
            None, np.array([0.01], np.float32), np.array([0], np.int8),
            np.array([0.02], np.float32), np.array([0], np.int8),
        ],
    ),
}  # fmt: skip


def _contrib_subject(name: str, rng: np.random.Generator) -> Subject:
    op, domain, inputs, n_out, attrs, opset, values = CONTRIB[name]
    node = helper.make_node(op, inputs, [f"y{i}" for i in range(n_out)], name=op, domain=domain)
    node.attribute.extend(helper.make_attribute(k, v) for k, v in attrs.items())
    vals = values(rng)
    model = one_node_model(node, vals, {"": opset, MS: 1})
    feeds = {x: v for x, v in zip(inputs, vals) if x}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        full = cpu_session(model).run(None, feeds)
    want = dict(zip([o.name for o in model.graph.output], full))
    return Subject(name, tuple(output_variants(model)), lambda: [(feeds, want)], 1e-3, 1e-5)


@pytest.mark.parametrize("name", sorted(CONTRIB))
def test_contrib_ops_with_optional_outputs_left_out(
    name: str, provider: str, rng: np.random.Generator
) -> None:
    subject = _contrib_subject(name, rng)
    assert subject.variants, f"{name}: no variants (onnx does not know the op's schema?)"
    _check([subject], provider, name)
