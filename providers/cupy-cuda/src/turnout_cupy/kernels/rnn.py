"""RNN, GRU and LSTM on `be.xp`: one batched GEMM for the input projection, then the
recurrence step by step.

The attributes and input checks are `turnout.sdk.semantics.recurrent`'s, shared with every
provider. Per run, X·Wᵀ of every step and direction is one batched matmul (cuBLAS), with the
input biases (and the recurrent ones that are plain additions) folded in. The time loop then
runs both directions as one stacked (directions, batch, ...) state: one h·Rᵀ matmul and one set
of elementwise ops per step. The reverse direction reads the projection backwards in time.
Batch entries whose `sequence_lens` are shorter keep their state and write zeros to Y.
float16 computes in float32.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.recurrent import (
    RecurrentAttrs,
    check_recurrent_inputs,
    check_sequence_lens,
    recurrent_attrs,
    recurrent_inputs,
)

from ..backend import Backend
from .registry import cuda_kernel, float_only

__all__: list[str] = []

Fn = Callable[[Any], Any]


def _activation(xp: Any, key: str, a: Any, b: Any) -> Fn:
    """One recurrent activation as xp operations (names and defaults: the semantics')."""
    table: dict[str, Fn] = {
        "relu": lambda x: xp.maximum(x, 0),
        "tanh": xp.tanh,
        "sigmoid": lambda x: 0.5 * xp.tanh(0.5 * x) + 0.5,  # no overflow for large |x|
        "affine": lambda x: a * x + b,
        "leakyrelu": lambda x: xp.where(x >= 0, x, a * x),
        "thresholdedrelu": lambda x: xp.where(x > a, x, 0),
        "scaledtanh": lambda x: a * xp.tanh(b * x),
        "hardsigmoid": lambda x: xp.clip(a * x + b, 0, 1),
        "elu": lambda x: xp.where(x >= 0, x, a * xp.expm1(x)),
        "softsign": lambda x: x / (1 + xp.abs(x)),
        "softplus": lambda x: xp.logaddexp(0, x),
    }
    return table[key]


def _gate_functions(xp: Any, attrs: RecurrentAttrs, clip: Fn) -> list[Fn]:
    """Gate j's activation over a stacked (directions, ...) array, after clipping. With
    directions that compute alike it is one call; otherwise each direction's slice is
    computed with its own activation and the slices stacked again."""
    per_dir = [[_activation(xp, *k) for k in d] for d in attrs.acts]
    return [_gate(xp, [d[j] for d in per_dir], attrs.paired, clip) for j in range(len(per_dir[0]))]


def _gate(xp: Any, fs: list[Fn], paired: bool, clip: Fn) -> Fn:
    if paired or len(fs) == 1:
        f = fs[0]
        return lambda v: f(clip(v))
    return lambda v: xp.stack([f(clip(v[i])) for i, f in enumerate(fs)])


def _build(kn: KernelNode, be: Backend) -> KernelFn:
    xp = be.xp
    attrs = recurrent_attrs(kn)
    bound = attrs.clip
    clip: Fn = (lambda v: v) if bound is None else (lambda v: xp.clip(v, -bound, bound))
    acts = _gate_functions(xp, attrs, clip)
    cell: _Cell = {"RNN": _rnn_cell, "GRU": _gru_cell, "LSTM": _lstm_cell}[attrs.op]
    nd = len(attrs.directions)
    reverse = [d == "reverse" for d in attrs.directions]

    def run(*inputs: Any) -> tuple[Any, ...]:
        x, w, r, b, seq_lens, init_h, init_c, p = recurrent_inputs(inputs)
        out_dt = x.dtype
        dt = np.dtype(np.float32) if out_dt == np.float16 else out_dt
        if attrs.layout == 1 and x.ndim == 3:
            x = x.transpose(1, 0, 2)
            init_h = None if init_h is None else init_h.transpose(1, 0, 2)
            init_c = None if init_c is None else init_c.transpose(1, 0, 2)
        s = check_recurrent_inputs(attrs, (x, w, r, b, None, init_h, init_c, p))
        # sequence_lens is a host input: lengths decide which steps run, read once a run
        lens = check_sequence_lens(attrs.name, seq_lens, s.batch, s.steps)
        steps, batch, hs, g = s.steps, s.batch, s.hidden, attrs.gates
        w, r = w.astype(dt, copy=False), r.astype(dt, copy=False)
        # X·Wᵀ for every step and direction: one batched GEMM, (nd, steps * batch, g * hs)
        x2 = x.astype(dt, copy=False).reshape(1, steps * batch, s.input_size)
        xw = xp.matmul(x2, xp.swapaxes(w, 1, 2)).reshape(nd, steps, batch, g * hs)
        rb = None
        if b is not None:
            b = b.astype(dt, copy=False)
            wb, rb = b[:, : g * hs], b[:, g * hs :]
            folded = cell.fold_recurrent_bias(attrs, rb, hs)
            xw = xw + (wb + folded)[:, None, None, :]
            rb = cell.kept_recurrent_bias(attrs, rb, hs)
        # time-major per direction, the reverse direction read backwards: (steps, nd, ...)
        xw = xp.stack([xw[d, ::-1] if reverse[d] else xw[d] for d in range(nd)], axis=1)
        rt = xp.swapaxes(r, 1, 2)  # (nd, hs, g * hs)
        h = xp.zeros((nd, batch, hs), dt) if init_h is None else init_h.astype(dt)
        c = None
        if attrs.has_cell:
            c = xp.zeros((nd, batch, hs), dt) if init_c is None else init_c.astype(dt)
        peep = None if p is None else p.astype(dt, copy=False)[:, None, :]
        step = cell(xp, attrs, acts, rt, rb, peep, hs)
        live_at = _liveness(xp, lens, reverse, steps)
        ys = []
        for t in range(steps):
            h_new, c_new = step(xw[t], h, c)
            if live_at is not None:
                live = live_at[t]  # (nd, batch, 1): this direction's time index is in range
                h_new = xp.where(live, h_new, h)
                if c is not None:
                    c_new = xp.where(live, c_new, c)
                ys.append(xp.where(live, h_new, 0))
            else:
                ys.append(h_new)
            h, c = h_new, c_new
        y = xp.stack(ys) if ys else xp.zeros((0, nd, batch, hs), dt)
        y = xp.stack([y[::-1, d] if reverse[d] else y[:, d] for d in range(nd)], axis=1)
        outs: list[Any] = [y, h, c]
        if attrs.layout == 1:
            outs = [y.transpose(2, 0, 1, 3), h.transpose(1, 0, 2)]
            outs.append(None if c is None else c.transpose(1, 0, 2))
        return tuple(
            None if o is None else o.astype(out_dt, copy=False) for o in outs[: attrs.n_outputs]
        )

    return run


def _liveness(xp: Any, lens: Any, reverse: list[bool], steps: int) -> Any:
    """(steps, nd, batch, 1) bools: at loop step t, does direction d's time index (t, or
    steps-1-t backwards) fall within each batch entry's length. None when all do."""
    if lens is None:
        return None
    t = np.arange(steps)
    idx = np.stack([t[::-1] if rev else t for rev in reverse], axis=1)  # (steps, nd)
    return xp.asarray(idx[:, :, None, None] < lens[None, None, :, None])


Step = Callable[[Any, Any, Any], tuple[Any, Any]]


class _Cell:
    """A cell: `cell(xp, attrs, acts, rt, rb, peep, hs)` returns step(xw_t, h, c)."""

    def __call__(
        self, xp: Any, attrs: Any, acts: list[Fn], rt: Any, rb: Any, peep: Any, hs: int
    ) -> Step:
        raise NotImplementedError

    @staticmethod
    def fold_recurrent_bias(attrs: RecurrentAttrs, rb: Any, hs: int) -> Any:
        """The part of the recurrent bias that is a plain addition (folded into X·Wᵀ)."""
        return rb

    @staticmethod
    def kept_recurrent_bias(attrs: RecurrentAttrs, rb: Any, hs: int) -> Any:
        """The part the step adds itself, (nd, 1, n), or None."""
        return None


class _RNNCell(_Cell):
    def __call__(
        self, xp: Any, attrs: Any, acts: list[Fn], rt: Any, rb: Any, peep: Any, hs: int
    ) -> Step:
        (f,) = acts

        def step(xw: Any, h: Any, c: Any) -> tuple[Any, Any]:
            return f(xw + xp.matmul(h, rt)), None

        return step


class _GRUCell(_Cell):
    """With linear_before_reset the hidden gate's recurrent bias is inside r * (h·Rhᵀ + Rbh),
    so it stays in the step; otherwise all of it is folded."""

    @staticmethod
    def fold_recurrent_bias(attrs: RecurrentAttrs, rb: Any, hs: int) -> Any:
        if not attrs.linear_before_reset:
            return rb
        return rb * (np.arange(3 * hs) < 2 * hs).astype(rb.dtype)

    @staticmethod
    def kept_recurrent_bias(attrs: RecurrentAttrs, rb: Any, hs: int) -> Any:
        return rb[:, None, 2 * hs :] if attrs.linear_before_reset else None

    def __call__(
        self, xp: Any, attrs: Any, acts: list[Fn], rt: Any, rb: Any, peep: Any, hs: int
    ) -> Step:
        f, g = acts
        rt_zr, rt_h = rt[..., : 2 * hs], rt[..., 2 * hs :]
        before = attrs.linear_before_reset

        def step(xw: Any, h: Any, c: Any) -> tuple[Any, Any]:
            zr = f(xw[..., : 2 * hs] + xp.matmul(h, rt_zr))
            z, r = zr[..., :hs], zr[..., hs:]
            if before:
                hr = xp.matmul(h, rt_h)
                if rb is not None:
                    hr = hr + rb
                ht = g(xw[..., 2 * hs :] + r * hr)
            else:
                ht = g(xw[..., 2 * hs :] + xp.matmul(r * h, rt_h))
            return (1 - z) * ht + z * h, None

        return step


class _LSTMCell(_Cell):
    """Gates i, o, f, c in that order; peepholes P = (pi, po, pf) read the cell state."""

    def __call__(
        self, xp: Any, attrs: Any, acts: list[Fn], rt: Any, rb: Any, peep: Any, hs: int
    ) -> Step:
        f, g, hact = acts
        forget_is_input = attrs.input_forget
        pi = po = pf = None
        if peep is not None:
            pi, po, pf = peep[..., :hs], peep[..., hs : 2 * hs], peep[..., 2 * hs :]

        def step(xw: Any, h: Any, c: Any) -> tuple[Any, Any]:
            z = xw + xp.matmul(h, rt)
            zi, zo, zf, zc = (
                z[..., :hs],
                z[..., hs : 2 * hs],
                z[..., 2 * hs : 3 * hs],
                z[..., 3 * hs :],
            )
            if pi is not None:
                zi, zf = zi + pi * c, zf + pf * c
            i = f(zi)
            fg = 1 - i if forget_is_input else f(zf)
            c_new = fg * c + i * g(zc)
            if po is not None:
                zo = zo + po * c_new
            return f(zo) * hact(c_new), c_new

        return step


_rnn_cell, _gru_cell, _lstm_cell = _RNNCell(), _GRUCell(), _LSTMCell()

for _op in ("RNN", "GRU", "LSTM"):
    cuda_kernel(_op, 1, applies=float_only, host_inputs=(4,))(_build)
