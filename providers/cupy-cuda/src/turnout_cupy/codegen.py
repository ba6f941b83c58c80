"""CUDA C for fused elementwise groups: one kernel per group, compiled by CuPy (`RawKernel`).

`FUSED_OPS` is the table: each op's expression in CUDA C over its inputs (`{0}`, `{1}`...) and
its attributes, in the group's float type `T` (float or double). `GroupProgram` holds one
group's expression list; `source(variant)` writes the kernel for one launch layout:

- the iteration space is the group's output shape (every member has that shape, which
  `fusion` ensures); one thread per element, grid-stride loop, 64-bit indices;
- each boundary input is either *dense* (its shape is the output's and it is C-contiguous:
  read at the flat index) or *strided* (broadcast or a view: read at the offset its element
  strides give, 0 on broadcast dimensions), which the variant says;
- a group with no strided input has no dimension arguments at all.

The same text is what `python -m turnout_cupy.check --compile-only` hands to nvcc, and what the
tests compile as host C++ (`HOST_PRELUDE`: one block of one thread) to check its values on a
machine without a GPU.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from turnout.sdk.semantics.activations import selu_scales
from turnout.sdk.semantics.defaults import op_default, op_defaults

__all__ = [
    "BLOCK",
    "CTYPES",
    "DEVICE_PRELUDE",
    "MAX_GRID",
    "FUSED_OPS",
    "HOST_PRELUDE",
    "GroupProgram",
    "Step",
    "Variant",
]

CTYPES: Mapping[str, str] = {"float32": "float", "float64": "double", "bool": "bool"}
BLOCK = 256
MAX_GRID = 1 << 20

# Helpers every kernel may call, templated on the float type. NaN rules follow ONNX/numpy:
# Max/Min propagate NaN; Relu(NaN) is NaN.
_HELPERS = r"""
template <typename T> TN_FN T tn_max(T a, T b) { return (a != a || a > b) ? a : b; }
template <typename T> TN_FN T tn_min(T a, T b) { return (a != a || a < b) ? a : b; }
template <typename T> TN_FN T tn_relu(T a) { return a < T(0) ? T(0) : a; }
template <typename T> TN_FN T tn_sigmoid(T a) { return T(1) / (T(1) + exp(-a)); }
template <typename T> TN_FN T tn_softplus(T a) {
  return a > T(0) ? a + log1p(exp(-a)) : log1p(exp(a));
}
template <typename T> TN_FN T tn_sign(T a) {
  return a > T(0) ? T(1) : (a < T(0) ? T(-1) : a);
}
template <typename T> TN_FN T tn_clip(T a, T lo, T hi) { return tn_min(tn_max(a, lo), hi); }
"""

DEVICE_PRELUDE = "#define TN_FN __device__ __forceinline__\n" + _HELPERS

# The host build of a kernel (tests only): the same kernel text compiled as C++ for one block
# of one thread, which the grid-stride loops then walk over every element and row.
HOST_PRELUDE = (
    r"""#include <cmath>
