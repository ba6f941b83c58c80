"""LSTM, GRU and RNN: one generated numba kernel walks every time step of every direction.

Why: at the shapes small models have (batch 1..8, hidden 32..256) a step is a GEMV and a few
hundred activations, and numpy pays a call (and a temporary) per operation per step; that made
the CPU kernel 3-40x slower than onnxruntime. Here, per run:

- the input projection X·Wᵀ of every step and direction is one product (weights packed as one
  (input, directions x gates x hidden) matrix), on the register tile as Gemm's where it applies
  (`tile_matmul.matmul`: a CRNN's BiLSTM over 40 steps about 20 us faster), else BLAS; with at
  most 4 (step, batch) rows, as in a streaming VAD, the kernel projects them itself, which is
  cheaper than calling BLAS;
- one compiled call then runs the recurrence: per step, h·Rᵀ is accumulated from rows of Rᵀ
  four at a time (an axpy form that vectorizes without fast-math), and one fused loop per batch
  row applies biases, peepholes, clip and activations and writes h, c and Y.

Weights are packed once per weight object: initializers reach the kernel as the same read-only
arrays every run, so a packed copy (Wᵀ, Rᵀ, summed biases) is reused while they are the inputs;
other inputs are packed on each run.

The kernel's text is generated per configuration (op, dtype, activations, clip, peepholes,
input_forget, linear_before_reset): absent features are not written, so the loops have no
branches. float32 tanh and sigmoid use a rational approximation that vectorizes (libm's tanhf
is a scalar call, 25 ns each); float64 uses exact np.tanh/np.exp.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
from numba import types

from turnout.graph.errors import InvalidArgument
from turnout.graph.ir import attr_text
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.recurrent import (
    RECURRENT_ACTIVATIONS,
    RECURRENT_OPS,
    recurrent_attrs,
)

from .. import cache
from ..codegen import numba_array
from ..registry import BuildContext, float_inputs_applies, numba_kernel
from ..vecmath import contracts, tanh_f32
from .pool_matmul import prepare_pool_matmul
from .tile_matmul import matmul, tile_matmul_available, tile_matmul_kernel

__all__ = ["ACTIVATIONS"]

# float32 tanh: vecmath's rational fit (<= 3.6e-7 relative); sigmoid(x) = 0.5 + 0.5 tanh(x / 2)
# then has absolute error <= 2e-7.
_FAST_TANH = "\n".join(tanh_f32("v", "v"))
_FAST_SIGMOID = "v = T(0.5) * v\n" + _FAST_TANH + "\nv = T(0.5) + T(0.5) * v"

# ONNX recurrent activations: name (lower case) -> ((alpha, beta) defaults, None where the
# activation takes no such parameter; statement(s) computing v from v, with A and B the
# parameters). The defaults are the shared table's (`semantics.recurrent.RECURRENT_ACTIVATIONS`).
_CODE: dict[str, str] = {
    "relu": "v = zero if v < zero else v",
    "tanh": "v = np.tanh(v)",
    "sigmoid": "e = np.exp(-abs(v))\nv = one / (one + e) if v >= zero else e / (one + e)",
    "affine": "v = A * v + B",
    "leakyrelu": "v = v if v >= zero else A * v",
    "thresholdedrelu": "v = v if v > A else zero",
    "scaledtanh": "v = A * np.tanh(B * v)",
    "hardsigmoid": "v = A * v + B\nv = zero if v < zero else v\nv = one if v > one else v",
    "elu": "v = v if v >= zero else A * np.expm1(v)",
    "softsign": "v = v / (one + abs(v))",
    "softplus": "v = (v + np.log1p(np.exp(-v))) if v > zero else np.log1p(np.exp(v))",
}

ACTIVATIONS: dict[str, tuple[tuple[float | None, float | None], str]] = {
    name: (RECURRENT_ACTIVATIONS[name], code) for name, code in _CODE.items()
}

_FAST = {
    "tanh": _FAST_TANH,
    "sigmoid": _FAST_SIGMOID,
    "scaledtanh": "v = B * v\n" + _FAST_TANH + "\nv = A * v",
}

# op -> (gates, default activations per direction, has a cell state)
_OPS = RECURRENT_OPS

Act = tuple[str, float, float]  # lower-case name, alpha, beta (0.0 where unused)


def _direction(kn: KernelNode) -> str:
    return attr_text(kn.attr("direction", "forward"))


def _activations(kn: KernelNode) -> list[list[Act]]:
    """Per direction, the activations with their parameters, as turnout.sdk.semantics.recurrent
    decodes them (0.0 where an activation takes no such parameter)."""
    acts = recurrent_attrs(kn).acts
    return [[(k, 0.0 if a is None else a, 0.0 if b is None else b) for k, a, b in d] for d in acts]


def _applies(kn: KernelNode) -> str | None:
    why = float_inputs_applies(kn, 3, narrow=False)
    if why is not None:
        return why
    if _direction(kn) not in ("forward", "reverse", "bidirectional"):
        return f"unknown direction {_direction(kn)!r}"
    try:
        _activations(kn)
    except InvalidArgument as e:
        return str(e)
    return None


# ---------------------------------------------------------------------------- kernel text


def _act_lines(act: Act, fast: bool, clip: float | None) -> list[str]:
    """Statements turning the gate's pre-activation `v` into its activation `v`."""
    name, a, b = act
    lines = []
    if clip is not None:  # comparisons let NaN pass, as np.clip does
        lo, hi = f"T({-clip!r})", f"T({clip!r})"
        lines += [f"v = {lo} if v < {lo} else v", f"v = {hi} if v > {hi} else v"]
    body = _FAST[name] if fast and name in _FAST else ACTIVATIONS[name][1]
    body = re.sub(r"\bA\b", f"T({a!r})", re.sub(r"\bB\b", f"T({b!r})", body))
    return lines + body.splitlines()


