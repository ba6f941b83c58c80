"""float32 exp, sigmoid and tanh as generated statements that LLVM vectorizes.

numba with pip's llvmlite has no vector math library: `np.exp`/`np.tanh` in a loop are scalar
libm calls (~2-25 ns each) that keep the loop from vectorizing. The generated kernels (fused
groups, the Conv/Gemm epilogue, the recurrent cells) write these statements into their loop
bodies instead: plain arithmetic, integer bit assembly and selects, no calls, no branches.
float64 kernels keep numpy's functions.

Two kinds:
- onnxruntime's own float32 sigmoid and tanh (`mlas_logistic_f32`, `mlas_tanh_f32`): MLAS's
  rational functions, whose Horner steps are FMAs here as in its x86-64 FMA3 kernels, so that
  the Sigmoid and Tanh ops (and the fused Sigmoid, Swish and Tanh activations) give
  onnxruntime's float32 results bit for bit (`turnout.sdk.semantics.mlas_logistic`/`mlas_tanh`;
  within ~2e-7 and ~3e-7 of the exact functions, absolute);
- turnout's own (`exp_f32`, `sigmoid_f32`, `tanh_f32`), for Exp, the float16/bfloat16 Sigmoid
  and Tanh (which compute in float32 and keep these) and the recurrent cells. Accuracy
  (float32; exp checked on all 2^32 inputs when written, and on a dense sample plus every value
  of the edge ranges by tests/test_numba_vecmath.py): exp within 1 ulp of the correctly rounded
  result, NaN and +-inf as np.exp, denormal results included; sigmoid within 4 ulp (relative)
  everywhere; tanh within 3.6e-7 relative (the rational fit below).
"""

from __future__ import annotations

from collections.abc import Sequence

from turnout.sdk.semantics import MLAS_LOGISTIC, MLAS_TANH, MlasRational

__all__ = [
    "MARK",
    "TANH_P",
    "TANH_Q",
    "contracts",
    "exp_f32",
    "horner",
    "mlas_logistic_f32",
    "mlas_tanh_f32",
    "sigmoid_f32",
    "tanh_f32",
]

MARK = "# vecmath: contract"
"""The first statement of every expansion here (a comment): a kernel whose text holds it is
compiled with fast-math `contract` (`cache.jit`), so that its polynomials' multiply-adds become
FMAs: the vectorized sigmoid went from 1.1 to 0.8 ns an element, and MLAS's sigmoid and tanh
need them to be onnxruntime's to the bit (tested against `turnout.sdk.semantics.mlas_logistic`).
Kernels without it keep numpy's two roundings bit for bit."""


def contracts(text: str) -> bool:
    """Whether a kernel's text evaluates a `vecmath` expansion (see `MARK`)."""
    return MARK in text


# exp(r) = 1 + r + r^2 * q(r) on |r| <= ln2 / 2: q's coefficients are a relative-error
# least-squares fit made for turnout (float64, Lawson reweighting toward minimax; 5e-11
# relative), rounded to float32.
_EXP_Q = (0.5, 0.1666666567325592, 0.04166629537940025, 0.008333496749401093,
          0.0013944648671895266, 0.00019790352962445468)  # fmt: skip
_LN2_HI = 0.693359375  # 9 significant bits: n * _LN2_HI is exact for |n| <= 2^15
_LN2_LO = -0.00021219444170128554  # ln 2 - _LN2_HI, to float32

# tanh(u) ~ u * P(u^2) / Q(u^2) on |u| <= 9 (tanh(9) is 1 in float32), a relative-error
# least-squares fit made for turnout (float64 fit, Lawson reweighting toward minimax). In float32,
# checked on 4.4M points over [-10, 10] and down to 1e-30: error <= 3.6e-7 relative (~3 ulp).
TANH_P = (0.9999999990694393, 0.13680826800323728, 0.003869470509243116,
          2.8030605195678932e-05, 3.0641370908710785e-08, -1.2246189783180394e-11)  # fmt: skip
TANH_Q = (1.0, 0.4701415898999324, 0.027250019860477145, 0.00039406482341725356,
          1.2889917019588791e-06)  # fmt: skip

_F = "np.float32"


def horner(coeffs: Sequence[float], var: str, ctor: str = "T") -> str:
    """The polynomial sum(coeffs[k] * var**k) in Horner form, constants wrapped in `ctor`."""
    expr = f"{ctor}({coeffs[-1]!r})"
    for c in reversed(coeffs[:-1]):
        expr = f"({expr} * {var} + {ctor}({c!r}))"
    return expr


