"""Recurrent kernels: RNN, GRU and LSTM (all opsets; layout from 14).

The three ops share one driver (`_Recurrent`): it parses the common attributes, precomputes the
input projection `X @ W^T + Wb` for every time step in one BLAS call, walks the time steps in
Python for each direction with the whole batch at once, and masks batch entries whose
`sequence_lens` are shorter (their state stops changing and their Y rows are zero). Each op
contributes only its cell: a function from (projected input, state) to the new state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from turnout.providers.cpu.registry import cpu_kernel
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.constants import constant_input
from turnout.sdk.semantics.numerics import logistic
from turnout.sdk.semantics.recurrent import (
    check_recurrent_inputs,
    check_sequence_lens,
    recurrent_attrs,
)

__all__ = ["recurrent_activation"]

Act = Callable[[np.ndarray], np.ndarray]
Step = Callable[[np.ndarray, np.ndarray, Any], tuple[np.ndarray, Any]]


# activation name (lower case) -> builder(alpha, beta) -> function; the names and their
# alpha/beta defaults are turnout.sdk.semantics.recurrent's
_ACTIVATIONS: dict[str, Callable[[Any, Any], Act]] = {
    "relu": lambda a, b: lambda x: np.maximum(x, 0),
    "tanh": lambda a, b: np.tanh,
    "sigmoid": lambda a, b: logistic,
    "affine": lambda a, b: lambda x: a * x + b,
    "leakyrelu": lambda a, b: lambda x: np.where(x >= 0, x, a * x),
    "thresholdedrelu": lambda a, b: lambda x: np.where(x > a, x, 0),
    "scaledtanh": lambda a, b: lambda x: a * np.tanh(b * x),
    "hardsigmoid": lambda a, b: lambda x: np.clip(a * x + b, 0, 1),
    "elu": lambda a, b: lambda x: np.where(x >= 0, x, a * np.expm1(x)),
    "softsign": lambda a, b: lambda x: x / (1 + np.abs(x)),
    "softplus": lambda a, b: lambda x: np.logaddexp(0, x),
}


def recurrent_activation(name: str, alpha: Any, beta: Any) -> Act:
    """The activation `name` (lower case, as `semantics.recurrent` decodes it) with its alpha
    and beta bound."""
    return _ACTIVATIONS[name](alpha, beta)


def _direction(v: np.ndarray, d: int | slice) -> np.ndarray:
    """Row `d` of a per-direction vector (B, P), or all rows as (2, 1, n) for a slice."""
    return v[d] if isinstance(d, int) else v[:, None, :]


class _Recurrent:
    """Attributes and the time loop shared by RNN, GRU and LSTM."""

    gates = 1
    has_cell = False

    def __init__(self, node: KernelNode) -> None:
        a = recurrent_attrs(node, type(self).__name__.lstrip("_"))
        self.name = node.name
        self.attrs = a
        self.directions = list(a.directions)
        self.hidden_size = a.hidden_size
        self.clip = a.clip
        self.layout = a.layout
        self.acts = [[_ACTIVATIONS[k](al, be) for k, al, be in d] for d in a.acts]
        # both directions step together (one batched call per op) when they compute alike
        self.paired = a.paired
        self.n_outputs = a.n_outputs
        # R^T per direction, kept while R is the plan's constant (the same read-only array)
        self._r_constant = constant_input(node, 2)
        self._rt: tuple[Any, Any, np.ndarray | None] = (None, None, None)

    def stepper(self, d: int, w: dict[str, Any], hs: int) -> Step:
        """The cell of direction `d`: (projected input, h, c) -> (new h, new c).

        Weights, activations and slices are bound once per direction, so the time loop runs
        only the cell's arithmetic.
        """
        raise NotImplementedError

    def prepare(
        self,
        d: int | slice,
        rt: np.ndarray,
        b: np.ndarray | None,
        p: np.ndarray | None,
        hs: int,
        dt: np.dtype[Any],
    ) -> dict[str, Any]:
        """Weights of direction `d` in the form the cell wants (R^T, recurrent bias,
        peepholes); `d` a slice over both directions gives them stacked, (2, 1, ...) for the
        vectors so that they broadcast over the batch."""
        g = self.gates
        return {"rt": rt, "rb": None if b is None else _direction(b, d)[..., g * hs :]}

    def _transposed_r(self, r: np.ndarray, dt: np.dtype[Any]) -> np.ndarray:
        """R^T of every direction as (directions, hidden, gates * hidden), contiguous, in `dt`;
        computed once for a constant R."""
        seen, seen_dt, rts = self._rt
        if seen is r and seen_dt == dt and rts is not None:
            return rts
        rts = np.ascontiguousarray(r.astype(dt, copy=False).transpose(0, 2, 1))
        if self._r_constant:
            self._rt = (r, dt, rts)
        return rts

    def __call__(
        self,
        x: np.ndarray,
        w: np.ndarray,
        r: np.ndarray,
        b: np.ndarray | None = None,
        seq_lens: np.ndarray | None = None,
        init_h: np.ndarray | None = None,
        init_c: np.ndarray | None = None,
        p: np.ndarray | None = None,
    ) -> tuple[np.ndarray | None, ...]:
        name, g, nd = self.name, self.gates, len(self.directions)
        out_dt = x.dtype
        dt = np.dtype(np.float32) if out_dt == np.float16 or out_dt.kind == "V" else out_dt
        x = x.astype(dt, copy=False)
        if self.layout == 1 and x.ndim == 3:
            x = x.transpose(1, 0, 2)
            init_h = None if init_h is None else init_h.transpose(1, 0, 2)
            init_c = None if init_c is None else init_c.transpose(1, 0, 2)
        shapes = check_recurrent_inputs(self.attrs, (x, w, r, b, None, init_h, init_c, p))
        steps, batch, isz, hs = shapes.steps, shapes.batch, shapes.input_size, shapes.hidden
        lens = check_sequence_lens(name, seq_lens, batch, steps)
        rts = self._transposed_r(r, dt)
        w = w.astype(dt, copy=False)
        b = None if b is None else b.astype(dt, copy=False)
        p = None if p is None else p.astype(dt, copy=False)

        y = np.zeros((steps, nd, batch, hs), dt)
        y_h = np.empty((nd, batch, hs), dt)
        y_c = np.empty((nd, batch, hs), dt) if self.has_cell else None
        x2 = x.reshape(steps * batch, isz)
        xws = []
        for d in range(nd):
            xw = (x2 @ w[d].T).reshape(steps, batch, g * hs)
            if b is not None:
                xw += b[d, : g * hs]
            xws.append(xw)
        state = (init_h, init_c, b, p, hs, dt)
        if self.paired and lens is None:
            self._both_directions(xws, rts, state, y, y_h, y_c)
        else:
            for d in range(nd):
                self._one_direction(d, xws[d], rts[d], state, lens, y, y_h, y_c)
        if self.layout == 1:
            outs: list[Any] = [
                y.transpose(2, 0, 1, 3),
                y_h.transpose(1, 0, 2),
                None if y_c is None else y_c.transpose(1, 0, 2),
            ]
        else:
            outs = [y, y_h, y_c]
        return tuple(
            None if o is None else o.astype(out_dt, copy=False) for o in outs[: self.n_outputs]
        )

    def _one_direction(
        self,
        d: int,
        xw: np.ndarray,
        rt: np.ndarray,
        state: tuple[Any, ...],
        lens: np.ndarray | None,
        y: np.ndarray,
        y_h: np.ndarray,
        y_c: np.ndarray | None,
    ) -> None:
        """Direction `d`'s time loop, writing its slices of Y, Y_h and Y_c."""
        init_h, init_c, b, p, hs, dt = state
        steps, batch = xw.shape[:2]
        step = self.stepper(d, self.prepare(d, rt, b, p, hs, dt), hs)
        h = np.zeros((batch, hs), dt) if init_h is None else init_h[d].astype(dt)
        c = None
        if self.has_cell:
            c = np.zeros((batch, hs), dt) if init_c is None else init_c[d].astype(dt)
        forward = self.directions[d] == "forward"
        for t in range(steps) if forward else range(steps - 1, -1, -1):
            h_new, c_new = step(xw[t], h, c)
            if lens is not None:
                live = (t < lens)[:, None]
                h_new = np.where(live, h_new, h)
                if c_new is not None and c is not None:
                    c_new = np.where(live, c_new, c)
                y[t, d] = np.where(live, h_new, 0)
            else:
                y[t, d] = h_new
            h, c = h_new, c_new
        y_h[d] = h
        if y_c is not None and c is not None:
            y_c[d] = c

    def _both_directions(
        self,
        xws: list[np.ndarray],
        rts: np.ndarray,
        state: tuple[Any, ...],
        y: np.ndarray,
        y_h: np.ndarray,
        y_c: np.ndarray | None,
    ) -> None:
        """Forward step t and reverse step T-1-t as one batch of two: (2, batch, ...) arrays
        and stacked weights halve the numpy calls of a bidirectional op. Each element's
        arithmetic is its own direction's (a batched matmul multiplies slice by slice)."""
        init_h, init_c, b, p, hs, dt = state
        steps, batch = xws[0].shape[:2]
        pair = self.stepper(0, self.prepare(slice(None), rts, b, p, hs, dt), hs)
        xw_pair = np.stack([xws[0], xws[1][::-1]], axis=1)
        h = np.zeros((2, batch, hs), dt) if init_h is None else init_h.astype(dt)
        c = None
        if self.has_cell:
            c = np.zeros((2, batch, hs), dt) if init_c is None else init_c.astype(dt)
        last = steps - 1
        for t in range(steps):
            h, c = pair(xw_pair[t], h, c)
            y[t, 0] = h[0]
            y[last - t, 1] = h[1]
        y_h[...] = h
        if y_c is not None and c is not None:
            y_c[...] = c

    def _clipper(self) -> Act:
        clip = self.clip
        if clip is None:
            return lambda v: v
        return lambda v: np.clip(v, -clip, clip)


