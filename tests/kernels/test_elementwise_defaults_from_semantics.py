"""Every provider's elementwise attribute defaults come from onnx's schemas, through
`turnout.sdk.semantics` (`KernelNode.attr` fills them in; `semantics.defaults.op_defaults`
serves code without a node), never from a literal in provider code (issue 31).

Before: Selu's alpha was the float32 1.67326319217681884765625 in two providers and the
float64 1.6732632423543772 in two others; HardSigmoid's (0.2, 0.5) was written in 8 places.

Two checks:
- the source of each provider's elementwise kernels and code generators (CPU, numba, OpenCL,
  CuPy, the plugin template) holds no literal as an attribute default: not
  `kn.attr("alpha", 0.2)`, not `.get("alpha", 1.0)`, not `{"alpha": 0.2}`, not `alpha=0.2`;
- each provider's node without attributes gives, bit for bit, what the same node gives with
  the schema's defaults written out, in float64 where the provider runs it, so that a default
  that is not the schema's value (a float64 0.2 for float32's 0.2) shows.
"""

from __future__ import annotations

import ast
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper as h

from turnout.graph import errors
from turnout.sdk.semantics.defaults import op_defaults
from turnout.tools.testing import cpu_session, one_node_model, provider_session

ROOT = Path(__file__).resolve().parents[2]
MODULES = [
    "core/src/turnout/providers/cpu/kernels/elementwise.py",
    "core/src/turnout/providers/cpu/kernels/activation.py",
    "providers/numba-cpu/src/turnout_numba/kernels/elementwise.py",
    "providers/numba-cpu/src/turnout_numba/codegen.py",
    "providers/opencl/src/turnout_opencl/kernels/elementwise.py",
    "providers/cupy-cuda/src/turnout_cupy/kernels/elementwise.py",
    "providers/cupy-cuda/src/turnout_cupy/codegen.py",
    "plugin_template/src/turnout_example/kernels/elementwise.py",
    "plugin_template/src/turnout_example/kernels/fused.py",
]
"""The modules where the providers' elementwise ops read their attributes."""

# (op, opset): the elementwise ops with attribute defaults
OPS: list[tuple[str, int]] = [
    ("Selu", 22),
    ("HardSigmoid", 22),
    ("Elu", 22),
    ("LeakyRelu", 16),
    ("ThresholdedRelu", 22),
    ("Celu", 12),
    ("Gelu", 20),
    ("Shrink", 9),
    ("IsInf", 20),
]
ATTRS = frozenset(a for op, _ in [*OPS, ("Swish", 24), ("Mod", 13)] for a in op_defaults(op))
"""The attribute names with a default among the elementwise ops: alpha, beta, gamma, ..."""


