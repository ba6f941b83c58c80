"""Elementwise and broadcasting ops, generated from ONE table into OpenCL C.

Each table row is an op: its arity, the dtypes it takes, and C expression templates per dtype
kind (`f` float, `i` signed int, `u` unsigned int, `b` bool). `{a}`, `{b}`, `{c}` are the
operands, `{T}` the output's C type, `{zero}`/`{one}` typed literals and `{<attr>}` the node's
attribute as a typed literal. A single node and a fused group share the generator: a group is
a list of such expressions over one output index space, with each input read through its own
broadcast strides (`fusion.py` finds the groups).

NaN goes through as in onnxruntime and onnx.reference: no template uses C's fmin/fmax/clamp,
which return the other operand for a NaN; `NMAX_F`/`NMIN_F`/`NCLAMP` (comparisons that a NaN
fails, so it falls through) take their place.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from turnout.graph.errors import InvalidArgument
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.activations import selu_scales
from turnout.sdk.semantics.defaults import op_defaults

from ..runtime import BF16, CTYPES, F16, HALFS, Runtime, bcast_strides, buf, lit
from .base import ALL, BOOL, FLOATS, INTS, NUM, SINTS, UINTS, dtype_out, ocl_kernel

__all__ = ["EW_OPS", "FUSIBLE", "EwProgram", "EwStep", "compile_ew"]

HELPERS = r"""
#define PYMOD_I(a,b) ((b)==0?0:((((a)%(b))!=0&&((((a)%(b))<0)!=((b)<0)))?((a)%(b))+(b):((a)%(b))))
#define PYMOD_F(a,b) ((fmod((a),(b))!=0&&((fmod((a),(b))<0)!=((b)<0))) \
    ?fmod((a),(b))+(b):fmod((a),(b)))