#include <cstdint>
using namespace std;
#define TN_FN inline
#define __global__
#define __shared__ static
struct tn_dim3 { long long x; };
static const tn_dim3 threadIdx = {0}, blockIdx = {0}, blockDim = {1}, gridDim = {1};
static inline void __syncthreads() {}
"""
    + _HELPERS
)


def _lit(v: float) -> str:
    return f"T({float(v)!r})"


Expr = Callable[[Sequence[str], Mapping[str, Any]], str]


def _binary(fmt: str) -> Expr:
    return lambda a, _: fmt.format(*a)


def _unary(fmt: str) -> Expr:
    return lambda a, _: fmt.format(a[0])


def _chain(fn: str) -> Expr:
    """Variadic Max/Min/Sum: a left fold of a binary helper."""

    def expr(a: Sequence[str], _: Mapping[str, Any]) -> str:
        out = a[0]
        for x in a[1:]:
            out = f"{fn}({out}, {x})" if fn else f"({out} + {x})"
        return out

    return expr


def _clip(a: Sequence[str], attrs: Mapping[str, Any]) -> str:
    out = a[0]
    if len(a) > 1 and a[1]:
        out = f"tn_max({out}, {a[1]})"
    if len(a) > 2 and a[2]:
        out = f"tn_min({out}, {a[2]})"
    return out


def _gelu(a: Sequence[str], attrs: Mapping[str, Any]) -> str:
    x = a[0]
    if attrs.get("approximate", op_default("Gelu", "approximate")) == "tanh":
        inner = f"T(0.7978845608028654) * ({x} + T(0.044715) * {x} * {x} * {x})"
        return f"(T(0.5) * {x} * (T(1) + tanh({inner})))"
    return f"(T(0.5) * {x} * (T(1) + erf({x} * T(0.7071067811865476))))"


def _selu(a: Sequence[str], attrs: Mapping[str, Any]) -> str:
    given = {**op_defaults("Selu"), **attrs}
    g, ga = selu_scales(np.float32(given["alpha"]), np.float32(given["gamma"]))
    e = f"T(expm1((double){a[0]}))"  # expm1 in double, rounded once: numerics.expm1
    return f"({a[0]} > T(0) ? {_lit(g)} * {a[0]} : {_lit(ga)} * {e})"


def _with(fmt: str, **defaults: float) -> Expr:
    """An activation with float attributes: `fmt` names them ({alpha}) and its input ({x})."""

    def expr(a: Sequence[str], attrs: Mapping[str, Any]) -> str:
        # ONNX float attributes (and their defaults) are float32 values, in double kernels too
        vals = {k: _lit(np.float32(attrs.get(k, d))) for k, d in defaults.items()}
        return fmt.format(x=a[0], **vals)

    return expr


FUSED_OPS: Mapping[str, Expr] = {
    "Add": _binary("({0} + {1})"),
    "Sub": _binary("({0} - {1})"),
    "Mul": _binary("({0} * {1})"),
    "Div": _binary("({0} / {1})"),
    "Pow": _binary("pow({0}, {1})"),
    "Max": _chain("tn_max"),
    "Min": _chain("tn_min"),
    "Sum": _chain(""),
    "PRelu": _binary("({0} < T(0) ? {0} * {1} : {0})"),
    "Where": lambda a, _: f"({a[0]} ? {a[1]} : {a[2]})",
    "Clip": _clip,
    "Neg": _unary("(-{0})"),
    "Abs": _unary("fabs({0})"),
    "Exp": _unary("exp({0})"),
    "Log": _unary("log({0})"),
    "Sqrt": _unary("sqrt({0})"),
    "Reciprocal": _unary("(T(1) / {0})"),
    "Floor": _unary("floor({0})"),
    "Ceil": _unary("ceil({0})"),
    "Round": _unary("rint({0})"),
    "Sign": _unary("tn_sign({0})"),
    "Sin": _unary("sin({0})"),
    "Cos": _unary("cos({0})"),
    "Tanh": _unary("tanh({0})"),
    "Erf": _unary("erf({0})"),
    "Sigmoid": _unary("tn_sigmoid({0})"),
    "Relu": _unary("tn_relu({0})"),
    "Softplus": _unary("tn_softplus({0})"),
    "Softsign": _unary("({0} / (T(1) + fabs({0})))"),
    "Mish": _unary("({0} * tanh(tn_softplus({0})))"),
    "HardSwish": _unary("({0} * tn_clip({0} / T(6) + T(0.5), T(0), T(1)))"),
    "Gelu": _gelu,
    "LeakyRelu": _with("({x} >= T(0) ? {x} : {x} * {alpha})", **op_defaults("LeakyRelu")),
    "Elu": _with("({x} >= T(0) ? {x} : {alpha} * (exp({x}) - T(1)))", **op_defaults("Elu")),
    "Celu": _with(
        "(tn_max({x}, T(0)) + tn_min(T(0), {alpha} * (exp({x} / {alpha}) - T(1))))",
        **op_defaults("Celu"),
    ),
    "Selu": _selu,
    "HardSigmoid": _with(
        "tn_clip({alpha} * {x} + {beta}, T(0), T(1))", **op_defaults("HardSigmoid")
    ),
    "ThresholdedRelu": _with("({x} > {alpha} ? {x} : T(0))", **op_defaults("ThresholdedRelu")),
}
"""Op type -> expression builder (input expressions, attributes) -> CUDA C expression."""


@dataclass(frozen=True)
class Step:
    """One member node: its op, attributes, input value names ("" absent) and output name."""

    op_type: str
    attrs: Mapping[str, Any]
    inputs: tuple[str, ...]
    output: str


@dataclass(frozen=True)
class Variant:
    """A launch layout: the iteration rank and, per boundary input, whether it is dense."""

    rank: int
    dense: tuple[bool, ...]


class GroupProgram:
    """One fused group as CUDA C: boundary inputs (name, dtype), member steps in order, the
    values it exports, and its float type."""

    def __init__(
        self,
        name: str,
        inputs: Sequence[tuple[str, np.dtype[Any]]],
        steps: Sequence[Step],
        outputs: Sequence[str],
        dtype: np.dtype[Any],
    ) -> None:
        self.name = "".join(c if c.isalnum() else "_" for c in name)
        self.inputs = list(inputs)
        self.steps = list(steps)
        self.outputs = list(outputs)
        self.dtype = np.dtype(dtype)
        self.ctype = CTYPES[self.dtype.name]

    def kernel_name(self, v: Variant) -> str:
        """Named by a digest of the group's types and statements, and the layout: groups with
        the same text (one per layer of a model) share one kernel and one CuPy cache entry."""
        mask = "".join("d" if d else "s" for d in v.dense)
        text = repr((self.ctype, [dt.name for _, dt in self.inputs], self.body()))
        digest = hashlib.sha1(text.encode()).hexdigest()[:8]
        return f"tn_{digest}_r{v.rank}_{mask}"

    def body(self) -> list[str]:
        """The per-element statements: `T v_k = <expr>;` for each step."""
        names = {x: f"x{i}" for i, (x, _) in enumerate(self.inputs)}
        lines = []
        for k, s in enumerate(self.steps):
            args = [names[x] if x else "" for x in s.inputs]
            lines.append(f"    T v{k} = {FUSED_OPS[s.op_type](args, s.attrs)};")
            names[s.output] = f"v{k}"
        for j, y in enumerate(self.outputs):
            lines.append(f"    o{j}[i] = {names[y]};")
        return lines

    def params(self, v: Variant) -> list[str]:
        ps = [
            f"const {CTYPES[dt.name]}* __restrict__ p{i}" for i, (_, dt) in enumerate(self.inputs)
        ]
        ps += [f"{self.ctype}* __restrict__ o{j}" for j in range(len(self.outputs))]
        ps.append("const long long n")
        if not all(v.dense):
            ps += [f"const long long d{k}" for k in range(v.rank)]
            for i, dense in enumerate(v.dense):
                if not dense:
                    ps += [f"const long long s{i}_{k}" for k in range(v.rank)]
        return ps

    def loads(self, v: Variant) -> list[str]:
        lines = []
        strided = [i for i, d in enumerate(v.dense) if not d]
        if strided:
            lines.append("    long long r = i;")
            for i in strided:
                lines.append(f"    long long a{i} = 0;")
            for k in reversed(range(v.rank)):
                lines.append(f"    {{ long long c = r % d{k}; r /= d{k};")
                lines += [f"      a{i} += c * s{i}_{k};" for i in strided]
                lines.append("    }")
        for i, (_, dt) in enumerate(self.inputs):
            at = "i" if v.dense[i] else f"a{i}"
            lines.append(f"    const {CTYPES[dt.name]} x{i} = p{i}[{at}];")
        return lines

    def function(self, v: Variant) -> str:
        """The kernel of variant `v`, without the prelude."""
        params = ",\n    ".join(self.params(v))
        loop = (
            "  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;"
            " i += (long long)blockDim.x * gridDim.x) {"
        )
        body = "\n".join(self.loads(v) + self.body())
        return (
            f'extern "C" __global__ void {self.kernel_name(v)}(\n    {params}) {{\n'
            f"  typedef {self.ctype} T;\n{loop}\n{body}\n  }}\n}}\n"
        )

    def source(self, v: Variant) -> str:
        """The CUDA source of variant `v`: what `cupy.RawKernel` compiles."""
        return DEVICE_PRELUDE + "\n" + self.function(v)

    def launch(self, v: Variant, n: int) -> tuple[int, int]:
        """(grid, block) for `n` elements: one thread each, the grid capped (the loop strides)."""
        return min((n + BLOCK - 1) // BLOCK, MAX_GRID), BLOCK