class _RNN(_Recurrent):
    gates = 1

    def stepper(self, d: int, w: dict[str, Any], hs: int) -> Step:
        f = self.acts[d][0]
        clip = self._clipper()
        rt, rb = w["rt"], w["rb"]

        def step(xw: np.ndarray, h: np.ndarray, c: Any) -> tuple[np.ndarray, None]:
            z = xw + h @ rt
            if rb is not None:
                z += rb
            return f(clip(z)), None

        return step


class _GRU(_Recurrent):
    gates = 3

    def __init__(self, node: KernelNode) -> None:
        super().__init__(node)
        self.linear_before_reset = self.attrs.linear_before_reset

    def stepper(self, d: int, w: dict[str, Any], hs: int) -> Step:
        f, g = self.acts[d]
        clip = self._clipper()
        rt, rb = w["rt"], w["rb"]
        rt_zr, rt_h = rt[..., : 2 * hs], rt[..., 2 * hs :]
        rb_zr, rb_h = (None, None) if rb is None else (rb[..., : 2 * hs], rb[..., 2 * hs :])
        linear_before_reset = self.linear_before_reset

        def step(xw: np.ndarray, h: np.ndarray, c: Any) -> tuple[np.ndarray, None]:
            zr = xw[..., : 2 * hs] + h @ rt_zr
            if rb_zr is not None:
                zr += rb_zr
            zr = f(clip(zr))
            z, r = zr[..., :hs], zr[..., hs:]
            if linear_before_reset:
                hr = h @ rt_h
                if rb_h is not None:
                    hr += rb_h
                pre = xw[..., 2 * hs :] + r * hr
            else:
                pre = xw[..., 2 * hs :] + (r * h) @ rt_h
                if rb_h is not None:
                    pre += rb_h
            ht = g(clip(pre))
            return (1 - z) * ht + z * h, None

        return step


