"""Code generation for elementwise groups: ONE numba kernel per group, one pass over memory.

A group is a set of elementwise/broadcasting nodes (a single node is a group of one). The
generated kernel loops once over the broadcast iteration space of the group's external inputs;
each node becomes one line computing a scalar temporary, and every value the outside world
reads is stored from inside the same loop. Each node's result is cast to its own ONNX dtype, so
a fused group rounds and wraps exactly like the unfused ops would (float16/bfloat16 compute in
float32).

When every external input's shape is known at session creation, the kernel is specialised to
those shapes (literal loop bounds, broadcasting and strides; initializers packed into it) and its
run wrapper only checks shapes, allocates outputs and makes one call; small groups get a serial
kernel even when threads > 1 (`SERIAL_WORK`). Other groups resolve shapes on each run.

The op table `EW_OPS` is the only place an op's scalar semantics live: adding an elementwise op
is one row.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numba import types

from turnout.graph.errors import InvalidArgument
from turnout.graph.ir import Node, ValueInfo
from turnout.sdk.semantics.activations import selu_scales
from turnout.sdk.semantics.defaults import op_default

from . import cache
from .vecmath import contracts, exp_f32, mlas_logistic_f32, mlas_tanh_f32, sigmoid_f32, tanh_f32

__all__ = ["EW_OPS", "SERIAL_WORK", "GroupKernel", "compile_group", "compute_dtype", "ew_supports"]

Expr = Callable[[list[str], "Node", str], str]
"""(argument names, node, output constructor) -> the expression computing the node's value. It
may be preceded by statements, one per line; `@` in the text stands for a prefix unique to the
node, for the statements' temporaries."""

# ONNX dtypes the kernels compute natively; float16 and bfloat16 compute in float32.
_NUMBA_TYPES: dict[str, types.Number | types.Boolean] = {
    "float32": types.float32,
    "float64": types.float64,
    "int8": types.int8,
    "int16": types.int16,
    "int32": types.int32,
    "int64": types.int64,
    "uint8": types.uint8,
    "uint16": types.uint16,
    "uint32": types.uint32,
    "uint64": types.uint64,
    "bool": types.boolean,
}
_CTOR = {k: f"np.{'bool_' if k == 'bool' else k}" for k in _NUMBA_TYPES}


@functools.cache  # (a dtype's name is computed in Python: ~4 us, asked per value per claim)
def compute_dtype(dt: np.dtype[Any] | None) -> np.dtype[Any] | None:
    """The dtype a kernel computes in for ONNX dtype `dt`, or None if unsupported."""
    if dt is None:
        return None
    if dt == np.float16 or dt.name == "bfloat16":
        return np.dtype(np.float32)
    return dt if dt.name in _NUMBA_TYPES else None


def _group_dtype(info: ValueInfo) -> np.dtype[Any]:
    """The compute dtype of a value in a group (`ew_supports` accepted its type)."""
    c = compute_dtype(info.dtype)
    assert c is not None, f"group value of unsupported dtype {info.dtype}"
    return c


def numba_array(
    dt: np.dtype[Any], ndim: int, *, readonly: bool, layout: Literal["C", "A"] = "A"
) -> types.Array[Any]:
    return types.Array(_NUMBA_TYPES[dt.name], ndim, layout, readonly=readonly)


# --------------------------------------------------------------------------------------------
# The op table: op -> (allowed dtype kinds of the first input, min since-version, expression)
# An expression gets the argument names (absent optional inputs are ""), the node, and the
# constructor of the output's compute dtype (like "np.float32").


def _f(name: str) -> Expr:
    return lambda a, n, T: f"{T}(np.{name}({a[0]}))"


Stmts = Callable[[str, str], list[str]]


def _vec(f32: Stmts, name: str, ort_f32: Stmts | None = None) -> Expr:
    """A float32 function as vectorizable statements (`vecmath`): `ort_f32`, onnxruntime's own
    to the bit, where given and the node's type is float32 itself, else `f32` (float16 and
    bfloat16 compute in float32 and keep turnout's); numpy's `name` otherwise."""

    def expr(a: list[str], n: Node, T: str) -> str:
        if T != "np.float32":
            return f"{T}(np.{name}({a[0]}))"
        f = ort_f32 if ort_f32 is not None and _is_float32(n) else f32
        return "\n".join([*f(a[0], "@v"), "@v"])

    return expr


def _is_float32(n: Node) -> bool:
    info = n.output_infos[0]
    return info is not None and info.dtype == np.float32


def _sigmoid(a: list[str], n: Node, T: str) -> str:
    """float32: onnxruntime's MLAS sigmoid; float16/bfloat16 (computed in float32): turnout's
    from exp, as onnxruntime computes those otherwise."""
    if T != "np.float32":
        return f"{T}(1.0 / (1.0 + np.exp(-{a[0]})))"
    f32 = mlas_logistic_f32 if _is_float32(n) else sigmoid_f32
    return "\n".join([*f32(a[0], "@v"), "@v"])


def _pow(a: list[str], n: Node, T: str) -> str:
    """x ** y, with y == 2 as x * x: the exponent is loop-invariant (a constant, usually 2 in a
    detector head's (2 * sigmoid) ** 2), so LLVM hoists the test and the square vectorizes;
    numba's float32 `**` is a scalar call (~15 ns an element, measured) and not always the
    correctly rounded square that x * x, numpy and onnxruntime give."""
    return f"{T}({a[0]} * {a[0]} if {a[1]} == 2 else {a[0]} ** {T}({a[1]}))"


def _bin(op: str) -> Expr:
    return lambda a, n, T: f"{T}({a[0]} {op} {a[1]})"


def _cmp(op: str) -> Expr:
    return lambda a, n, T: f"({a[0]} {op} {a[1]})"


def _fold(pick: str) -> Expr:
    """Max/Min over any number of inputs, NaN-propagating like numpy's maximum/minimum."""

    def expr(a: list[str], n: Node, T: str) -> str:
        acc = a[0]
        for b in a[1:]:
            acc = f"({acc} if ({acc} {pick} {b} or {acc} != {acc}) else {b})"
        return f"{T}({acc})"

    return expr


def _c(x: float, T: str) -> str:
    """A float constant in the output's compute type (repr keeps every digit)."""
    return f"{T}({x!r})"


def _attr(n: Node, name: str, default: float | None = None) -> float:
    """A float attribute; absent, `default` or else the op's schema default."""
    if name in n.attrs:
        return float(n.attrs[name])
    return float(op_default(n.op_type, name) if default is None else default)


def _text(n: Node, name: str) -> str:
    """A string attribute; absent, the ONNX op's schema default (also for turnout's Gelu)."""
    return str(n.attrs[name] if name in n.attrs else op_default(n.op_type, name))


def _clip(a: list[str], n: Node, T: str) -> str:
    x = a[0]
    lo = a[1] if len(a) > 1 and a[1] else None
    hi = a[2] if len(a) > 2 and a[2] else None
    if "min" in n.attrs or "max" in n.attrs:  # Clip-6: bounds are attributes
        lo = _c(_attr(n, "min", -math.inf), T)
        hi = _c(_attr(n, "max", math.inf), T)
    e = x  # lower bound first, then the upper one: min > max gives max, as ONNX says
    if lo is not None:
        e = f"({lo} if {e} < {lo} else {e})"
    if hi is not None:
        e = f"({hi} if {e} > {hi} else {e})"
    return f"{T}({e})"