def _gemv(src: str, dst: str, row: str, n: str, width: str) -> list[str]:
    """dst(b)[j] += sum_k src(b)[k] * row(k)[j] for j < width and every batch row b.

    `src` and `dst` are 1-D views given as format strings in `{b}`, `row` a view of the
    matrix's row `{k}` (of `n` rows). Four rows at a time: each dst element is read and written
    once per four products, the rows are reused across the batch, and the j loop is a plain
    axpy that LLVM vectorizes without reassociating (no fast-math needed). Every inner loop
    indexes views by the loop variable alone: numba's negative-index handling of an offset
    index (`x[o + j]`) stops LLVM from vectorizing (4-10x slower, measured)."""
    return [
        "k = 0",
        f"while k + 4 <= {n}:",
        f"    r0 = {row.format(k='k')}",
        f"    r1 = {row.format(k='k + 1')}",
        f"    r2 = {row.format(k='k + 2')}",
        f"    r3 = {row.format(k='k + 3')}",
        "    for b in range(batch):",
        f"        sb = {src.format(b='b')}",
        "        v0 = sb[k]",
        "        v1 = sb[k + 1]",
        "        v2 = sb[k + 2]",
        "        v3 = sb[k + 3]",
        f"        ab = {dst.format(b='b')}",
        f"        for j in range({width}):",
        "            ab[j] += v0 * r0[j] + v1 * r1[j] + v2 * r2[j] + v3 * r3[j]",
        "    k += 4",
        f"while k < {n}:",
        f"    r0 = {row.format(k='k')}",
        "    for b in range(batch):",
        f"        v0 = {src.format(b='b')}[k]",
        f"        ab = {dst.format(b='b')}",
        f"        for j in range({width}):",
        "            ab[j] += v0 * r0[j]",
        "    k += 1",
    ]


def _indent(lines: list[str], n: int) -> list[str]:
    return [" " * n + s for s in lines]