class _LSTM(_Recurrent):
    gates = 4
    has_cell = True

    def __init__(self, node: KernelNode) -> None:
        super().__init__(node)
        self.input_forget = self.attrs.input_forget

    def prepare(
        self,
        d: int | slice,
        rt: np.ndarray,
        b: np.ndarray | None,
        p: np.ndarray | None,
        hs: int,
        dt: np.dtype[Any],
    ) -> dict[str, Any]:
        wd = super().prepare(d, rt, b, p, hs, dt)
        if p is not None:
            pd = _direction(p, d)
            wd["pi"], wd["po"], wd["pf"] = pd[..., :hs], pd[..., hs : 2 * hs], pd[..., 2 * hs :]
        return wd

    def stepper(self, d: int, w: dict[str, Any], hs: int) -> Step:
        f, g, hact = self.acts[d]
        clip = self._clipper()
        rt, rb = w["rt"], w["rb"]
        input_forget = self.input_forget
        h2, h3 = 2 * hs, 3 * hs
        if "pi" not in w:

            def step(xw: np.ndarray, h: np.ndarray, c: Any) -> tuple[np.ndarray, np.ndarray]:
                z = xw + h @ rt
                if rb is not None:
                    z += rb
                ifo = f(clip(z[..., :h3]))  # no peepholes: the i, o, f gates in one call
                i = ifo[..., :hs]
                fg = 1 - i if input_forget else ifo[..., h2:]
                c_new = fg * c + i * g(clip(z[..., h3:]))
                return ifo[..., hs:h2] * hact(c_new), c_new

            return step
        pi, po, pf = w["pi"], w["po"], w["pf"]

        def peephole_step(xw: np.ndarray, h: np.ndarray, c: Any) -> tuple[np.ndarray, np.ndarray]:
            z = xw + h @ rt
            if rb is not None:
                z += rb
            zi, zo, zf, zc = z[..., :hs], z[..., hs:h2], z[..., h2:h3], z[..., h3:]
            zi = zi + pi * c
            zf = zf + pf * c
            i = f(clip(zi))
            fg = 1 - i if input_forget else f(clip(zf))
            c_new = fg * c + i * g(clip(zc))
            zo = zo + po * c_new
            o = f(clip(zo))
            return o * hact(c_new), c_new

        return peephole_step


def _factory(cls: type[_Recurrent]) -> Callable[[KernelNode], KernelFn]:
    def factory(node: KernelNode) -> KernelFn:
        return cls(node)

    factory.__name__ = cls.__name__.lstrip("_").lower()
    factory.__doc__ = f"{cls.__name__.lstrip('_')} kernel (see the module docstring)."
    return factory


rnn = cpu_kernel("RNN", since=1)(_factory(_RNN))
gru = cpu_kernel("GRU", since=1)(_factory(_GRU))
lstm = cpu_kernel("LSTM", since=1)(_factory(_LSTM))