def _gelu(a: list[str], n: Node, T: str) -> str:
    x = a[0]
    if _text(n, "approximate") == "tanh":
        k = math.sqrt(2.0 / math.pi)
        return f"{T}(0.5 * {x} * (1.0 + np.tanh({k!r} * ({x} + 0.044715 * {x} * {x} * {x}))))"
    return f"{T}(0.5 * {x} * (1.0 + math.erf({x} * {1 / math.sqrt(2.0)!r})))"


def _selu(a: list[str], n: Node, T: str) -> str:
    g, ga = selu_scales(_attr(n, "alpha"), _attr(n, "gamma"))  # the CPU provider's order
    x = a[0]
    e = f"{T}(np.expm1(np.float64({x})))"  # expm1 in double, rounded once: numerics.expm1
    return f"({T}({_c(g, T)} * {x}) if {x} > 0 else {T}({_c(ga, T)} * {e}))"


def _softplus(x: str) -> str:
    return f"(({x} + np.log1p(np.exp(-{x}))) if {x} > 0 else np.log1p(np.exp({x})))"


def _isinf(a: list[str], n: Node, T: str) -> str:
    pos, neg = _attr(n, "detect_positive"), _attr(n, "detect_negative")
    terms = ([f"{a[0]} == np.inf"] if pos else []) + ([f"{a[0]} == -np.inf"] if neg else [])
    return "(" + " or ".join(terms) + ")" if terms else "False"


_F = frozenset("f")
_FI = frozenset("fi")
_FIU = frozenset("fiu")
_IU = frozenset("iu")
_B = frozenset("b")
_ALL = frozenset("fiub")

EW_OPS: dict[str, tuple[frozenset[str], int, Expr]] = {
    # arithmetic (since 7: numpy-style broadcasting; earlier versions had `broadcast`/`axis`)
    "Add": (_FIU, 7, _bin("+")),
    "Sub": (_FIU, 7, _bin("-")),
    "Mul": (_FIU, 7, _bin("*")),
    "Div": (_F, 7, _bin("/")),
    "Pow": (_F, 7, _pow),
    "Max": (_FIU, 8, _fold(">=")),
    "Min": (_FIU, 8, _fold("<=")),
    "Sum": (_FIU, 8, lambda a, n, T: f"{T}({' + '.join(a)})"),
    "Mean": (_F, 8, lambda a, n, T: f"{T}(({' + '.join(a)}) / {len(a)})"),
    "PRelu": (_F, 7, lambda a, n, T: f"{T}({a[0]} if {a[0]} >= 0 else {a[0]} * {a[1]})"),
    "Where": (_B, 9, lambda a, n, T: f"{T}({a[1]} if {a[0]} else {a[2]})"),
    "Clip": (_FIU, 6, _clip),
    # comparison and logic
    "Equal": (_ALL, 11, _cmp("==")),
    "Less": (_FIU, 9, _cmp("<")),
    "Greater": (_FIU, 9, _cmp(">")),
    "LessOrEqual": (_FIU, 12, _cmp("<=")),
    "GreaterOrEqual": (_FIU, 12, _cmp(">=")),
    "And": (_B, 7, lambda a, n, T: f"({a[0]} and {a[1]})"),
    "Or": (_B, 7, lambda a, n, T: f"({a[0]} or {a[1]})"),
    "Xor": (_B, 7, lambda a, n, T: f"({a[0]} != {a[1]})"),
    "Not": (_B, 1, lambda a, n, T: f"(not {a[0]})"),
    "BitwiseAnd": (_IU, 18, _bin("&")),
    "BitwiseOr": (_IU, 18, _bin("|")),
    "BitwiseXor": (_IU, 18, _bin("^")),
    "BitwiseNot": (_IU, 18, lambda a, n, T: f"{T}(~{a[0]})"),
    # unary math
    "Abs": (_FI, 6, lambda a, n, T: f"{T}(abs({a[0]}))"),
    "Neg": (_FI, 6, lambda a, n, T: f"{T}(-{a[0]})"),
    "Sign": (_FI, 9, _f("sign")),
    "Exp": (_F, 6, _vec(exp_f32, "exp")),
    "Log": (_F, 6, _f("log")),
    "Sqrt": (_F, 6, _f("sqrt")),
    "Reciprocal": (_F, 6, lambda a, n, T: f"{T}({T}(1) / {a[0]})"),
    "Floor": (_F, 6, _f("floor")),
    "Ceil": (_F, 6, _f("ceil")),
    "Round": (_F, 11, _f("rint")),
    "Sin": (_F, 7, _f("sin")),
    "Cos": (_F, 7, _f("cos")),
    "Tan": (_F, 7, _f("tan")),
    "Asin": (_F, 7, _f("arcsin")),
    "Acos": (_F, 7, _f("arccos")),
    "Atan": (_F, 7, _f("arctan")),
    "Sinh": (_F, 9, _f("sinh")),
    "Cosh": (_F, 9, _f("cosh")),
    "Asinh": (_F, 9, _f("arcsinh")),
    "Acosh": (_F, 9, _f("arccosh")),
    "Atanh": (_F, 9, _f("arctanh")),
    "Tanh": (_F, 6, _vec(tanh_f32, "tanh", mlas_tanh_f32)),
    "Erf": (_F, 9, lambda a, n, T: f"{T}(math.erf({a[0]}))"),
    "IsNaN": (_F, 9, lambda a, n, T: f"({a[0]} != {a[0]})"),
    "IsInf": (_F, 10, _isinf),
    # activations
    "Relu": (_FI, 6, lambda a, n, T: f"({a[0]} if not ({a[0]} < 0) else {T}(0))"),
    "Sigmoid": (_F, 6, _sigmoid),
    "LeakyRelu": (
        _F,
        6,
        lambda a, n, T: f"({a[0]} if {a[0]} >= 0 else {T}({a[0]} * {_c(_attr(n, 'alpha'), T)}))",
    ),
    "Elu": (
        _F,
        6,
        lambda a, n, T: (
            f"({a[0]} if {a[0]} >= 0 else {T}({_c(_attr(n, 'alpha'), T)} * np.expm1({a[0]})))"
        ),
    ),
    "Selu": (_F, 6, _selu),
    "Celu": (
        _F,
        12,
        lambda a, n, T: (
            f"({a[0]} if {a[0]} >= 0 else {T}({_attr(n, 'alpha')!r} * "
            f"np.expm1({a[0]} / {_attr(n, 'alpha')!r})))"
        ),
    ),
    "ThresholdedRelu": (
        _F,
        10,
        lambda a, n, T: f"({a[0]} if {a[0]} > {_c(_attr(n, 'alpha'), T)} else {T}(0))",
    ),
    "Softplus": (_F, 1, lambda a, n, T: f"{T}({_softplus(a[0])})"),
    "Softsign": (_F, 1, lambda a, n, T: f"{T}({a[0]} / (1 + abs({a[0]})))"),
    "HardSigmoid": (
        _F,
        6,
        lambda a, n, T: (
            f"{T}(min(max({_c(_attr(n, 'alpha'), T)} * {a[0]} + "
            f"{_c(_attr(n, 'beta'), T)}, 0.0), 1.0))"
        ),
    ),
    "HardSwish": (
        _F,
        14,
        lambda a, n, T: f"{T}({a[0]} * min(max({a[0]} / 6.0 + 0.5, 0.0), 1.0))",
    ),
    "Gelu": (_F, 20, _gelu),
    "Mish": (_F, 18, lambda a, n, T: f"{T}({a[0]} * np.tanh({_softplus(a[0])}))"),
}