def exp_f32(x: str, out: str) -> list[str]:
    """Statements leaving exp(x) in `out` (x a float32 name; temporaries are named `out_*`).

    exp(x) = 2^n * exp(r), n = rint(x / ln 2), r = x - n ln 2 (two-part ln 2, exact first
    product). 2^n is assembled from exponent bits in two halves, so that results down to the
    denormals take a single rounding. x is clamped to [-104, 89] first (exp is 0 or inf in float32
    beyond; the clamp keeps the float-to-int conversion defined); a NaN x is passed through."""
    t = f"{out}_"
    return [
        MARK,
        f"{t}c = {x} if {x} < {_F}(89.0) else {_F}(89.0)",
        f"{t}c = {t}c if {t}c > {_F}(-104.0) else {_F}(-104.0)",
        # rint by the 1.5 * 2^23 shift (exact for |x| < 2^22; no fast-math, so LLVM keeps the
        # add and the subtract): np.rint vectorized worse, 1.10 against 0.91 ns a sigmoid
        f"{t}n = ({t}c * {_F}(1.4426950408889634) + {_F}(12582912.0)) - {_F}(12582912.0)",
        f"{t}r = {t}c - {t}n * {_F}({_LN2_HI!r}) - {t}n * {_F}({_LN2_LO!r})",
        f"{t}p = {horner(_EXP_Q, f'{t}r', _F)} * ({t}r * {t}r) + {t}r + {_F}(1.0)",
        f"{t}i = np.int32({t}n)",
        f"{t}h = {t}i >> 1",
        f"{t}p = {t}p * np.int32(({t}h + 127) << 23).view(np.float32)",
        f"{t}p = {t}p * np.int32(({t}i - {t}h + 127) << 23).view(np.float32)",
        f"{out} = {t}p if {x} == {x} else {x}",
    ]


def sigmoid_f32(x: str, out: str) -> list[str]:
    """Statements leaving 1 / (1 + exp(-x)) in `out`, from e = exp(-|x|) (never overflows):
    1 / (1 + e) for x >= 0, e * (1 / (1 + e)) below (relative accuracy in both tails); NaN
    stays."""
    e, d = f"{out}_e", f"{out}_d"
    return [
        f"{out}_a = -abs({x})",
        *exp_f32(f"{out}_a", e),
        f"{d} = {_F}(1.0) / ({_F}(1.0) + {e})",  # one division for both signs
        f"{out} = {d} if {x} >= 0 else {e} * {d}",
    ]


def tanh_f32(x: str, out: str) -> list[str]:
    """Statements leaving tanh(x) in `out`: the rational fit on the clamped argument; a NaN x
    gives NaN (comparisons with NaN are false, so the clamps pass it through)."""
    u, s = f"{out}_u", f"{out}_s"
    return [
        MARK,
        f"{u} = {_F}(-9.0) if {x} < {_F}(-9.0) else {x}",
        f"{u} = {_F}(9.0) if {u} > {_F}(9.0) else {u}",
        f"{s} = {u} * {u}",
        f"{out} = {u} * {horner(TANH_P, s, _F)} / {horner(TANH_Q, s, _F)}",
        f"{out} = {_F}(1.0) if {out} > {_F}(1.0) else {out}",
        f"{out} = {_F}(-1.0) if {out} < {_F}(-1.0) else {out}",
        # exactly +-1 from |x| >= 9 (tanh(9) rounds to 1): with FMAs the fit gives 1 - 2^-24
        f"{out} = {_F}(1.0) if {u} >= {_F}(9.0) else {out}",
        f"{out} = {_F}(-1.0) if {u} <= {_F}(-9.0) else {out}",
    ]


def _mlas_rational(x: str, out: str, r: MlasRational) -> list[str]:
    """Statements leaving MLAS's (p(u^2) * u) / q(u^2) in `out`, u = x clamped to
    [-bound, bound]: each Horner step `acc * s + c` is one FMA under `contract` (`MARK`); the
    other products, the division and the clamps are not contracted into anything. A NaN x
    passes both clamps (a comparison with NaN is false), as through MLAS's max and min."""
    u, s = f"{out}_u", f"{out}_s"
    hi, lo = f"{_F}({r.bound!r})", f"{_F}({-r.bound!r})"
    return [
        MARK,
        f"{u} = {hi} if {x} > {hi} else {x}",
        f"{u} = {lo} if {u} < {lo} else {u}",
        f"{s} = {u} * {u}",
        f"{out} = {horner(r.p[::-1], s, _F)} * {u} / {horner(r.q[::-1], s, _F)}",
    ]


def mlas_logistic_f32(x: str, out: str) -> list[str]:
    """Statements leaving onnxruntime's float32 sigmoid of `x` in `out` (MLAS: the rational
    function + 0.5, then at least 0; NaN stays NaN)."""
    return [
        *_mlas_rational(x, out, MLAS_LOGISTIC),
        f"{out} = {out} + {_F}(0.5)",
        f"{out} = {_F}(0.0) if {out} < {_F}(0.0) else {out}",
    ]


def mlas_tanh_f32(x: str, out: str) -> list[str]:
    """Statements leaving onnxruntime's float32 tanh of `x` in `out` (MLAS's rational
    function; NaN stays NaN)."""
    return _mlas_rational(x, out, MLAS_TANH)
