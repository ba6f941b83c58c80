"""The epilogue of FusedGemm and Conv/FusedConv: `y = act(alpha * y + bias + beta * full)` in place.

BLAS (or the convolution loop) leaves its product in `y`, viewed as (batch, rows, cols); one
parallel pass then adds a per-row bias (Conv's per channel), a per-column bias (Gemm's C row),
and/or a full tensor (FusedConv's residual Z, a full Gemm C), and applies the fused activation,
instead of numpy's pass per operation (and numpy's float64 erf for Gelu). Each combination is
generated as its own small kernel, so the inner loop has no branches and vectorizes; the set of
activations is `turnout.sdk.semantics.activations`'s table. Arithmetic
stays in the tensor's dtype, as in the CPU kernels.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import types

from turnout.sdk.semantics.activations import ACTIVATION_DEFAULTS

from .. import cache
from ..codegen import numba_array
from ..registry import SizedKernel
from ..vecmath import MARK, contracts, horner, mlas_logistic_f32, mlas_tanh_f32

__all__ = ["ACTIVATIONS", "CTOR", "Epilogue", "activation_lines", "band_epilogue_fields"]

# activation name -> the statement computing v from v (T is the dtype's constructor, a0 and a1
# the parameters). Names and parameter defaults are `turnout.sdk.semantics.ACTIVATION_DEFAULTS`.
ACTIVATIONS: dict[str, str] = {
    "": "",
    "Identity": "",
    # comparisons are written so that NaN passes through, as numpy's maximum/clip do
    "Relu": "v = zero if v < zero else v",
    "LeakyRelu": "v = v * a0 if v < zero else v",
    "Sigmoid": "e = np.exp(-abs(v))\nv = one / (one + e) if v >= zero else e / (one + e)",
    "Tanh": "v = np.tanh(v)",
    "HardSigmoid": "v = v * a0 + a1\nv = zero if v < zero else v\nv = one if v > one else v",
    "Clip": "v = a0 if v < a0 else v\nv = a1 if v > a1 else v",
    "Gelu": "v = T(0.5) * v * (one + math.erf(v * T(0.7071067811865476)))",
    "GeluTanh": (
        "v = T(0.5) * v * (one + np.tanh(T(0.7978845608028654) * (v + T(0.044715) * v * v * v)))"
    ),
    "HardSwish": (
        "h_ = v * a0 + a1\nh_ = zero if h_ < zero else h_\nh_ = one if h_ > one else h_\nv = v * h_"
    ),
    "Swish": (
        "u_ = a0 * v\ne = np.exp(-abs(u_))\n"
        "v = v * (one / (one + e) if u_ >= zero else e / (one + e))"
    ),
}
assert ACTIVATIONS.keys() == ACTIVATION_DEFAULTS.keys()

CTOR = {"float32": "np.float32", "float64": "np.float64"}
"""The scalar constructor a generated kernel names `T`, per dtype."""

# float32 Gelu: libm's erf is a scalar call LLVM cannot vectorize (and was 40% of the GEMM's time
# in BERT's FFN), so float32 uses erf(u) ~ u * P(u^2) / Q(u^2) on |u| <= 3.925 (1 beyond, to
# float32 precision); the coefficients are a relative-error least-squares fit made for turnout.
# Measured: erf relative error <= 4e-7 in float32; Gelu absolute error <= 1.3e-6 over
# [-5.6, 5.6], relative <= 5e-4 where |Gelu| > 1e-3 and <= 3e-5 where |Gelu| > 1e-2 (the
# negative tail, where 1 + erf cancels, is the worst).
_ERF_P = (1.1283791065216064, 0.18676960468292236, 0.05232268571853638, 0.003625008277595043,
          0.0002844160480890423, 2.1133671452844283e-06)  # fmt: skip
_ERF_Q = (1.0, 0.49885329604148865, 0.1126558929681778, 0.014685029163956642,
          0.001133485697209835, 3.872278830385767e-05)  # fmt: skip


_GELU_F32 = (
    f"{MARK}\n"
    "u = v * T(0.7071067811865476)\n"
    "u = T(-3.925) if u < T(-3.925) else u\n"
    "u = T(3.925) if u > T(3.925) else u\n"
    "s = u * u\n"
    f"e = u * {horner(_ERF_P, 's')} / {horner(_ERF_Q, 's')}\n"
    "e = one if e > one else e\n"
    "e = -one if e < -one else e\n"
    "v = T(0.5) * v * (one + e)"
)


# float32 activations that call exp, erf or tanh: vectorizable statements instead (`vecmath`);
# Sigmoid, Swish and Tanh are onnxruntime's MLAS functions, bit for bit (`semantics.activations`)
_F32 = {
    "Gelu": _GELU_F32,
    "Sigmoid": "\n".join(mlas_logistic_f32("v", "v")),
    "Swish": "\n".join(["u_ = a0 * v", *mlas_logistic_f32("u_", "s_"), "v = v * s_"]),
    "Tanh": "\n".join(mlas_tanh_f32("v", "v")),
}


def activation_lines(dtype: np.dtype[Any], act: str, indent: int) -> str:
    """The statements applying `act` to `v`, indented for a generated loop body. They use the
    names `T`, `zero`, `one`, `a0` and `a1`, which the kernel defines."""
    body = _F32[act] if act in _F32 and dtype == np.float32 else ACTIVATIONS[act]
    return "".join(f"{' ' * indent}{line}\n" for line in body.splitlines())


def band_epilogue_fields(
    dtype: np.dtype[Any],
    act: str,
    bias: bool,
    full_row: str | None,
    indents: tuple[int, int, int],
) -> dict[str, str]:
    """The format fields of the epilogue loop a conv band kernel writes after its products
    (`conv_bands`, `conv_shift`): `bias` reads the channel's `rv = bias[j]`, `full` the
    residual's row `fr = <full_row>` (None: no residual), `terms` adds them to `v`, and `act`
    applies the activation; `indents` are those of the bias line, the residual line and the
    activation lines."""
    at_bias, at_full, at_act = indents
    return {
        "bias": f"{' ' * at_bias}rv = bias[j]\n" if bias else "",
        "full": f"{' ' * at_full}fr = {full_row}\n" if full_row else "",
        "terms": (" + rv" if bias else "") + (" + fr[k]" if full_row else ""),
        "act": activation_lines(dtype, act, at_act),
    }


def _source(dtype: np.dtype[Any], act: str, scale: bool, row: bool, col: bool, full: bool) -> str:
    """The kernel text for one combination; absent terms are simply not written."""
    terms = ["yr[k]" + (" * alpha_" if scale else "")]
    if row:
        terms.append("rv")
    if col:
        terms.append("cb[k] * beta_")
    if full:
        terms.append("fr[k] * beta_")
    act_lines = activation_lines(dtype, act, 12)
    return (
        "def _epilogue(y, row, col, full, alpha, beta, p0, p1, c0, c1):\n"
        f"    T = {CTOR[dtype.name]}\n"
        "    zero = T(0)\n    one = T(1)\n"
        "    alpha_ = T(alpha)\n    beta_ = T(beta)\n    a0 = T(p0)\n    a1 = T(p1)\n"
        "    b_, r_, n_ = y.shape\n"
        # the band as slices, indexed from 0: a loop from c0 would have numba check each index
        # for wraparound, which keeps LLVM from vectorizing it (10x slower)
        + ("    cb = col[c0:c1]\n" if col else "")
        + "    for q in prange(b_ * r_):\n"
        "        i = q // r_\n        j = q - i * r_\n"
        "        yr = y[i, j, c0:c1]\n"
        + ("        rv = row[j]\n" if row else "")
        + ("        fr = full[i, j, c0:c1]\n" if full else "")
        + "        for k in range(c1 - c0):\n"
        f"            v = {' + '.join(terms)}\n" + act_lines + "            yr[k] = v\n"
    )


class Epilogue:
    """One compiled epilogue: dtype, activation and which terms are present are fixed."""

    def __init__(
        self,
        dtype: np.dtype[Any],
        activation: tuple[str, float, float],
        parallel: bool,
        *,
        scale: bool = False,
        row: bool = False,
        col: bool = False,
        full: bool = False,
    ) -> None:
        self.dtype = dtype
        self.activation = activation
        self.noop = not (scale or row or col or full) and activation[0] in ("", "Identity")
        self._kern: Any = None
        if self.noop:
            return
        text = _source(dtype, activation[0], scale, row, col, full)
        fn = cache.load_source(text, "epilogue")._epilogue
        vec = numba_array(dtype, 1, readonly=True, layout="C")
        sig = types.void(
            numba_array(dtype, 3, readonly=False, layout="C"),
            vec,
            vec,
            numba_array(dtype, 3, readonly=True, layout="C"),
            *[types.float64] * 4,
            types.int64,
            types.int64,
        )
        self._kern = SizedKernel(fn, [sig], parallel, contract=contracts(text))
        self._vec = np.zeros(1, dtype)
        self._full = np.zeros((1, 1, 1), dtype)
        # one call of each variant now: a compiled function's first call is slow (~ms), and
        # it belongs to session creation, not to the first run
        for variant in {self._kern.serial, self._kern.parallel}:
            variant(
                np.zeros((1, 1, 1), dtype), self._vec, self._vec, self._full, 1.0, 1.0, 0, 0, 0, 1
            )

    def __call__(
        self,
        y3: np.ndarray[Any, Any],
        row: np.ndarray[Any, Any] | None = None,
        col: np.ndarray[Any, Any] | None = None,
        full: np.ndarray[Any, Any] | None = None,
        alpha: float = 1.0,
        beta: float = 1.0,
        *,
        band: tuple[int, int] | None = None,
    ) -> None:
        """Apply in place to the C-contiguous (batch, rows, cols) `y3`; `row` has `rows`
        entries, `col` has `cols`, `full` is y3's shape (all C-contiguous, y3's dtype).
        `band` (a, b): only columns a to b of every row, so that a kernel writing its output
        in column bands applies the epilogue to each band while it is still in cache."""
        if self.noop or y3.size == 0:
            return
        _, p0, p1 = self.activation
        a, b = band if band is not None else (0, y3.shape[2])
        self._kern(
            y3.shape[0] * y3.shape[1] * (b - a),
            y3,
            self._vec if row is None else row,
            self._vec if col is None else col,
            self._full if full is None else full,
            alpha,
            beta,
            p0,
            p1,
            a,
            b,
        )