def _kind(dt: np.dtype[Any] | None) -> str:
    """numpy's kind letter, "b" for bool, "" for an unknown dtype (supported by no op)."""
    if dt is None:
        return ""
    return "b" if dt == np.bool_ else str(dt.kind)


DOMAIN_ALIASES = frozenset({("ai.turnout", "Gelu")})
"""Ops of other domains with the semantics of the ONNX op of the same name: the optimizer's
Gelu below opset 20 (turnout's domain, `approximate` as ONNX's), generated like ONNX Gelu."""


def ew_supports(node: Node, since: int) -> str | None:
    """None when `node` can be generated (as a kernel or inside a group), else why not."""
    spec = EW_OPS.get(node.op_type)
    alias = (node.domain, node.op_type) in DOMAIN_ALIASES
    if spec is None or (node.domain and not alias):
        return f"{node.op_type} is not an elementwise op of the numba code generator"
    kinds, min_since, _ = spec
    if since < min_since and not alias:
        return f"opset version {since} of {node.op_type} (numba covers since {min_since})"
    if node.op_type == "Clip" and since < 11 and since != 6:
        return "Clip before opset 6"
    infos = [i for x, i in zip(node.inputs, node.input_infos) if x]
    outs = [o for o in node.output_infos if o is not None]
    if not infos or len(outs) != 1:
        return "unexpected arity"
    for info in [*infos, *outs]:
        if info is None or info.elem_type is None or info.kind != "tensor":
            return "input types unknown at session creation"
        if info.shape is None:
            return "input ranks unknown at session creation"
        if compute_dtype(info.dtype) is None:
            return f"dtype {info.dtype} not supported by the numba code generator"
    known = [i for i in infos if i is not None]  # all of them: None returned above
    first = known[0]
    if _kind(first.dtype) not in kinds:
        return f"{node.op_type} on {first.dtype} is not generated by numba"
    if node.op_type == "Where" and _kind(known[1].dtype) not in "fiub":
        return "Where on unsupported dtype"
    if node.op_type == "Gelu" and _text(node, "approximate") not in ("none", "tanh"):
        return "Gelu approximate must be 'none' or 'tanh'"
    return None


# --------------------------------------------------------------------------------------------
# Group kernels


@dataclass
class GroupKernel:
    """A compiled group: `fn(*inputs) -> outputs` over the group's boundary values."""

    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    fn: Callable[..., tuple[Any, ...]]
    source: str
    static: bool = False
    """Specialised to the shapes known at session creation (constants bound into it)."""


_PRELUDE_SRC = "import math\nimport numpy as np\nfrom numba import prange\n\n"


def _rank(info: Any) -> int:
    return len(info.shape)


SERIAL_WORK = 1 << 16
"""Groups doing less work than this (iteration-space elements x nodes), and fixed kernels called
on less (`registry.SizedKernel`), run serial even when threads > 1: on small arrays a parallel
launch costs more than it saves."""


def compile_group(
    nodes: Sequence[Node],
    outputs: Sequence[str],
    name: str,
    *,
    parallel: bool,
    constants: Mapping[str, Any] | None = None,
    inputs: Sequence[ValueInfo] | None = None,
) -> GroupKernel:
    """Generate, compile (now) and wrap one kernel computing `outputs` from `nodes`.

    `nodes` are in topological order; `inputs` are the group's boundary values, typed, in the
    order the kernel takes them (a `FusedSubgraph` gives them; for one node, its distinct
    inputs); `outputs` are the values read outside the group; `constants` maps initializer
    names to their values. When every external input's shape is known (and broadcasts), the
    kernel is specialised to those shapes and the constants are bound into it (see
    `_compile_static`); otherwise shapes are resolved on each run.
    """
    if inputs is None:
        (node,) = nodes  # a group of several nodes comes with its boundary
        inputs = [i for i in dict(zip(node.inputs, node.input_infos)).values() if i is not None]
    ext = [i.name for i in inputs]
    info: dict[str, Any] = {i.name: i for i in inputs}
    for n in nodes:
        info[n.outputs[0]] = n.output_infos[0]
    consts = {
        x: v for x in ext if constants is not None and isinstance(v := constants.get(x), np.ndarray)
    }
    shapes = _static_shapes(nodes, ext, consts, info)
    if shapes is not None:
        return _compile_static(nodes, ext, outputs, info, shapes, consts, name, parallel)
    return _compile_dynamic(nodes, ext, outputs, info, name, parallel)