def _literal(node: ast.AST) -> bool:
    """A number (signed or not) or a string written out."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        node = node.operand
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, (int, float, str))
        and not isinstance(node.value, bool)
    )


def _named(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value in ATTRS


def literal_defaults(source: str) -> list[str]:
    """`line: text` of each literal (a number, or a string such as Gelu's "none") used as
    an attribute's default in `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        bad: ast.AST | None = None
        if isinstance(node, ast.Call):
            # kn.attr("alpha", 0.2), attrs.get("alpha", 1.0), _attr(kn, "alpha", 0.2)
            for name, value in zip(node.args, node.args[1:]):
                if _named(name) and _literal(value):
                    bad = value
            # _op(..., alpha=0.2), dict(alpha=0.2), kn.attr("alpha", default=0.2)
            for kw in node.keywords:
                named = kw.arg in ATTRS or (kw.arg == "default" and any(map(_named, node.args)))
                if named and _literal(kw.value):
                    bad = kw.value
        elif isinstance(node, ast.Dict):  # {"alpha": 0.2, "beta": 0.5}
            for key, value in zip(node.keys, node.values):
                if key is not None and _named(key) and _literal(value):
                    bad = value
        if bad is not None:
            found.append(f"{bad.lineno}: {ast.unparse(node)}")
    return found


@pytest.mark.parametrize("path", MODULES)
def test_no_literal_attribute_defaults(path: str) -> None:
    found = literal_defaults((ROOT / path).read_text())
    assert not found, f"{path}: defaults written as literals (read them from the schema):\n" + (
        "\n".join(found)
    )


@pytest.mark.parametrize(
    "line",
    [
        'kn.attr("alpha", 0.2)',
        'node.attr("gamma", default=1.0507)',
        'attrs.get("alpha", 1.0)',
        '_attr(kn, "lambd", 0.5)',
        '_op(1, F, "{a}", alpha=1.0, beta=0.5)',
        'DEFAULTS = {"HardSigmoid": {"alpha": 0.2, "beta": 0.5}}',
        'x = kn.attr("detect_positive", -1)',
        'n.attrs.get("approximate", "none") == "tanh"',
    ],
)
def test_the_scan_finds_a_literal_default(line: str) -> None:
    assert literal_defaults(line), line


@pytest.mark.parametrize(
    "line",
    [
        'kn.attr("alpha")',
        '_op(1, F, "{a}", **op_defaults("Elu"))',
        "np.clip(x * a + b, 0, 1)",
        'kn.attr("axis", 0)',  # not an elementwise op's attribute
    ],
)
def test_the_scan_passes_schema_defaults(line: str) -> None:
    assert not literal_defaults(line), line


# ---------------------------------------------------------------------------- the values

NUMBA = "NumbaExecutionProvider"
OPENCL = "OpenCLExecutionProvider"
CUPY_EMULATED = "CuPyEmulatedExecutionProvider"
CPU = "CPUExecutionProvider"


PROVIDERS = pytest.mark.parametrize(
    "provider_on", [CPU, NUMBA, OPENCL, CUPY_EMULATED], indirect=True
)
"""Each case on each provider, the provider alone (see `provider_on` in conftest)."""


X = np.array(
    [-1e30, -88.5, -20.0, -3.0, -1.5, -0.6, -0.5, -0.25, -1e-7, -0.0, 0.0, 1e-7, 0.25, 0.5,
     0.6, 0.999, 1.0, 1.5, 3.0, 20.0, 88.5, 1e30, np.inf, -np.inf],
)  # fmt: skip


def _run(op: str, opset: int, attrs: dict[str, Any], x: np.ndarray, provider: str) -> Any:
    node = h.make_node(op, ["x"], ["y"], name="op0", **attrs)
    model = one_node_model(node, [x], opset)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = cpu_session(model) if provider == CPU else provider_session(model, provider)
    placed = {a.provider for a in sess.partition_report().assignments}
    assert placed == {provider}, f"{op} ran on {placed}, not on {provider}"
    with np.errstate(all="ignore"):
        return sess.run(None, {"x": x})[0]


def _explicit(op: str, opset: int) -> dict[str, Any]:
    out = {}
    for name, value in op_defaults(op, opset).items():
        out[name] = value.decode() if isinstance(value, bytes) else value
    return out


@PROVIDERS
@pytest.mark.parametrize(("op", "opset"), OPS, ids=[op for op, _ in OPS])
def test_no_attributes_means_the_schema_defaults(provider_on: str, op: str, opset: int) -> None:
    ran = []
    for dtype in (np.float64, np.float32):
        x = X.astype(dtype)
        try:
            bare = _run(op, opset, {}, x, provider_on)
        except (errors.FallbackError, errors.InvalidGraph):
            continue  # the op's schema or the provider_on does not take this dtype: the next one
        given = _run(op, opset, _explicit(op, opset), x, provider_on)
        assert bare.dtype == given.dtype
        assert np.array_equal(bare.view(np.uint8), given.view(np.uint8)), (
            f"{op} {np.dtype(dtype).name} on {provider_on}: no attributes gives\n{bare}\n"
            f"the schema's defaults give\n{given}"
        )
        ran.append(np.dtype(dtype).name)
    if not ran:
        pytest.fail(f"{provider_on} runs {op} in neither float64 nor float32: nothing checked")


def test_the_values_check_sees_a_float64_default() -> None:
    """The float64 inputs tell a float64 0.2 from float32's 0.2 (what a literal default gave):
    HardSigmoid with alpha=0.2 (stored as float32) and a float64 alpha differ."""
    x = X.astype(np.float64)
    a32 = float(np.float32(0.2))
    with np.errstate(all="ignore"):
        got32 = np.clip(x * a32 + 0.5, 0, 1)
        got64 = np.clip(x * 0.2 + 0.5, 0, 1)
    assert not np.array_equal(got32, got64)
    assert onnx.helper.make_attribute("alpha", 0.2).f == np.float32(0.2)