def _per_direction(acts: list[list[Act]], make: Any) -> list[str]:
    """`make(acts_of_one_direction)` lines, split on d when the directions' activations differ."""
    if len(acts) == 1 or acts[0] == acts[1]:
        return list(make(acts[0]))
    return ["if d == 0:", *_indent(make(acts[0]), 4), "else:", *_indent(make(acts[1]), 4)]


def _views(**spans: str) -> list[str]:
    """name = acc[b, lo:hi] for each gate's columns ("lo:hi" given)."""
    return [f"{k} = acc[b, {v}]" for k, v in spans.items()]


_XROW = "(t * batch + {b} if layout == 0 else {b} * steps + t)"  # (step t, batch row b)
_XR = [  # this step's input projection of batch row b (gh values, all gates)
    f"xr = xp[b] if project else xw[{_XROW.format(b='b')}, off:off + gh]",
]
_ROW_LOOP = [  # per batch row: Y's row; a row past its sequence length gets zeros, keeps state
    "for b in range(batch):",
    "    yr = y[t, d, b] if layout == 0 else y[b, t, d]",
    "    if t >= lens[b]:",
    "        for j in range(hs):",
    "            yr[j] = zero",
    "        continue",
    "    hb = h[d, b]",
]
_H_GEMV = _gemv("h[d, {b}]", "acc[{b}]", "rd[({k}) * gh:({k} + 1) * gh]", "hs", "gh")


def _lstm_step(
    acts: list[Act], fast: bool, clip: float | None, peep: bool, couple: bool
) -> list[str]:
    f, g = (_act_lines(a, fast, clip) for a in acts[:2])
    h = _act_lines(acts[2], fast, None)  # the cell's output activation is not clipped
    pi, pf, po = (f" + {q}[j] * {c}" if peep else "" for q, c in
                  (("p_i", "cp"), ("p_f", "cp"), ("p_o", "cn")))  # fmt: skip
    body = ["cp = cb[j]", f"v = gi_[j]{pi}", *f, "gi = v"]
    body += ["gf = one - gi"] if couple else [f"v = gf_[j]{pf}", *f, "gf = v"]
    body += ["v = gc_[j]", *g, "cn = gf * cp + gi * v"]
    body += [f"v = go_[j]{po}", *f, "go = v", "v = cn", *h, "hn = go * v"]
    body += ["cb[j] = cn", "hb[j] = hn", "yr[j] = hn"]
    gates = _views(gi_="0:hs", go_="hs:2 * hs", gf_="2 * hs:3 * hs", gc_="3 * hs:gh")
    peeps = ["p_i = p[d, 0:hs]", "p_o = p[d, hs:2 * hs]", "p_f = p[d, 2 * hs:3 * hs]"]
    return [
        *_H_GEMV,
        *_ROW_LOOP,
        "    cb = c[d, b]",
        *_indent(gates + (peeps if peep else []), 4),
        "    for j in range(hs):",
        *_indent(body, 8),
    ]


