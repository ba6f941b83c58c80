"""numpy kernel of DynamicQuantizeLSTM (com.microsoft), computed in onnxruntime's order so that
its outputs, and the uint8 codes of its input and of each step's hidden state, are bit-equal to
onnxruntime's on x86-64 with FMA3 (whose sigmoid and tanh kernels it follows):

- X, its first max(sequence_lens) steps of the whole batch, is rounded to uint8 by
  DynamicQuantizeLinear's rule (`semantics.quant.dynamic_quant_params`) and multiplied by the
  8-bit W as integers (exact: float32 products over runs of at most 258 rows, each partial sum
  below 2**24, summed in float64; `semantics.quant.exact_runs`): float32(sum) *
  float32(x_scale * w_scale[column]).
- Each step, the hidden state of a group of batch rows is rounded the same way on its own range,
  and float32(its integer product with R) * (h_scale * r_scale) is added to the step's X term.
  onnxruntime splits the batch into groups of ceil(batch / threads) rows (when the batch is
  above 4, or from 2 with a hidden size up to 256): turnout takes the session's
  `intra_op_num_threads` for `threads` when it is set, and one group otherwise (onnxruntime's
  default is one thread a physical core, so a batch above 1 matches when both are set alike).
- Then, per gate, the peephole term, the fused bias Wb + Rb, the clip and the activation; the
  sigmoid and tanh are MLAS's approximations (`semantics.numerics.mlas_logistic`, `mlas_tanh`),
  the others the float LSTM's. C = C_prev * f + i * g, H = o * h(C).
- Shorter sequences run reversed on their own length (onnxruntime's ReverseSequence); a
  finished row keeps its state and writes zeros to Y, and when Y is an output, those zeros are
  what the next step rounds (they never widen the range).

All directions step together ([directions, batch, ...] arrays, one activation call per gate
kind when they share activations). The weights of constant inputs are prepared once (codes
less zero point, column scales).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from turnout.graph.contrib import DOMAIN
from turnout.graph.errors import InvalidArgument
from turnout.providers.cpu.kernels.quant import dynamic_quantize_linear
from turnout.providers.cpu.kernels.rnn import recurrent_activation
from turnout.providers.cpu.registry import cpu_kernel
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.constants import constant_input
from turnout.sdk.semantics.numerics import mlas_logistic, mlas_tanh
from turnout.sdk.semantics.quant import exact_runs
from turnout.sdk.semantics.recurrent import (
    RecurrentAttrs,
    check_recurrent_inputs,
    check_sequence_lens,
    recurrent_attrs,
)

__all__: list[str] = []

Array = np.ndarray[Any, Any]
Act = Callable[[Array], Array]
F32 = np.float32


def _activation(name: str, alpha: Any, beta: Any) -> Act:
    if name == "sigmoid":
        return mlas_logistic
    if name == "tanh":
        return mlas_tanh
    return recurrent_activation(name, alpha, beta)


_CODE_BOUND = 255 * 255  # |codes - zero point| <= 255 on both sides of a product


def _exact_product(a: Array, w: Array) -> Array:
    """float32 of the exact integer product of centered codes `a` [m, rows] and `w` [rows,
    cols], both float32: float32 products over runs of rows whose sums stay below 2**24, summed
    in float64 when there are several (a float64 product read twice the bytes: 8 MB of R a
    direction each step at hidden 512)."""
    runs = exact_runs(w.shape[0], _CODE_BOUND)
    if len(runs) == 1:
        out: Array = a @ w
        return out
    acc = sum((a[:, run] @ w[run]).astype(np.float64) for run in runs)
    return np.asarray(acc).astype(F32)


def _weights(node: KernelNode, what: str, q: Array, scale: Array, zp: Array) -> tuple[Array, Array]:
    """[directions, rows, 4 * hidden] codes -> (codes less the zero point, in float32 (exact),
    the scales as float32 [directions, 1, 1 or 4 * hidden])."""
    dirs = q.shape[0] if q.ndim == 3 else 0
    ok = (dirs, q.shape[-1])
    if q.ndim != 3 or scale.shape not in ((dirs,), ok) or zp.shape != scale.shape:
        raise InvalidArgument(
            f"{node.name}: {what} {q.shape} with scale {scale.shape} and zero point {zp.shape}: "
            f"the parameters must be [directions] or [directions, 4 * hidden]"
        )
    shape = (dirs, 1, scale.size // dirs)
    centered = q.astype(np.int32) - zp.reshape(shape).astype(np.int32)
    return centered.astype(F32), np.asarray(scale, F32).reshape(shape)


def _reverse_rows(a: Array, lens: Array) -> Array:
    """Each batch row's first lens[b] steps reversed, the rest in place (time-major [T, B, ...]);
    its own inverse."""
    if (lens == a.shape[0]).all():
        return a[::-1]
    out = a.copy()
    for b, n in enumerate(lens.tolist()):
        if n:
            out[:n, b] = a[n - 1 :: -1, b]
    return out


def _groups(node: KernelNode, batch: int, hidden: int) -> list[slice]:
    """The batch rows whose state onnxruntime rounds together (see the module docstring)."""
    threads = node.context.threads if node.context is not None else 0
    per = batch
    if threads > 1 and (batch > 4 or (batch >= 2 and hidden <= 256)):
        per = math.ceil(batch / threads)
    return [slice(s, min(s + per, batch)) for s in range(0, max(batch, 1), max(per, 1))]


class _Steps:
    """The time loop of every direction at once ([directions, batch, ...] arrays; a direction
    runs reversed by its X term's rows), as onnxruntime's UniDirectionalLstm runs each."""

    def __init__(self, node: KernelNode, a: RecurrentAttrs) -> None:
        acts = [tuple(_activation(*spec) for spec in d) for d in a.acts]
        # directions with the same activations compute their gates in one call
        self.acts: list[tuple[slice, tuple[Act, ...]]] = (
            [(slice(None), acts[0])]
            if a.paired or len(acts) == 1
            else [(slice(d, d + 1), f) for d, f in enumerate(acts)]
        )
        self.clip = None if a.clip is None else F32(a.clip)
        self.input_forget = a.input_forget
        self.output_sequence = bool(node.node.outputs and node.node.outputs[0])
        self.quantize = dynamic_quantize_linear(node)

    def _product(self, h: Array, rc: Array, rs: Array) -> Array:
        """float32(the integer product of h's codes with R) * (h_scale * r_scale)."""
        q, scale, zp = self.quantize(h)
        out: Array = _exact_product(np.subtract(q, zp, dtype=F32), rc) * (scale * rs)
        return out

    def _biased(self, z: Array, bias: Array | None) -> Array:
        if bias is not None:
            z = z + bias
        if self.clip is not None:
            z = np.clip(z, -self.clip, self.clip)
        return z

    def _cell(
        self, z: Array, c: Array, bias: Array | None, peep: Array | None, acts: tuple[Act, ...]
    ) -> tuple[Array, Array]:
        """(h, C) of one step from z = the X and H terms (gates i, o, f, c), in onnxruntime's
        order: peephole term, bias, clip, activation per gate; C = C_prev * f + i * g."""
        f, g, hact = acts
        hs = c.shape[-1]
        if peep is None:  # the i, o, f gates in one call
            gates = self._biased(z, bias)
            ifo = f(gates[..., : 2 * hs if self.input_forget else 3 * hs])
            i, o = ifo[..., :hs], ifo[..., hs : 2 * hs]
            fg = F32(1) - i if self.input_forget else ifo[..., 2 * hs :]
            c_new = c * fg + i * g(gates[..., 3 * hs :])
            return o * hact(c_new), c_new

        def gate(k: int, act: Act, extra: Array | None = None) -> Array:
            zk = z[..., k * hs : (k + 1) * hs]
            if extra is not None:
                zk = zk + extra
            return act(self._biased(zk, None if bias is None else bias[..., k * hs : (k + 1) * hs]))

        pi, po, pf = peep[..., :hs], peep[..., hs : 2 * hs], peep[..., 2 * hs :]
        i = gate(0, f, c * pi)
        fg = F32(1) - i if self.input_forget else gate(2, f, c * pf)
        c_new = c * fg + i * gate(3, g)
        return gate(1, f, c_new * po) * hact(c_new), c_new

    def run(
        self,
        iofc: Array,
        rc: Array,
        rs: Array,
        bias: Array | None,
        peep: Array | None,
        state: tuple[Array, Array],
        lens: Array,
        groups: list[slice],
    ) -> tuple[Array, Array, Array]:
        """(Y [steps, directions, batch, hidden], final h, final c) from the X terms `iofc`
        [directions, steps, batch, 4 * hidden], in each direction's step order."""
        nd, steps, batch, hs4 = iofc.shape
        h, c = state
        prev = h  # what the next step rounds: Y's row (zeros once finished) or the held state
        y = np.zeros((steps, nd, batch, hs4 // 4), F32)
        for t in range(steps):
            z = np.empty((nd, batch, hs4), F32)
            for d in range(nd):
                for rows in groups:
                    z[d, rows] = iofc[d, t, rows] + self._product(prev[d, rows], rc[d], rs[d])
            h_new, c_new = np.empty_like(h), np.empty_like(c)
            for ds, acts in self.acts:
                h_new[ds], c_new[ds] = self._cell(
                    z[ds], c[ds], None if bias is None else bias[ds],
                    None if peep is None else peep[ds], acts,
                )  # fmt: skip
            if (t < lens).all():
                h, c, y[t] = h_new, c_new, h_new
            else:
                live = (t < lens)[:, None]
                h = np.where(live, h_new, h)
                c = np.where(live, c_new, c)
                y[t] = np.where(live, h_new, F32(0))
            prev = y[t] if self.output_sequence else h
        return y, h, c


@cpu_kernel("DynamicQuantizeLSTM", since=1, domain=DOMAIN)
def dynamic_quantize_lstm(node: KernelNode) -> KernelFn:
    a = recurrent_attrs(node, "LSTM")
    loop = _Steps(node, a)
    quantize = dynamic_quantize_linear(node)
    kept: dict[str, tuple[tuple[int, ...], tuple[Array, Array]]] = {}

    def weights(
        what: str, indices: tuple[int, int, int], q: Array, s: Array, z: Array
    ) -> tuple[Array, Array]:
        key = (id(q), id(s), id(z))
        found = kept.get(what)
        if found is not None and found[0] == key:
            return found[1]
        w = _weights(node, what, q, s, z)
        if all(constant_input(node, i) for i in indices):
            kept[what] = (key, w)
        return w

    def run(
        x: Array,
        w: Array,
        r: Array,
        b: Array | None,
        seq_lens: Array | None,
        init_h: Array | None,
        init_c: Array | None,
        p: Array | None,
        w_scale: Array,
        w_zp: Array,
        r_scale: Array,
        r_zp: Array,
    ) -> tuple[Array | None, ...]:
        wc, ws = weights("W", (1, 8, 9), w, w_scale, w_zp)
        rc, rs = weights("R", (2, 10, 11), r, r_scale, r_zp)
        x = np.asarray(x, F32)
        # the checks read shapes only: W and R as ONNX lays them out, [dirs, 4 * hidden, rows]
        wt, rt = wc.transpose(0, 2, 1), rc.transpose(0, 2, 1)
        shapes = check_recurrent_inputs(a, (x, wt, rt, b, None, init_h, init_c, p))
        steps, batch, isz, hs = shapes.steps, shapes.batch, shapes.input_size, shapes.hidden
        checked = check_sequence_lens(node.name, seq_lens, batch, steps)
        lens = np.full(batch, steps, np.int64) if checked is None else checked
        run_steps = int(lens.max(initial=0))
        nd = len(a.directions)
        y = np.zeros((steps, nd, batch, hs), F32)
        y_h = np.zeros((nd, batch, hs), F32)
        y_c = np.zeros((nd, batch, hs), F32)
        if run_steps:
            xq, xs, xz = quantize(x[:run_steps])
            xc = np.subtract(xq.reshape(-1, isz), xz, dtype=F32)
            iofc = np.empty((nd, run_steps, batch, 4 * hs), F32)
            for d in range(nd):
                xw = (_exact_product(xc, wc[d]) * (xs * ws[d])).reshape(run_steps, batch, -1)
                iofc[d] = _reverse_rows(xw, lens) if a.directions[d] == "reverse" else xw
            bias = (
                None if b is None else np.asarray(b[:, None, : 4 * hs] + b[:, None, 4 * hs :], F32)
            )
            h0, c0 = (
                np.zeros((nd, batch, hs), F32) if v is None else np.asarray(v, F32)
                for v in (init_h, init_c)
            )
            peep = None if p is None else np.asarray(p, F32)[:, None, :]
            groups = _groups(node, batch, hs)
            ys, y_h[...], y_c[...] = loop.run(iofc, rc, rs, bias, peep, (h0, c0), lens, groups)
            for d in range(nd):
                yd = ys[:, d]
                y[:run_steps, d] = _reverse_rows(yd, lens) if a.directions[d] == "reverse" else yd
        done = lens == 0  # onnxruntime zeroes their final states
        y_h[:, done] = 0
        y_c[:, done] = 0
        return (y, y_h, y_c)[: a.n_outputs]

    return run