def _scalar_body(nodes: Sequence[Node], read: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """One line per node computing its scalar temporary; `read` gives each input's load."""
    var: dict[str, str] = {}
    body: list[str] = []
    for k, (x, load) in enumerate(read.items()):
        var[x] = f"x{k}"
        body.append(f"x{k} = {load}")
    for j, n in enumerate(nodes):
        out_info = n.output_infos[0]
        out_dt = compute_dtype(out_info.dtype) if out_info is not None else None
        assert out_dt is not None  # ew_supports checked every output type
        args = [var[x] if x else "" for x in n.inputs]
        var[n.outputs[0]] = f"t{j}"
        *stmts, value = (
            EW_OPS[n.op_type][2](args, n, _CTOR[out_dt.name]).replace("@", f"t{j}_").split("\n")
        )
        body += [*stmts, f"t{j} = {value}"]
    return body, var


# ---------------------------------------------------------------------------- static shapes


def _static_shapes(
    nodes: Sequence[Node], ext: list[str], consts: Mapping[str, Any], info: dict[str, Any]
) -> dict[str, tuple[int, ...]] | None:
    """Every boundary and inner value's shape, when the external inputs' shapes are all known
    and broadcast; None otherwise (the group then resolves shapes per run, and a run with
    shapes that do not broadcast raises there)."""
    shapes: dict[str, tuple[int, ...]] = {}
    for x in ext:
        if x in consts:
            shapes[x] = tuple(consts[x].shape)
            continue
        s = info[x].shape
        if s is None or not all(isinstance(d, int) and d >= 0 for d in s):
            return None
        shapes[x] = tuple(s)
    for n in nodes:
        ins = [shapes[x] for x in n.inputs if x]
        try:
            s = np.broadcast_shapes(*ins)
        except ValueError:
            return None
        if n.op_type == "PRelu" and s != ins[0]:  # the slope broadcasts to X, not the reverse
            return None
        shapes[n.outputs[0]] = s
    return shapes


def _compile_static(
    nodes: Sequence[Node],
    ext: list[str],
    outputs: Sequence[str],
    info: dict[str, Any],
    shapes: dict[str, tuple[int, ...]],
    consts: Mapping[str, np.ndarray],
    name: str,
    parallel: bool,
) -> GroupKernel:
    """A kernel specialised to known shapes: loop bounds, broadcasting and strides are literals,
    constants are packed into one read-only buffer per dtype at compile time, and the run
    wrapper only checks shapes, allocates outputs and makes one call."""
    full = np.broadcast_shapes(*(shapes[x] for x in ext)) if ext else ()
    size = math.prod(full)
    # the kernel's view: adjacent dimensions every value spans alike merged (`_coalesce`)
    space, kshapes = _coalesce(full, shapes, [*ext, *outputs]) if size else (full, shapes)
    parallel = parallel and size * len(nodes) >= SERIAL_WORK
    live = [x for x in ext if x not in consts]
    bound = [x for x in ext if x in consts]
    in_c = {x: _group_dtype(info[x]) for x in ext}
    buf_of: dict[str, int] = {}  # const -> its buffer; one buffer per compute dtype
    buf_dt: list[np.dtype[Any]] = []
    offset: dict[str, int] = {}
    used: list[int] = []
    for x in bound:
        c = in_c[x]
        if c not in buf_dt:
            buf_dt.append(c)
            used.append(0)
        b = buf_dt.index(c)
        buf_of[x], offset[x] = b, used[b]
        used[b] += consts[x].size
    where = {x: f"in{k}" for k, x in enumerate(live)}
    where.update({x: f"cb{buf_of[x]}" for x in bound})
    slot = {y: k for k, y in enumerate(outputs)}

    def nest(space: tuple[int, ...], members: Sequence[Node], outs: Sequence[str]) -> list[str]:
        """One loop nest over `space` computing `members` and storing `outs`."""
        rank = len(space)

        def ix(d: int) -> str:  # size-1 dimensions are not looped over
            return "0" if space[d] == 1 else f"i{d}"

        def index(s: tuple[int, ...]) -> str:  # a value of shape s at the loop index
            lead = rank - len(s)
            return ", ".join("0" if e == 1 else ix(lead + j) for j, e in enumerate(s)) or "()"

        read: dict[str, str] = {}
        hoisted: list[str] = []
        for x in dict.fromkeys(x for n in members for x in n.inputs if x in where):
            s = kshapes[x]
            if x not in offset and not s:
                # a 0-d input is read once, before the loops: inside a prange loop numba's
                # parfor lowering passes a 0-d array on as a scalar and fails to index it
                hoisted.append(f"    s_{where[x]} = {where[x]}[()]")
                read[x] = f"s_{where[x]}"
                continue
            if x not in offset:
                read[x] = f"{where[x]}[{index(s)}]"
                continue
            lead = rank - len(s)
            terms = [str(offset[x])] + [
                f"i{lead + j} * {math.prod(s[j + 1 :])}"
                for j, e in enumerate(s)
                if e != 1 and space[lead + j] != 1
            ]
            read[x] = f"{where[x]}[{' + '.join(terms)}]"
        body, var = _scalar_body(members, read)
        for y in outs:
            s = kshapes[y]
            lead = rank - len(s)
            # a value smaller than the iteration space is stored once, at index 0 of the
            # dimensions it is broadcast along
            once = [f"i{d} == 0" for d in range(lead) if space[d] != 1] + [
                f"i{lead + j} == 0" for j, e in enumerate(s) if e == 1 and space[lead + j] != 1
            ]
            store = f"out{slot[y]}[{index(s)}] = {var[y]}"
            body += [f"if {' and '.join(once)}:", f"    {store}"] if once else [store]
        loops = [d for d in range(rank) if space[d] != 1]
        lines: list[str] = list(hoisted)
        pad = "    "
        if parallel and len(loops) == 1:
            (d,) = loops
            views, body = _block_views(body, f"i{d}", f"min({space[d]} - lo, 4096)")
            lines += [  # counting from 0 in each block: see _loop_source
                f"    for blk in prange({(space[d] + 4095) // 4096}):",
                "        lo = blk * 4096",
                *[f"        {v}" for v in views],
                f"        for j in range(min({space[d]} - lo, 4096)):",
                f"            i{d} = lo + j",
            ]
            pad += "        "
        elif parallel and loops:
            outer, last = loops[:-1], loops[-1]
            lines.append(f"    for o in prange({math.prod(space[d] for d in outer)}):")
            cur = "o"
            for j, d in enumerate(reversed(outer[1:])):  # fresh names: numba forbids rebinding
                lines += [
                    f"        i{d} = {cur} % {space[d]}",
                    f"        q{j} = {cur} // {space[d]}",
                ]
                cur = f"q{j}"
            lines += [
                f"        i{outer[0]} = {cur}",
                f"        for i{last} in range({space[last]}):",
            ]
            pad += "        "
        else:
            for d in loops:
                lines.append(f"{pad}for i{d} in range({space[d]}):")
                pad += "    "
        return lines + [pad + s for s in body]

    args = [f"in{k}" for k in range(len(live))]
    args += [f"cb{b}" for b in range(len(buf_dt))]
    args += [f"out{k}" for k in range(len(outputs))]
    lines = [_PRELUDE_SRC, f"def kernel({', '.join(args)}):"]
    if size:
        lines += nest(space, nodes, outputs)
    else:
        # An empty iteration space can still have non-empty exported values (Tanh of a [1, 4]
        # input next to an Add with a [0, 4] one): each is computed over its own shape, from
        # the nodes it depends on.
        for y in outputs:
            if not math.prod(shapes[y]):
                continue
            need, cone = {y}, []
            for n in reversed(nodes):
                if n.outputs[0] in need:
                    cone.append(n)
                    need.update(x for x in n.inputs if x)
            lines += nest(shapes[y], cone[::-1], [y])
    lines.append("    return")
    source = "\n".join(lines) + "\n"

    out_c = [_group_dtype(info[y]) for y in outputs]
    sig = types.void(
        *[numba_array(in_c[x], len(kshapes[x]), readonly=True, layout="C") for x in live],
        *[numba_array(d, 1, readonly=True, layout="C") for d in buf_dt],
        *[
            numba_array(c, len(kshapes[y]), readonly=False, layout="C")
            for y, c in zip(outputs, out_c)
        ],
    )
    mod = cache.load_source(source, "sg")
    kern = cache.jit(mod.kernel, [sig], parallel=parallel, contract=contracts(source))

    def bad(k: int, value: Any) -> InvalidArgument:
        x = ext[k]
        return InvalidArgument(
            f"{name}: input {x!r} has shape {tuple(value.shape)}, but the group was compiled "
            f"for shape {shapes[x]} (known at session creation)"
        )

    def pack(values: Sequence[Any]) -> list[np.ndarray]:
        """The constant buffers from `values` (one per bound input, in order)."""
        parts: list[list[np.ndarray]] = [[] for _ in buf_dt]
        for x, v in zip(bound, values):
            if tuple(v.shape) != shapes[x]:
                raise bad(ext.index(x), v)
            parts[buf_of[x]].append(np.ascontiguousarray(v, dtype=buf_dt[buf_of[x]]).ravel())
        bufs = []
        for p, dt in zip(parts, buf_dt):
            b = np.concatenate(p) if p else np.empty(0, dt)
            b.flags.writeable = False
            bufs.append(b)
        return bufs

    fn = _static_wrapper(ext, live, bound, outputs, info, shapes, kshapes, kern, pack, consts, bad)
    # one call on zeros now: a compiled function's first call is slow (~ms), and it belongs
    # to session creation, not to the first run (elementwise ops only: zeros are safe inputs)
    kern(
        *[np.zeros(kshapes[x], in_c[x]) for x in live],
        *pack([consts[x] for x in bound]),
        *[np.empty(kshapes[y], c) for y, c in zip(outputs, out_c)],
    )
    return GroupKernel(name, tuple(ext), tuple(outputs), fn, source, static=True)


def _c_order(a: Any, dtype: Any = None) -> np.ndarray:
    """`a` as a C-contiguous array of `dtype` (copied only when needed; 0-d stays 0-d, unlike
    np.ascontiguousarray)."""
    return np.asarray(a, dtype=dtype, order="C")


def _static_wrapper(
    ext: list[str],
    live: list[str],
    bound: list[str],
    outputs: Sequence[str],
    info: dict[str, Any],
    shapes: dict[str, tuple[int, ...]],
    kshapes: dict[str, tuple[int, ...]],
    kern: Any,
    pack: Callable[[Sequence[Any]], list[np.ndarray]],
    consts: Mapping[str, np.ndarray],
    bad: Callable[[int, Any], InvalidArgument],
) -> Callable[..., tuple[Any, ...]]:
    """The run function, generated: a shape compare per live input, an identity check per
    bound constant, one np.empty per output and one kernel call. The kernel takes every live
    input and output in its `kshapes` view (a reshape of the C-contiguous array)."""
    cb = pack([consts[x] for x in bound])
    env: dict[str, Any] = {
        "_kern": kern,
        "_empty": np.empty,
        "_bad": bad,
        "_pack": pack,
        "_contig": _c_order,
    }
    arg = {x: f"a{k}" for k, x in enumerate(ext)}
    src = [f"def run({', '.join(arg[x] for x in ext)}):"]
    kargs: list[str] = []
    for x in live:
        a, k = arg[x], ext.index(x)
        src += [f"    if {a}.shape != {shapes[x]!r}:", f"        raise _bad({k}, {a})"]
        c = compute_dtype(info[x].dtype)
        if c != info[x].dtype:
            env[f"C{k}"] = c
            src.append(f"    {a} = _contig({a}, C{k})")
        else:
            # the kernel takes C-contiguous inputs: with unknown strides its loop does not
            # vectorize (measured 5-9x slower for a SiLU group); a view (a transpose, a
            # split) is copied once
            src += [f"    if not {a}.flags.c_contiguous:", f"        {a} = _contig({a})"]
        if kshapes[x] != shapes[x]:
            src.append(f"    {a} = {a}.reshape({kshapes[x]!r})")
        kargs.append(a)
    if bound:
        # Constants were packed at compile time. The step still passes them, only so that a
        # value replaced after compilation (SessionOptions.add_initializer) is noticed: the
        # same objects mean the packed buffers are current, others are packed now.
        cbs = [f"cb{b}" for b in range(len(cb))]
        for x in bound:
            env[f"K{ext.index(x)}"] = consts[x]
        for b, buf in enumerate(cb):
            env[f"CB{b}"] = buf
        same = " and ".join(f"{arg[x]} is K{ext.index(x)}" for x in bound)
        src += [
            f"    if {same}:",
            f"        {', '.join(cbs)}, = {', '.join(f'CB{b}' for b in range(len(cb)))},",
            "    else:",
            f"        {', '.join(cbs)}, = _pack(({', '.join(arg[x] for x in bound)},))",
        ]
        kargs += cbs
    rets = []
    for k, y in enumerate(outputs):
        dt, c = info[y].dtype, compute_dtype(info[y].dtype)
        env[f"D{k}"] = c
        src.append(f"    o{k} = _empty({kshapes[y]!r}, D{k})")
        kargs.append(f"o{k}")
        ret = f"o{k}" if kshapes[y] == shapes[y] else f"o{k}.reshape({shapes[y]!r})"
        if c != dt:
            env[f"B{k}"] = dt
            rets.append(f"{ret}.astype(B{k})")
        else:
            rets.append(ret)
    src.append(f"    _kern({', '.join(kargs)})")
    src.append(f"    return ({', '.join(rets)},)")
    code = compile("\n".join(src) + "\n", "<turnout_numba static group>", "exec")
    exec(code, env)
    return env["run"]  # type: ignore[no-any-return]


# ---------------------------------------------------------------------------- dynamic shapes


def _loop_source(
    rank: int,
    n_in: int,
    n_out: int,
    versions: Sequence[tuple[str, list[str], list[str]]],
    hoisted: Sequence[str] = (),
) -> str:
    """The kernel over a rank-`rank` space. `versions`: the loop over a block of rows as
    (condition, body, stores), the first whose condition holds runs the block; the last one's
    condition is ignored (the general case; a rank-1 kernel has only it). `hoisted`: statements
    before the loops (scalar reads)."""
    idx = ", ".join(f"i{d}" for d in range(rank))
    args = [f"in{k}" for k in range(n_in)] + [f"out{k}" for k in range(n_out)]
    lines = [_PRELUDE_SRC, f"def kernel({', '.join(args)}):"]
    lines += [f"    n{d} = out0.shape[{d}]" for d in range(rank)]
    lines += [f"    {h}" for h in hoisted]
    if rank == 1:
        # the inner loop counts from 0 and the index is base + j: with `range(lo, hi)` LLVM
        # keeps the negative-index wraparound and the loop stays scalar (3x slower, measured)
        _, body, stores = versions[-1]
        views, block = _block_views(
            [*body, *(s.replace("[IDX]", f"[{idx}]") for s in stores)], "i0", "min(n0 - lo, 4096)"
        )
        lines += [
            "    for blk in prange((n0 + 4095) // 4096):",
            "        lo = blk * 4096",
            *[f"        {v}" for v in views],
            "        for j in range(min(n0 - lo, 4096)):",
            "            i0 = lo + j",
        ]
        pad = "            "
        lines += [pad + s for s in block]
        return "\n".join(lines) + "\n"
    # rows in blocks of ROWS: a block's first row index is divided out once, the next ones
    # counted like an odometer (a division per dimension and row cost more than a short row's
    # work: [1, 6300, 2] box halves of Split views 72 -> 53 us, the version test per row too)
    outer = " * ".join(f"n{d}" for d in range(rank - 1))
    lines += [
        f"    rows = {outer}",
        f"    for blk in prange((rows + {ROWS - 1}) // {ROWS}):",
        f"        lo = blk * {ROWS}",
        f"        q{rank - 2} = lo",
    ]
    for d in range(rank - 2, 0, -1):  # fresh names: numba forbids rebinding the index
        lines += [f"        i{d} = q{d} % n{d}", f"        q{d - 1} = q{d} // n{d}"]
    lines.append("        i0 = q0")
    for v, (cond, body, stores) in enumerate(versions):
        pad = "        "
        if len(versions) > 1:
            # the test sits inside the parallel block, next to the loads it specialises: LLVM
            # then knows the strides it compared (also in a parallel kernel's outlined body)
            head = "else:" if v == len(versions) - 1 else f"{'if' if v == 0 else 'elif'} {cond}:"
            lines.append(f"        {head}")
            pad += "    "
        lines.append(f"{pad}for r in range(min(rows - lo, {ROWS})):")
        lines.append(f"{pad}    for i{rank - 1} in range(n{rank - 1}):")
        lines += [pad + "        " + s for s in body]
        lines += [pad + "        " + s.replace("[IDX]", f"[{idx}]") for s in stores]
        pad += "    "
        for d in range(rank - 2, 0, -1):
            lines += [f"{pad}i{d} += 1", f"{pad}if i{d} == n{d}:", f"{pad}    i{d} = 0"]
            pad += "    "
        lines.append(f"{pad}i0 += 1")
    return "\n".join(lines) + "\n"


ROWS = 64
"""Rows of the strided kernel per parallel block (their indices counted, not divided)."""

_FLAT_READ = re.compile(r"\b(in\d+|out\d+)\[(i\d+)\]")
_FLAT_CONST = re.compile(r"\b(cb\d+)\[(\d+) \+ (i\d+) \* 1\]")


def _block_views(lines: Sequence[str], var: str, count: str) -> tuple[list[str], list[str]]:
    """A parallel block's flat loads and stores as views of the block (`x_b = x[lo:lo + n]`,
    then `x_b[j]`) instead of `x[lo + j]`: indexed from the whole array, a prange body ran its
    vectorized loop 1.6x slower than the serial kernel (numba's outlined body reloads the
    arrays' pointers), so 2 threads gained nothing; with the views it takes half the time.
    Returns (view statements, rewritten lines); other indexing is left as it is."""
    views: dict[str, str] = {}

    def flat(m: re.Match[str]) -> str:
        if m.group(2) != var:
            return m.group(0)
        name = f"{m.group(1)}_b"
        views[name] = f"{name} = {m.group(1)}[lo:lo + {count}]"
        return f"{name}[j]"

    def const(m: re.Match[str]) -> str:
        if m.group(3) != var:
            return m.group(0)
        buf, off = m.group(1), m.group(2)
        name = f"{buf}_{off}"
        views[name] = f"{name} = {buf}[{off} + lo:{off} + lo + {count}]"
        return f"{name}[j]"

    out = [_FLAT_CONST.sub(const, _FLAT_READ.sub(flat, s)) for s in lines]
    return list(views.values()), out


ROW_VERSIONS_MAX = 4
"""Inputs read along the last dimension up to which the strided kernel gets a version per
input broadcast along it (beyond, only the all-unit-stride version and the general loop)."""


def _strided_versions(
    nodes: Sequence[Node],
    ext: list[str],
    outputs: Sequence[str],
    ones: Sequence[tuple[bool, ...]],
    itemsizes: Sequence[int],
    lasts: Sequence[Any],
    rank: int,
    hoisted: Mapping[int, str],
) -> list[tuple[str, list[str], list[str]]]:
    """The strided kernel's last-dimension loops: numba indexes an 'A' array through its
    run-time strides, so LLVM leaves the loop scalar; under a test that each input's last
    stride is its item size (or 0: a broadcast view) it knows them and vectorizes (a [1, 6300,
    80] by [1, 6300, 1] Mul of Split views, 276 -> 163 us measured). Versions: every input of
    unit stride; with 2 to `ROW_VERSIONS_MAX` of them, each one whose declared last dimension
    is not a number (`lasts`) broadcast (stride 0) in turn; then the general loop."""
    last = rank - 1
    rows = [k for k in range(len(ext)) if k not in hoisted and not ones[k][last]]

    def read(k: int, zero: bool) -> str:
        if k in hoisted:
            return hoisted[k]
        ix = ["0" if ones[k][d] else f"i{d}" for d in range(rank)]
        if zero:
            ix[last] = "0"
        return f"in{k}[{', '.join(ix)}]"

    def version(cond: str, zero: int) -> tuple[str, list[str], list[str]]:
        body, var = _scalar_body(nodes, {x: read(k, k == zero) for k, x in enumerate(ext)})
        return cond, body, [f"out{k}[IDX] = {var[y]}" for k, y in enumerate(outputs)]

    out: list[tuple[str, list[str], list[str]]] = []
    if rank > 1 and rows:
        unit = {k: f"in{k}.strides[{last}] == {itemsizes[k]}" for k in rows}
        out.append(version(" and ".join(unit.values()), -1))
        if 2 <= len(rows) <= ROW_VERSIONS_MAX:
            # only inputs whose size there is not declared as a number: every version is
            # compiled (seconds, cold); one that comes 1 against its declaration anyway still
            # gets the general loop
            for b in [k for k in rows if not isinstance(lasts[k], int)]:
                cond = " and ".join(
                    f"in{k}.strides[{last}] == 0" if k == b else unit[k] for k in rows
                )
                out.append(version(cond, b))
    general = version("", -1)
    if len(general[1]) > VERSION_BODY_MAX:
        # compute-bound: a copy to C order costs little next to the arithmetic, and every
        # version is compiled again (a Sigmoid's: seconds, cold)
        return [general]
    return [*out, general]


VERSION_BODY_MAX = 12
"""Longest scalar body (statements) the strided kernel gets versions for; groups with longer
ones (a Sigmoid's exp is 15) have their views copied to C order."""


def _compile_dynamic(
    nodes: Sequence[Node],
    ext: list[str],
    outputs: Sequence[str],
    info: dict[str, Any],
    name: str,
    parallel: bool,
) -> GroupKernel:
    """A kernel over the runtime broadcast shape: inputs arrive at full rank, broadcast views
    or (when nothing needs broadcasting) C-contiguous arrays. A dimension an input declares as
    1 is read at index 0, so a [B, N, 1] operand next to [B, N, 80] needs no broadcast view."""
    rank = max(1, max(_rank(info[v]) for v in info))
    ones = [_declared_ones(info[x].shape, rank) for x in ext]
    in_c = [_group_dtype(info[x]) for x in ext]
    out_c = [_group_dtype(info[y]) for y in outputs]
    # inputs declared 1 everywhere (scalars) are read once, before the loops: a value loaded
    # in the loop may alias the outputs for all LLVM knows, which keeps a test on it (Pow's
    # exponent == 2) inside the loop
    scalars = {k: f"s{k}" for k in range(len(ext)) if all(ones[k])}
    hoist = [f"s{k} = in{k}[{', '.join(['0'] * rank)}]" for k in scalars]
    lasts = [info[x].shape[-1] if info[x].shape else 1 for x in ext]
    versions = _strided_versions(
        nodes, ext, outputs, ones, [d.itemsize for d in in_c], lasts, rank, scalars
    )
    text = _loop_source(rank, len(ext), len(outputs), versions, hoist)
    # The same loop twice: for any strides (broadcast views), and for C-contiguous inputs, the
    # only one LLVM vectorizes; the run picks one. The contiguous one runs over the dimensions
    # collapsed by broadcast pattern (`_collapse`): a short last dimension (85 in a detector
    # head, 2 for its box centres) leaves the rank-N loop in its scalar remainder and index
    # arithmetic (measured 3-4x slower at [1, 3, 40, 40, 85] and [1, 3, 40, 40, 2]).
    spans, unit = _collapse(ones)
    nc = len(spans)
    read_c = {
        x: scalars.get(k)
        or f"in{k}[{', '.join('0' if u else f'i{g}' for g, u in enumerate(unit[k]))}]"
        for k, x in enumerate(ext)
    }
    body_c, var_c = _scalar_body(nodes, read_c)
    stores_c = [f"out{k}[IDX] = {var_c[y]}" for k, y in enumerate(outputs)]
    hoist_c = [f"s{k} = in{k}[{', '.join(['0'] * nc)}]" for k in scalars]
    text_c = _loop_source(nc, len(ext), len(outputs), [("", body_c, stores_c)], hoist_c)
    source = (
        text + "\n\n" + text_c.replace(_PRELUDE_SRC, "").replace("def kernel(", "def kernel_c(")
    )
    mod = cache.load_source(source, "ew")

    def sig(layout: Literal["A", "C"]) -> Any:
        r = len(spans) if layout == "C" else rank
        return types.void(
            *[numba_array(d, r, readonly=True, layout=layout) for d in in_c],
            *[numba_array(d, r, readonly=False, layout="C") for d in out_c],
        )

    kernels = []
    layouts: tuple[Literal["A", "C"], ...] = ("A", "C")
    for fn, layout in zip((mod.kernel, mod.kernel_c), layouts):
        fma = contracts(source)
        kern = cache.jit(fn, [sig(layout)], parallel=parallel, contract=fma)
        # small runs take the serial variant: see SERIAL_WORK
        small = cache.jit(fn, [sig(layout)], parallel=False, contract=fma) if parallel else kern
        kernels.append((kern, small))
    rows = len(versions) > 1
    run = _wrapper(nodes, ext, outputs, info, rank, ones, kernels, name, spans, rows)
    return GroupKernel(name, tuple(ext), tuple(outputs), run, source)


def _coalesce(
    space: tuple[int, ...], shapes: Mapping[str, tuple[int, ...]], values: Sequence[str]
) -> tuple[tuple[int, ...], dict[str, tuple[int, ...]]]:
    """The static kernel's iteration space with adjacent dimensions merged where every value
    in `values` is full along both or broadcast (1) along both, and each value's shape in it
    (0-d values stay 0-d); other shapes are kept. A Sigmoid over (1, 3, 40, 40, 85) loops once
    over 408000 elements instead of 4800 rows of 85 (0.68 against 0.37 ms: the short inner
    loop's vector tail and index arithmetic)."""
    rank = len(space)
    names = [x for x in dict.fromkeys(values) if shapes[x]]

    def full_along(s: tuple[int, ...], d: int) -> bool:
        lead = rank - len(s)
        return d >= lead and s[d - lead] != 1

    runs: list[list[Any]] = []  # [start, end, pattern (None: only unit dimensions so far)]
    for d in range(rank):
        pat = None if space[d] == 1 else tuple(full_along(shapes[x], d) for x in names)
        if runs and (pat is None or runs[-1][2] is None or runs[-1][2] == pat):
            runs[-1][1] = d + 1
            runs[-1][2] = runs[-1][2] or pat
        else:
            runs.append([d, d + 1, pat])
    merged = tuple(math.prod(space[a:b]) for a, b, _ in runs)
    out = dict(shapes)
    for k, x in enumerate(names):
        out[x] = tuple(
            math.prod(space[a:b]) if pat is not None and pat[k] else 1 for a, b, pat in runs
        )
    return merged, out


def _collapse(
    ones: Sequence[tuple[bool, ...]],
) -> tuple[list[tuple[int, int]], list[tuple[bool, ...]]]:
    """The contiguous kernel's dimensions: runs of adjacent dimensions in which every input is
    declared 1 in the same ones (a dimension all inputs declare 1 joins any run), as
    [start, end) spans of the full rank, and per input whether it is 1 in each span. Inputs of
    the full size or scalar collapse to one span: a flat loop."""
    rank = len(ones[0]) if ones else 1
    cols = [tuple(o[d] for o in ones) for d in range(rank)]
    runs: list[tuple[int, int, tuple[bool, ...]]] = []  # (start, end, pattern)
    for d, c in enumerate(cols):
        if runs and (all(c) or runs[-1][2] == c):
            runs[-1] = (runs[-1][0], d + 1, runs[-1][2])
        elif runs and all(runs[-1][2]):  # a leading run of unit dimensions takes the pattern
            runs[-1] = (runs[-1][0], d + 1, c)
        else:
            runs.append((d, d + 1, c))
    spans = [(a, b) for a, b, _ in runs]
    unit = [tuple(c[k] for _, _, c in runs) for k in range(len(ones))]
    return spans, unit


def _shared_order(xs: Sequence[np.ndarray], flat_sizes: Sequence[tuple[int, ...]]) -> Any:
    """The axis order (outer first) in which every full-size input of a flat group is
    C-contiguous, when some of them are not C-contiguous but all are the same permutation of a
    dense buffer; else None. Scalar inputs (flat size 1) do not count."""
    order = None
    full = flat_sizes[-1]
    if full[0] <= 1:
        return None
    rank = max(x.ndim for x in xs)
    for x, size in zip(xs, flat_sizes):
        if size != full:
            continue
        if x.ndim != rank:  # a lower-rank full-size input has no place in the permutation
            return None
        if order is None:
            if x.flags.c_contiguous:
                return None
            order = tuple(sorted(range(x.ndim), key=lambda d: -x.strides[d]))
        if not x.transpose(order).flags.c_contiguous:
            return None
    return order


def _strided_pays(xs: Sequence[np.ndarray]) -> bool:
    """Whether a group's views (no broadcasting needed) go to the strided kernel rather than
    being copied to C order: when each view's last stride is its item size (a Split on the last
    axis: rows of a [B, N, 85] detector output, which the kernel's unit-stride version
    vectorizes; [1, 6300, 2] box halves 116 -> 53 us). Views of other strides (a transposed
    head) are copied: the strided loop over them is slower than numpy's copy and the
    contiguous kernel together (a [1, 3, 40, 40, 2] slice 48 us against 28), and for a SiLU
    5-9x slower."""
    return all(x.ndim == 0 or x.shape[-1] <= 1 or x.strides[-1] == x.itemsize for x in xs)


def _declared_ones(shape: Sequence[Any], rank: int) -> tuple[bool, ...]:
    """Per dimension of the full rank: whether the value's declared shape has 1 there (the
    leading dimensions a lower-rank value lacks count as 1)."""
    lead = rank - len(shape)
    return (True,) * lead + tuple(e == 1 and isinstance(e, int) for e in shape)


@dataclass(frozen=True)
class _BroadcastPlan:
    """What one set of input shapes needs at run time, computed once and kept while the shapes
    repeat (the usual case: a model runs at one shape)."""

    shapes: tuple[tuple[int, ...], ...]
    full: tuple[int, ...]
    broadcast: list[bool]
    finish: list[tuple[tuple[slice, ...] | None, tuple[int, ...] | None]]
    parallel: bool
    contiguous: list[tuple[int, ...]] | None
    """When no input needs a broadcast view: per input, then for the outputs, the shape
    collapsed to the contiguous kernel's dimensions; the inputs go to it in C order."""
    flat: bool
    """The contiguous kernel is one flat loop and every output has the full shape: inputs
    permuted alike can be computed in their memory order (`_shared_order`)."""
    direct: tuple[Any, list[tuple[int, ...]]] | None = None
    """The steady state of a small model's run, when no input is cast, none needs a broadcast
    view and every output has the full shape: the contiguous kernel (serial or parallel by
    size) and the inputs' collapsed shapes. A run whose inputs have these shapes and are
    C-contiguous calls it with no other work (`run`'s first lines: a Relu of 128 elements
    3.7 -> 1.6 us a call)."""


def _wrapper(
    nodes: Sequence[Node],
    ext: list[str],
    outputs: Sequence[str],
    info: dict[str, Any],
    rank: int,
    ones: list[tuple[bool, ...]],
    kernels: list[tuple[Any, Any]],
    name: str,
    spans: list[tuple[int, int]],
    rows: bool,
) -> Callable[..., tuple[Any, ...]]:
    """The run function. The contiguous kernel takes every array collapsed to `spans`; views
    of unit last stride go to the strided one when it has `rows` versions."""
    (kern, small), (kern_c, small_c) = kernels
    in_cast = [compute_dtype(info[x].dtype) for x in ext]
    in_cast_needed = [info[x].dtype != c for x, c in zip(ext, in_cast)]
    cast = any(in_cast_needed) or any(
        info[y].dtype != compute_dtype(info[y].dtype) for y in outputs
    )
    out_dt = [info[y].dtype for y in outputs]
    out_c = [compute_dtype(d) for d in out_dt]
    out_back = [d != c for d, c in zip(out_dt, out_c)]
    simple = len(nodes) == 1 and nodes[0].op_type != "PRelu"
    small_below = -(-SERIAL_WORK // len(nodes))  # iteration-space size
    # per node: (output name, present input names, unidirectional?) to derive exported shapes
    shape_steps = [(n.outputs[0], [x for x in n.inputs if x], n.op_type == "PRelu") for n in nodes]
    broadcast_shapes = np.broadcast_shapes
    broadcast_to = np.broadcast_to
    c_order = _c_order
    strided_pays = _strided_pays
    empty = np.empty
    prod = math.prod

    def fail(shapes: list[tuple[int, ...]]) -> InvalidArgument:
        return InvalidArgument(f"{name}: input shapes {shapes} cannot be broadcast together")

    def plan(shapes: tuple[tuple[int, ...], ...]) -> _BroadcastPlan:
        """The broadcast shape, which inputs need a broadcast view, and how each output buffer
        becomes the output (a slice for a value narrower than the group's, a reshape)."""
        try:
            shape = broadcast_shapes(*shapes)
        except ValueError:
            raise fail(list(shapes)) from None
        full = shape if len(shape) == rank else (1,) * (rank - len(shape)) + shape
        if simple:
            out_shapes = [shape] * len(outputs)
        else:
            known = dict(zip(ext, shapes))
            for y, ins, uni in shape_steps:
                s = broadcast_shapes(*[known[i] for i in ins])
                if uni and s != known[ins[0]]:
                    raise InvalidArgument(
                        f"{name}: slope shape {known[ins[1]]} does not broadcast to {known[ins[0]]}"
                    )
                known[y] = s
            out_shapes = [known[y] for y in outputs]
        finish: list[tuple[tuple[slice, ...] | None, tuple[int, ...] | None]] = []
        for s in out_shapes:
            ps = (1,) * (rank - len(s)) + s
            cut = tuple(slice(0, d) for d in ps) if ps != full else None
            finish.append((cut, s if len(s) != rank else None))
        broadcast = [x != full for x in shapes]
        padded = [(1,) * (rank - len(x)) + x for x in shapes]
        for x, ps, one in zip(ext, padded, ones):
            if any(o and e != 1 for o, e in zip(one, ps)):
                raise InvalidArgument(f"{name}: input {x!r} has shape {ps}, declared 1 where not")
        needs_view = any(
            e != f and not o for ps, one in zip(padded, ones) for e, f, o in zip(ps, full, one)
        )
        contiguous = None
        if not needs_view:
            contiguous = [tuple(prod(ps[a:b]) for a, b in spans) for ps in [*padded, full]]
        flat = (
            contiguous is not None
            and rank > 1
            and len(spans) == 1
            and all(f == (None, None) for f in finish)
        )
        parallel = prod(full) >= small_below
        direct = None
        if contiguous is not None and not cast and all(f == (None, None) for f in finish):
            direct = (kern_c if parallel else small_c, contiguous[:-1])
        return _BroadcastPlan(shapes, full, broadcast, finish, parallel, contiguous, flat, direct)

    last: list[_BroadcastPlan | None] = [None]  # the plan of the last shapes seen

    def run(*args: Any) -> tuple[Any, ...]:
        p = last[0]
        direct = p.direct if p is not None else None
        if direct is not None:
            assert p is not None
            for a, s in zip(args, p.shapes):
                if a.shape != s or not a.flags.c_contiguous:
                    return general(args)
            kern, collapsed = direct
            full = p.full
            cfull = p.contiguous[-1]  # type: ignore[index]
            bufs = [empty(full, c) for c in out_c]
            kern(
                *[a.reshape(r) for a, r in zip(args, collapsed)], *[b.reshape(cfull) for b in bufs]
            )
            return tuple(bufs)
        return general(args)

    def general(args: Sequence[Any]) -> tuple[Any, ...]:
        """Any run: inputs cast, broadcast, permuted or of new shapes."""
        xs = [a.astype(c) if need else a for a, c, need in zip(args, in_cast, in_cast_needed)]
        shapes = tuple(x.shape for x in xs)
        p = last[0]
        if p is None or p.shapes != shapes:
            p = plan(shapes)
            last[0] = p
        full = p.full
        if p.flat and p.contiguous and (order := _shared_order(xs, p.contiguous)) is not None:
            # inputs permuted alike (a Transpose's view): computed in their memory order, the
            # outputs returned as the same permutation of C-ordered buffers; no copy
            mem = [empty(tuple(full[d] for d in order), c) for c in out_c]
            views = [
                x.transpose(order).reshape(-1) if x.ndim == rank else c_order(x).reshape(-1)
                for x in xs
            ]
            (kern_c if p.parallel else small_c)(*views, *[b.reshape(-1) for b in mem])
            back = tuple(sorted(range(rank), key=order.__getitem__))
            res = [b.transpose(back) for b in mem]
            return tuple(r.astype(d) if bk else r for r, d, bk in zip(res, out_dt, out_back))
        bufs = [empty(full, c) for c in out_c]
        if p.contiguous is not None and (
            all(x.flags.c_contiguous for x in xs) or not (rows and strided_pays(xs))
        ):
            views = [c_order(x).reshape(r) for x, r in zip(xs, p.contiguous)]
            cfull = p.contiguous[-1]
            (kern_c if p.parallel else small_c)(*views, *[b.reshape(cfull) for b in bufs])
        else:
            views = [broadcast_to(x, full) if b else x for x, b in zip(xs, p.broadcast)]
            (kern if p.parallel else small)(*views, *bufs)
        res = []
        for b, (cut, reshape) in zip(bufs, p.finish):
            if cut is not None:
                b = b[cut]
            res.append(b.reshape(reshape) if reshape is not None else b)
        return tuple(r.astype(d) if back else r for r, d, back in zip(res, out_dt, out_back))

    return run