def _gru_step(acts: list[Act], fast: bool, clip: float | None, lbr: bool) -> list[str]:
    f, g = (_act_lines(a, fast, clip) for a in acts)
    gates = _views(gz_="0:hs", gr_="hs:2 * hs", gh_="2 * hs:gh")
    if lbr:  # h gate: x Whᵀ + Wbh + r * (h Rhᵀ + Rbh), where acc holds h Rhᵀ + Rbh
        body = ["v = gz_[j]", *f, "z = v", "v = gr_[j]", *f,
                "v = xh[j] + bh[j] + v * gh_[j]", *g,
                "hn = (one - z) * v + z * hb[j]", "hb[j] = hn", "yr[j] = hn"]  # fmt: skip
        return [
            *_H_GEMV,
            *_ROW_LOOP,
            *_indent([*_XR, "xh = xr[2 * hs:gh]", "bh = bias[d, 2 * hs:gh]", *gates], 4),
            "    for j in range(hs):",
            *_indent(body, 8),
        ]
    # z and r from h first, then the h gate from (r * h) Rhᵀ: two GEMVs per step, each over
    # its own contiguous block of Rᵀ (packed (hs, 2 hs) then (hs, hs))
    # (z goes to its own buffer: storing it back into acc, the array the loop reads, made
    # LLVM's overlap check fail for batch > 1 and the loop run scalar, 16x slower)
    zr = ["v = gz_[j]", *f, "zb[j] = v", "v = gr_[j]", *f, "hr[j] = v * hb[j]"]
    body = ["v = gh_[j]", *g, "z = zb[j]", "hn = (one - z) * v + z * hb[j]",
            "hb[j] = hn", "yr[j] = hn"]  # fmt: skip
    return [
        *_gemv(
            "h[d, {b}]",
            "acc[{b}, 0:2 * hs]",
            "rd[({k}) * 2 * hs:({k} + 1) * 2 * hs]",
            "hs",
            "2 * hs",
        ),
        "for b in range(batch):",
        "    hb = h[d, b]",
        "    hr = hh[b]",
        "    zb = zz[b]",
        *_indent(gates, 4),
        "    for j in range(hs):",
        *_indent(zr, 8),
        *_gemv(
            "hh[{b}]",
            "acc[{b}, 2 * hs:gh]",
            "rd[2 * hs * hs + ({k}) * hs:2 * hs * hs + ({k} + 1) * hs]",
            "hs",
            "hs",
        ),
        *_ROW_LOOP,
        "    zb = zz[b]",
        *_indent(gates, 4),
        "    for j in range(hs):",
        *_indent(body, 8),
    ]


def _rnn_step(acts: list[Act], fast: bool, clip: float | None) -> list[str]:
    body = ["v = ab[j]", *_act_lines(acts[0], fast, clip), "hb[j] = v", "yr[j] = v"]
    return [*_H_GEMV, *_ROW_LOOP, "    ab = acc[b]", "    for j in range(hs):",
            *_indent(body, 8)]  # fmt: skip


def kernel_source(
    op: str,
    dtype: np.dtype[Any],
    acts: list[list[Act]],
    *,
    clip: float | None = None,
    peepholes: bool = False,
    input_forget: bool = False,
    linear_before_reset: bool = False,
    loop: str = "range",
) -> str:
    """The text of `_recurrent(x, wt, xw, rt, bias, rbh, p, lens, h, c, y, layout, rev0)`.

    x: the input as (rows, input) with rows in the layout's order ((step, batch) for layout 0,
    (batch, step) for layout 1); wt: Wᵀ of every direction (input, dirs*G*hs); xw: x @ wt
    computed by BLAS, or an empty array to have the kernel project x itself (few rows);
    rt: Rᵀ per direction, flattened (dirs, hs*G*hs) (GRU without linear_before_reset: the
    (hs, 2 hs) block of z and r, then the (hs, hs) block of h); bias: (dirs, G*hs), W and R
    biases summed (GRU's Rbh under linear_before_reset is rbh (dirs, hs) instead); p: LSTM
    peepholes (dirs, 3*hs); lens: per batch row; h, c: (dirs, batch, hs) states, initial in,
    final out; y: (steps, dirs, batch, hs), or (batch, steps, dirs, hs) for layout 1; rev0:
    whether direction 0 runs backwards (direction 1 always does).
    """
    fast = dtype == np.float32
    if op == "LSTM":
        step = _per_direction(acts, lambda a: _lstm_step(a, fast, clip, peepholes, input_forget))
    elif op == "GRU":
        step = _per_direction(acts, lambda a: _gru_step(a, fast, clip, linear_before_reset))
    else:
        step = _per_direction(acts, lambda a: _rnn_step(a, fast, clip))
    gru_lbr = op == "GRU" and linear_before_reset
    # acc = x Wᵀ + biases (GRU under linear_before_reset: the h gate's columns start at Rbh
    # and get h Rhᵀ; its x part is read from xr in the gate loop)
    init = [*_XR, "ab = acc[b]", "bb = bias[d]"]
    if gru_lbr:
        init += ["for j in range(2 * hs):", "    ab[j] = xr[j] + bb[j]",
                 "ah = acc[b, 2 * hs:gh]", "rr = rbh[d]",
                 "for j in range(hs):", "    ah[j] = rr[j]"]  # fmt: skip
    else:
        init += ["for j in range(gh):", "    ab[j] = xr[j] + bb[j]"]
    proj = _gemv(f"x[{_XROW}]", "xp[{b}]", "wt[{k}, off:off + gh]", "isz", "gh")
    lines = [
        "def _recurrent(x, wt, xw, rt, bias, rbh, p, lens, h, c, y, layout, rev0):",
        f"    T = np.{dtype.name}",
        "    zero = T(0)",
        "    one = T(1)",
        "    batch, hs = h.shape[1], h.shape[2]",
        "    gh = bias.shape[1]",
        "    steps = y.shape[0] if layout == 0 else y.shape[1]",
        "    isz = wt.shape[0]",
        "    project = xw.shape[0] == 0",
        f"    for d in {loop}(rt.shape[0]):",
        "        rd = rt[d]",
        "        off = d * gh",
        "        acc = np.empty((batch, gh), y.dtype)",
        "        xp = np.zeros((batch if project else 0, gh), y.dtype)",
        *(["        hh = np.empty((batch, hs), y.dtype)"] if op == "GRU" else []),
        *(["        zz = np.empty((batch, hs), y.dtype)"] if op == "GRU" and not gru_lbr else []),
        "        rev = rev0 if d == 0 else 1",
        "        for s_ in range(steps):",
        "            t = steps - 1 - s_ if rev else s_",
        "            if project:",
        "                xp[:] = zero",
        *_indent(proj, 16),
        "            for b in range(batch):",
        *_indent(init, 16),
        *_indent(step, 12),
    ]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------- the kernel