#define NMAX_F(a,b) (((a)>(b)||isnan(a))?(a):(b))
#define NMIN_F(a,b) (((a)<(b)||isnan(a))?(a):(b))
#define NCLAMP(v,lo,hi) ((v)<(lo)?(lo):((v)>(hi)?(hi):(v)))
#define NMAX_I(a,b) (((a)>(b))?(a):(b))
#define NMIN_I(a,b) (((a)<(b))?(a):(b))
"""


@dataclass(frozen=True)
class Op:
    arity: int  # -1: variadic (folded left to right)
    dtypes: frozenset[np.dtype[Any]]
    f: str | None = None
    i: str | None = None
    u: str | None = None
    b: str | None = None
    attrs: dict[str, Any] = field(default_factory=dict)
    since: tuple[int, ...] = (1,)


def _op(
    arity: int,
    dtypes: Any,
    f: str | None = None,
    i: str | None = None,
    u: str | None = None,
    b: str | None = None,
    **attrs: Any,
) -> Op:
    return Op(arity, frozenset(dtypes), f, i, u if u is not None else i, b, attrs)


F, I, U, N = FLOATS, SINTS, UINTS, NUM
# fmt: off
EW_OPS: dict[str, Op] = {
    # unary, numeric
    "Abs": _op(1, N, "fabs({a})", "({a}<0?-{a}:{a})", "{a}"),
    "Neg": _op(1, F | I, "-{a}", "-{a}"),
    "Relu": _op(1, F | I, "({a}<{zero}?{zero}:{a})", "({a}<{zero}?{zero}:{a})"),
    "Sign": _op(1, N, "({a}>0?{one}:({a}<0?-{one}:{a}))", "({a}>0?{one}:({a}<0?-{one}:{zero}))",
                "({a}>0?{one}:{zero})"),
    "Reciprocal": _op(1, F, "{one}/{a}"),
    "Exp": _op(1, F, "exp({a})"), "Log": _op(1, F, "log({a})"), "Sqrt": _op(1, F, "sqrt({a})"),
    "Sin": _op(1, F, "sin({a})"), "Cos": _op(1, F, "cos({a})"), "Tan": _op(1, F, "tan({a})"),
    "Asin": _op(1, F, "asin({a})"), "Acos": _op(1, F, "acos({a})"), "Atan": _op(1, F, "atan({a})"),
    "Sinh": _op(1, F, "sinh({a})"), "Cosh": _op(1, F, "cosh({a})"), "Tanh": _op(1, F, "tanh({a})"),
    "Asinh": _op(1, F, "asinh({a})"), "Acosh": _op(1, F, "acosh({a})"),
    "Atanh": _op(1, F, "atanh({a})"), "Erf": _op(1, F, "erf({a})"),
    "Ceil": _op(1, F, "ceil({a})"), "Floor": _op(1, F, "floor({a})"),
    "Round": _op(1, F, "rint({a})"),
    "Sigmoid": _op(1, F, "({one}/({one}+exp(-{a})))"),
    "Softplus": _op(1, F, "(fmax({a},{zero})+log1p(exp(-fabs({a}))))"),  # no exp overflow
    "Softsign": _op(1, F, "({a}/({one}+fabs({a})))"),
    "Elu": _op(1, F, "({a}<{zero}?{alpha}*(exp({a})-{one}):{a})", **op_defaults("Elu")),
    "Selu": _op(1, F, "SELU", **op_defaults("Selu")),
    "LeakyRelu": _op(1, F, "({a}<{zero}?{alpha}*{a}:{a})", **op_defaults("LeakyRelu")),
    "HardSigmoid": _op(1, F, "NCLAMP({alpha}*{a}+{beta},{zero},{one})",
                         **op_defaults("HardSigmoid")),
    "HardSwish": _op(1, F, "({a}*NCLAMP({a}/({one}*6)+{one}/2,{zero},{one}))"),
    "ThresholdedRelu": _op(1, F, "({a}>{alpha}?{a}:{zero})", **op_defaults("ThresholdedRelu")),
    "Celu": _op(1, F, "(NMAX_F({a},{zero})+NMIN_F({alpha}*(exp({a}/{alpha})-{one}),{zero}))",
                **op_defaults("Celu")),
    "Mish": _op(1, F, "({a}*tanh(log1p(exp({a}))))"),
    "Gelu": _op(1, F, "GELU", **op_defaults("Gelu")),
    "Shrink": _op(1, N, "({a}<-{lambd}?{a}+{bias}:({a}>{lambd}?{a}-{bias}:{zero}))",
                  "({a}<-{lambd}?{a}+{bias}:({a}>{lambd}?{a}-{bias}:{zero}))",
                  **op_defaults("Shrink")),
    "Swish": _op(1, F, "({a}/({one}+exp(-{alpha}*{a})))", **op_defaults("Swish")),
    "IsNaN": _op(1, F, "isnan({a})"),
    "IsInf": _op(1, F, "ISINF", **op_defaults("IsInf")),
    "Not": _op(1, BOOL, b="(!{a})"),
    "BitwiseNot": _op(1, INTS, None, "(~{a})"),
    # binary and variadic, with broadcasting
    "Add": _op(2, N, "({a}+{b})", "({a}+{b})"),
    "Sub": _op(2, N, "({a}-{b})", "({a}-{b})"),
    "Mul": _op(2, N, "({a}*{b})", "({a}*{b})"),
    "Div": _op(2, N, "({a}/{b})", "({b}==0?{zero}:{a}/{b})"),
    "Pow": _op(2, N, "POW", "POW"),
    "Mod": _op(2, N, "MOD", "MOD", **op_defaults("Mod")),
    "PRelu": _op(2, N, "({a}<{zero}?{a}*{b}:{a})", "({a}<{zero}?{a}*{b}:{a})", "{a}"),
    "BitShift": _op(2, INTS, None, "SHIFT", "SHIFT", direction="LEFT"),
    "BitwiseAnd": _op(2, INTS, None, "({a}&{b})"), "BitwiseOr": _op(2, INTS, None, "({a}|{b})"),
    "BitwiseXor": _op(2, INTS, None, "({a}^{b})"),
    "And": _op(2, BOOL, b="({a}&&{b})"), "Or": _op(2, BOOL, b="({a}||{b})"),
    "Xor": _op(2, BOOL, b="(({a}!=0)!=({b}!=0))"),
    "Equal": _op(2, ALL, "({a}=={b})", "({a}=={b})", b="({a}=={b})"),
    "Less": _op(2, N, "({a}<{b})", "({a}<{b})"), "Greater": _op(2, N, "({a}>{b})", "({a}>{b})"),
    "LessOrEqual": _op(2, N, "({a}<={b})", "({a}<={b})"),
    "GreaterOrEqual": _op(2, N, "({a}>={b})", "({a}>={b})"),
    "Max": _op(-1, N, "NMAX_F({a},{b})", "NMAX_I({a},{b})"),
    "Min": _op(-1, N, "NMIN_F({a},{b})", "NMIN_I({a},{b})"),
    "Sum": _op(-1, N, "({a}+{b})", "({a}+{b})"),
    "Mean": _op(-1, F, "MEAN"),
    "Where": _op(3, ALL, "({a}?{b}:{c})", "({a}?{b}:{c})", b="({a}?{b}:{c})"),
    "Clip": _op(3, N, "CLIP", "CLIP", min=None, max=None),
    "Cast": _op(1, ALL, "CAST", "CAST", b="CAST"),
    "CastLike": _op(2, ALL, "CAST", "CAST", b="CAST"),
}
# fmt: on
FUSIBLE = frozenset(EW_OPS) - {"CastLike"}  # CastLike reads only the type of input 1


F32 = np.dtype(np.float32)


def _comp(dt: np.dtype[Any]) -> np.dtype[Any]:
    """The type a value is computed in: 16-bit floats in float."""
    return F32 if dt in HALFS else dt


def _kind(dt: np.dtype[Any]) -> str:
    if dt.kind == "f":
        return "f"
    if dt.kind == "b":
        return "b"
    return "u" if dt.kind == "u" else "i"


@dataclass
class EwStep:
    """One node inside an elementwise program: op, attrs, operand variables and types."""

    op: str
    attrs: dict[str, Any]
    args: list[str | None]  # C variable names (None: absent optional input)
    arg_types: list[np.dtype[Any]]
    out: str
    out_type: np.dtype[Any]
    since: int = 1


def _render(st: EwStep, rt: Runtime) -> str:
    op = EW_OPS[st.op]
    T = CTYPES[st.out_type]
    a_t = st.arg_types[0] if st.arg_types else st.out_type
    kind = _kind(a_t if st.op not in ("Where",) else st.arg_types[1])
    tmpl: str | None = getattr(op, kind)
    if tmpl is None and kind == "u":
        tmpl = op.i
    if tmpl is None:
        raise InvalidArgument(f"{st.op} does not take {a_t}")
    ct = CTYPES[a_t] if st.op not in ("Where",) else CTYPES[st.arg_types[1]]
    if st.op in ("Cast", "CastLike"):
        ct = T
    vals: dict[str, Any] = {"T": ct, "zero": lit(0, ct), "one": lit(1, ct)}
    given = {**op.attrs, **st.attrs}  # the table's defaults are the schema's (op_defaults)
    for name in op.attrs:
        v = given[name]
        vals[name] = lit(v, ct) if isinstance(v, (int, float)) else v
    a = st.args
    vals.update(a=a[0] if a else "", b=a[1] if len(a) > 1 else "", c=a[2] if len(a) > 2 else "")
    if op.arity == -1:
        if tmpl == "MEAN":
            expr = a[0] or ""
            for x in a[1:]:
                expr = f"({expr}+{x})"
            return f"({expr}/{lit(len(a), ct)})"
        expr = a[0] or ""
        for x in a[1:]:
            expr = tmpl.format(**{**vals, "a": expr, "b": x})
        return expr
    if tmpl == "GELU":
        if given["approximate"] == "tanh":
            k = lit(math.sqrt(2 / math.pi), ct)
            return (
                f"({lit(0.5, ct)}*{a[0]}*({vals['one']}+tanh({k}*({a[0]}+{lit(0.044715, ct)}"
                f"*{a[0]}*{a[0]}*{a[0]}))))"
            )
        return f"({lit(0.5, ct)}*{a[0]}*({vals['one']}+erf({a[0]}*{lit(math.sqrt(0.5), ct)})))"
    if tmpl == "SELU":  # the CPU provider's order and scales (semantics.selu_scales)
        g, ga = selu_scales(given["alpha"], given["gamma"])
        # expm1 in double where the device has it, rounded once (semantics.numerics.expm1)
        e = f"(({ct})expm1((double){a[0]}))" if rt.fp64 else f"expm1({a[0]})"
        return f"({a[0]}>{vals['zero']}?{lit(g, ct)}*{a[0]}:{lit(ga, ct)}*{e})"
    if tmpl == "ISINF":
        neg, pos = int(given["detect_negative"]), int(given["detect_positive"])
        parts = ([f"({a[0]}==-INFINITY)"] if neg else []) + ([f"({a[0]}==INFINITY)"] if pos else [])
        return "(" + ("||".join(parts) or "0") + ")"
    if tmpl == "POW":
        cty = "double" if (ct == "double" or (kind != "f" and rt.fp64)) else "float"
        return f"(({ct})pow(({cty}){a[0]},({cty}){a[1]}))"
    if tmpl == "MOD":
        if kind == "f":
            return f"fmod({a[0]},{a[1]})" if given["fmod"] else f"PYMOD_F({a[0]},{a[1]})"
        if kind == "u" or given["fmod"]:
            return f"({a[1]}==0?{vals['zero']}:{a[0]}%{a[1]})"
        return f"PYMOD_I({a[0]},{a[1]})"
    if tmpl == "SHIFT":  # out-of-range shifts as the reference: 0 (or -1 for negative >>)
        bits = np.dtype(a_t).itemsize * 8
        ut = ct if kind == "u" else "u" + ct
        bad = f"({a[1]}<0||{a[1]}>={bits})" if kind != "u" else f"({a[1]}>={bits})"
        if st.attrs.get("direction", "LEFT") == "LEFT":
            return f"({bad}?{vals['zero']}:({ct})(({ut}){a[0]}<<{a[1]}))"
        fill = f"({a[0]}<0?({ct})-1:{vals['zero']})" if kind != "u" else vals["zero"]
        return f"({bad}?{fill}:({a[0]}>>{a[1]}))"
    if tmpl == "CAST":
        if st.out_type == np.bool_:
            return f"({a[0]}!=0)"
        return f"(({T}){a[0]})"
    if tmpl == "CLIP":
        lo, hi = (a[1] if len(a) > 1 else None), (a[2] if len(a) > 2 else None)
        if st.since < 11:
            lo = lit(st.attrs.get("min", -math.inf if kind == "f" else 0), ct)
            hi = lit(st.attrs.get("max", math.inf if kind == "f" else 0), ct)
        e = a[0] or ""
        if lo is not None:
            e = f"({e}<{lo}?{lo}:{e})"
        if hi is not None:
            e = f"({e}>{hi}?{hi}:{e})"
        return e
    return tmpl.format(**vals)


@dataclass
class EwProgram:
    """A compiled elementwise kernel: group inputs (device arrays) -> outputs, one index space."""

    kernel: Any
    in_types: list[np.dtype[Any]]
    out_types: list[np.dtype[Any]]
    deps: list[list[int]]  # per output: which inputs it depends on (for the shape check)
    rt: Runtime

    def __call__(self, *xs: Any) -> tuple[Any, ...]:
        rt = self.rt
        shapes = [tuple(x.shape) for x in xs]
        try:
            out_shape = tuple(np.broadcast_shapes(*shapes)) if shapes else ()
        except ValueError:
            raise InvalidArgument(f"shapes {shapes} cannot be broadcast together") from None
        for dep in self.deps:
            if len(dep) < len(xs) and dep:
                own = tuple(np.broadcast_shapes(*(shapes[i] for i in dep)))
                if own != out_shape:
                    raise InvalidArgument(
                        f"fused elementwise group: an output has shape {own}, not {out_shape}"
                    )
        outs = [rt.empty(out_shape, t) for t in self.out_types]
        n = math.prod(out_shape)
        if n == 0:
            return tuple(outs)
        if all(s == out_shape for s in shapes):
            rank, meta = 0, rt.empty_meta
        else:
            vals = list(out_shape)
            for s in shapes:
                vals.extend(bcast_strides(s, out_shape))
            rank, meta = len(out_shape), rt.meta(tuple(vals))
        rt.launch(
            self.kernel, n, np.int32(rank), meta, *[buf(o) for o in outs], *[buf(x) for x in xs]
        )
        return tuple(outs)


def compile_ew(
    rt: Runtime,
    name: str,
    inputs: Sequence[tuple[str, np.dtype[Any]]],
    steps: Sequence[tuple[str, dict[str, Any], Sequence[str | None], str, np.dtype[Any], int]],
    outputs: Sequence[str],
    value_types: dict[str, np.dtype[Any]],
) -> EwProgram:
    """Generate and build one kernel computing `outputs` from `inputs` through `steps`.

    `steps` are (op, attrs, input value names, output value name, output dtype, since).
    """
    var: dict[str, str] = {}
    params = ["long n", "int rank", "__global const long* m"]
    for j, o in enumerate(outputs):
        params.append(f"__global {CTYPES[value_types[o]]}* o{j}")
    for k, (x, t) in enumerate(inputs):
        params.append(f"__global const {CTYPES[t]}* x{k}")
        var[x] = f"v{k}"
    # values are computed in `comp` types (float16/bfloat16 in float, loaded and stored with
    # conversions); a Cast from double to float16 keeps the double for a single rounding
    comp = {x: _comp(t) for x, t in value_types.items()}
    k_in = len(inputs)
    body = [
        "long gid = get_global_id(0);",
        "if (gid >= n) return;",
        *[f"long i{k} = gid;" for k in range(k_in)],
        "if (rank > 0) {",
        "  long r = gid;",
        *[f"  i{k} = 0;" for k in range(k_in)],
        "  for (int d = rank - 1; d >= 0; --d) {",
        "    long dim = m[d]; long c = r % dim; r /= dim;",
        *[f"    i{k} += c * m[rank * {k + 1} + d];" for k in range(k_in)],
        "  }",
        "}",
    ]
    for k, (_, t) in enumerate(inputs):
        if t == F16:
            body.append(f"float v{k} = vload_half(i{k}, x{k});")
        elif t == BF16:
            body.append(f"float v{k} = bf2f(x{k}[i{k}]);")
        else:
            body.append(f"{CTYPES[t]} v{k} = x{k}[i{k}];")
    deps: dict[str, set[int]] = {x: {k} for k, (x, _) in enumerate(inputs)}
    for s, (op, attrs, ins, out, out_t, since) in enumerate(steps):
        first = ins[0] if ins else None
        if first is None:
            raise InvalidArgument(f"{op}: its first input is required")
        args = [var[x] if x else None for x in ins]
        if op != "Clip":  # Clip keeps absent bounds as None, in position
            args = [a for a in args if a is not None]
        if op in ("Cast", "CastLike") and out_t == F16 and comp[first] == np.float64:
            comp[out] = comp[first]
        ct_out = comp[out]
        st = EwStep(op, attrs, args, [comp[x] for x in ins if x], out, ct_out, since)
        if op == "Clip":
            st.arg_types = [comp[first]]
        name_v = f"t{s}"
        expr = f"({CTYPES[ct_out]})({_render(st, rt)})"
        if out_t in HALFS and ct_out == F32:  # each op rounds to its 16-bit type, as ONNX does
            expr = f"{'rh' if out_t == F16 else 'rbf'}({expr})"
        body.append(f"{CTYPES[ct_out]} {name_v} = {expr};")
        var[out] = name_v
        deps[out] = set().union(*(deps[x] for x in ins if x)) if any(ins) else set()
    for j, o in enumerate(outputs):
        if value_types[o] == F16:
            body.append(f"vstore_half_rte({var[o]}, gid, o{j});")
        elif value_types[o] == BF16:
            body.append(f"o{j}[gid] = f2bf((float){var[o]});")
        else:
            body.append(f"o{j}[gid] = {var[o]};")
    src = (
        HELPERS + f"__kernel void {name}({', '.join(params)}) {{\n  " + "\n  ".join(body) + "\n}\n"
    )
    (kernel,) = rt.build(src, name)
    return EwProgram(
        kernel,
        [t for _, t in inputs],
        [value_types[o] for o in outputs],
        [sorted(deps[o]) for o in outputs],
        rt,
    )


def _build_single(kn: KernelNode, rt: Runtime) -> KernelFn:
    node = kn.node
    ins = list(node.inputs[:1]) if kn.op_type == "CastLike" else list(node.inputs)
    names = [x for x in ins if x]
    types = {info.name: info.dtype for info in kn.inputs if info is not None}
    inputs = [(x, types[x]) for x in dict.fromkeys(names)]
    out = node.outputs[0]
    types[out] = dtype_out(kn)
    step = (kn.op_type, dict(kn.attrs), ins, out, types[out], kn.since_version)
    prog = compile_ew(rt, "ew_" + kn.op_type.lower(), inputs, [step], [out], types)
    order = [list(dict.fromkeys(names)).index(x) if x else -1 for x in ins]
    uniq = len(inputs)
    if kn.op_type == "CastLike":
        return lambda x, like: prog(x)
    if uniq == len(names) and -1 not in order:
        return prog

    def run(*xs: Any) -> tuple[Any, ...]:
        vals: list[Any] = [None] * uniq
        for pos, k in enumerate(order):
            if k >= 0:
                vals[k] = xs[pos]
        return prog(*vals)

    return run


def _register() -> None:
    for op_type, op in EW_OPS.items():
        dtype_of: tuple[int, ...] = (0,)
        if op_type == "Where":
            dtype_of = (1,)
        # Before opset 7 binary ops broadcast by `broadcast`/`axis` attributes (PRelu by channel),
        # not numpy-style: those versions are left to the CPU provider.
        since = 7 if op.arity == 2 else 1
        ocl_kernel(op_type, since, dtypes=op.dtypes, dtype_of=dtype_of, half="native")(
            _build_single
        )


_register()