_PROJECT_ROWS = 4
"""Inputs of at most this many (step, batch) rows are projected inside the kernel."""


class _Packed:
    """Weights in the kernel's layout, packed from the arrays (w, r, b, p)."""

    __slots__ = ("b", "bias", "p", "pp", "r", "rbh", "rt", "w", "wt")

    def __init__(self, key: tuple[Any, ...], packed: tuple[Any, ...]) -> None:
        self.w, self.r, self.b, self.p = key
        self.wt, self.rt, self.bias, self.rbh, self.pp = packed


class _Recurrent:
    """The run function of one RNN/GRU/LSTM node (see the module docstring)."""

    def __init__(self, kn: KernelNode, ctx: BuildContext) -> None:
        parallel = ctx.parallel
        op = self.op = kn.op_type
        self.name = kn.name
        self.gates, _, self.has_cell = _OPS[op]
        direction = _direction(kn)
        self.nd = 2 if direction == "bidirectional" else 1
        self.rev0 = int(direction == "reverse")
        hs = kn.attr("hidden_size")
        self.hidden = None if hs is None else int(hs)
        self.layout = int(kn.attr("layout", 0)) if kn.since_version >= 14 else 0
        self.lbr = op == "GRU" and bool(kn.attr("linear_before_reset", 0))
        clip = kn.attr("clip")
        self.n_outputs = len(kn.node.outputs)
        self.dt = np.dtype(kn.inputs[0].dtype)
        peep = op == "LSTM" and len(kn.node.inputs) > 7 and bool(kn.node.inputs[7])
        text = kernel_source(
            op,
            self.dt,
            _activations(kn),
            clip=None if clip is None else float(clip),
            peepholes=peep,
            input_forget=op == "LSTM" and bool(kn.attr("input_forget", 0)),
            linear_before_reset=self.lbr,
            loop="prange" if parallel and self.nd == 2 else "range",
        )
        fn = cache.load_source(text, "rnn")._recurrent

        def a(n: int, ro: bool = True) -> Any:
            return numba_array(self.dt, n, readonly=ro, layout="C")

        sig = types.void(
            a(2), a(2), a(2), a(2), a(2), a(2), a(2),
            types.Array(types.int64, 1, "C", readonly=True),
            a(3, False), a(3, False), a(4, False), types.int64, types.int64,
        )  # fmt: skip
        # with threads, the two directions of a bidirectional node run on two workers (with
        # the input projection split too, crnn_ocr_like's BiLSTM at 2 threads went from 575-653
        # to 375-447 us; onnxruntime 325); a parallel variant costs seconds of compile time
        # once, so one-direction nodes stay serial
        self.kern = cache.jit(
            fn, [sig], parallel=parallel and self.nd == 2, contract=contracts(text)
        )
        if parallel:
            prepare_pool_matmul(self.dt)  # the input projection's split
        # float32 projections of 4+ rows on the register tile, as Gemm's (`tile_matmul`)
        self.tile = tile_matmul_kernel(ctx) if tile_matmul_available(self.dt) else None
        self._packed: _Packed | None = None
        self._lens: dict[tuple[int, int], Any] = {}  # (batch, steps) -> all rows full length
        self._no_cell = np.zeros((self.nd, 0, 0), self.dt)  # GRU and RNN have no cell state
        self._no_xw = np.zeros((0, 0), self.dt)
        self._warm()

    def _warm(self) -> None:
        """One call on a 1-step problem now: a compiled function's first call is slow (~ms),
        and it belongs to session creation, not to the first run."""
        g, nd, dt = self.gates, self.nd, self.dt
        self.kern(
            np.zeros((1, 1), dt), np.zeros((1, nd * g), dt), np.zeros((0, nd * g), dt),
            np.zeros((nd, g), dt), np.zeros((nd, g), dt), np.zeros((nd, 1), dt),
            np.zeros((nd, 3), dt), np.ones(1, np.int64), np.zeros((nd, 1, 1), dt),
            np.zeros((nd, 1, 1), dt), np.zeros((1, nd, 1, 1), dt), 0, self.rev0,
        )  # fmt: skip

    def _pack(self, w: Any, r: Any, b: Any, p: Any) -> _Packed:
        """Packed weights, reused while the same read-only arrays come in (initializers)."""
        pk = self._packed
        if pk is not None and pk.w is w and pk.r is r and pk.b is b and pk.p is p:
            return pk
        name, nd, g, dt = self.name, self.nd, self.gates, self.dt
        if w.ndim != 3 or r.ndim != 3:
            raise InvalidArgument(f"{name}: W {w.shape} and R {r.shape} must be 3-D")
        hs = self.hidden if self.hidden is not None else r.shape[-1]
        isz = w.shape[2]
        gh = g * hs
        if w.shape != (nd, gh, isz) or r.shape != (nd, gh, hs):
            raise InvalidArgument(
                f"{name}: W {w.shape} / R {r.shape} do not match {nd} direction(s), "
                f"hidden size {hs} and input size {isz}"
            )
        if b is not None and b.shape != (nd, 2 * gh):
            raise InvalidArgument(f"{name}: B has shape {b.shape}, expected {(nd, 2 * gh)}")
        if p is not None and p.shape != (nd, 3 * hs):
            raise InvalidArgument(f"{name}: P has shape {p.shape}, expected {(nd, 3 * hs)}")
        wt = np.empty((isz, nd * gh), dt)
        for d in range(nd):
            wt[:, d * gh : (d + 1) * gh] = w[d].T
        if self.op == "GRU" and not self.lbr:  # Rᵀ of z, r then of h, each contiguous
            rt = np.concatenate(
                [r[:, : 2 * hs].transpose(0, 2, 1).reshape(nd, -1),
                 r[:, 2 * hs :].transpose(0, 2, 1).reshape(nd, -1)], axis=1
            ).astype(dt)  # fmt: skip
        else:
            rt = np.ascontiguousarray(r.transpose(0, 2, 1), dt).reshape(nd, hs * gh)
        bias = np.zeros((nd, gh), dt)
        rbh = np.zeros((nd, hs), dt)
        if b is not None:
            bias[...] = b[:, :gh] + b[:, gh:]
            if self.lbr:  # Rbh stays inside r * (h Rhᵀ + Rbh)
                bias[:, 2 * hs :] = b[:, 2 * hs : gh]
                rbh[...] = b[:, gh + 2 * hs :]
        pp = np.zeros((nd, 3 * hs), dt) if p is None else np.ascontiguousarray(p, dt)
        for x in (wt, rt, bias, rbh, pp):
            x.flags.writeable = False
        key = (w, r, b, p)
        pk = _Packed(key, (wt, rt, bias, rbh, pp))
        if all(x is None or not x.flags.writeable for x in key):
            self._packed = pk  # arrays that can change in place are packed every run
        return pk

    def _state(self, v: Any, what: str, batch: int, hs: int) -> Any:
        nd = self.nd
        if v is None:
            return np.zeros((nd, batch, hs), self.dt)
        if self.layout == 1:
            v = v.transpose(1, 0, 2)
        if v.shape != (nd, batch, hs):
            want = (batch, nd, hs) if self.layout == 1 else (nd, batch, hs)
            got = v.transpose(1, 0, 2).shape if self.layout == 1 else v.shape
            raise InvalidArgument(f"{self.name}: {what} has shape {got}, expected {want}")
        return np.array(v, self.dt, order="C")  # a copy: the kernel writes the state into it

    def __call__(
        self,
        x: Any,
        w: Any,
        r: Any,
        b: Any = None,
        seq_lens: Any = None,
        init_h: Any = None,
        init_c: Any = None,
        p: Any = None,
    ) -> tuple[Any, ...]:
        name, nd, layout = self.name, self.nd, self.layout
        if x.ndim != 3:
            raise InvalidArgument(f"{name}: X must be 3-D, got shape {x.shape}")
        dt = self.dt
        pk = self._pack(w, r, b, p if self.has_cell else None)
        isz = pk.wt.shape[0]
        hs = pk.rbh.shape[1]
        if layout == 0:
            steps, batch, xi = x.shape
        else:
            batch, steps, xi = x.shape
        if xi != isz:
            raise InvalidArgument(f"{name}: X has input size {xi}, W expects {isz}")
        if seq_lens is None:
            lens = self._lens.get((batch, steps))
            if lens is None:
                lens = np.full(batch, steps, np.int64)
                lens.flags.writeable = False
                if len(self._lens) < 64:
                    self._lens[batch, steps] = lens
        else:
            lens = np.asarray(seq_lens).astype(np.int64).reshape(-1)
            if lens.shape != (batch,) or (lens < 0).any() or (lens > steps).any():
                raise InvalidArgument(
                    f"{name}: sequence_lens {lens.tolist()} must be {batch} values in [0, {steps}]"
                )
        h = self._state(init_h, "initial_h", batch, hs)
        c = self._state(init_c, "initial_c", batch, hs) if self.has_cell else self._no_cell
        x2 = np.ascontiguousarray(x, dt).reshape(steps * batch, isz)  # -1 fails on 0 inputs
        # few rows: the kernel projects them itself (a BLAS call costs more than it saves)
        xw = self._no_xw if x2.shape[0] <= _PROJECT_ROWS else matmul(self.tile, x2, pk.wt)
        y_shape = (steps, nd, batch, hs) if layout == 0 else (batch, steps, nd, hs)
        y = np.empty(y_shape, dt)
        args = (x2, pk.wt, xw, pk.rt, pk.bias, pk.rbh, pk.pp, lens, h, c, y, layout, self.rev0)
        self.kern(*args)
        if layout == 1:
            h = np.ascontiguousarray(h.transpose(1, 0, 2))
            c = np.ascontiguousarray(c.transpose(1, 0, 2))
        outs = (y, h, c) if self.has_cell else (y, h)
        return outs[: self.n_outputs]


def _build(kn: KernelNode, ctx: BuildContext) -> KernelFn:
    return _Recurrent(kn, ctx)


for _op in _OPS:
    numba_kernel(_op, since=7, applies=_applies)(_build)
