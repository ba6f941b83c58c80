"""Numeric building blocks of the reference activations, exact to the dtype they are given.

numpy has no erf and no overflow-free sigmoid; these are the ones the CPU provider's kernels and
`turnout.sdk.semantics.activations` compute with, and the reference a compiled provider's
activations are tested against.

`mlas_logistic` and `mlas_tanh` are instead onnxruntime's approximations, bit for bit, for the
kernels whose outputs a quantized model rounds again downstream (DynamicQuantizeLSTM rounds each
step's hidden state to uint8, a DynamicQuantizeLinear after a Sigmoid rounds its output, so a
last-bit difference flips a code): `sigmoid` and `tanh`, the Sigmoid and Tanh ops' functions,
are they in float32. `MLAS_LOGISTIC` and `MLAS_TANH` hold their coefficients, for a compiled
provider's version of them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

__all__ = [
    "MLAS_LOGISTIC",
    "MLAS_TANH",
    "MlasRational",
    "erf",
    "expm1",
    "gelu_erf",
    "logistic",
    "mlas_logistic",
    "mlas_tanh",
    "sigmoid",
    "tanh",
    "typed_constants",
]

Array = np.ndarray[Any, Any]

# erf: numpy has none, so W. J. Cody's rational approximations (double precision, as in
# netlib's CALERF), evaluated on whole arrays and selected per interval.

_ERF_A = (3.16112374387056560e00, 1.13864154151050156e02, 3.77485237685302021e02,
          3.20937758913846947e03, 1.85777706184603153e-1)  # fmt: skip
_ERF_B = (2.36012909523441209e01, 2.44024637934444173e02, 1.28261652607737228e03,
          2.84423683343917062e03)  # fmt: skip
_ERF_C = (5.64188496988670089e-1, 8.88314979438837594e00, 6.61191906371416295e01,
          2.98635138197400131e02, 8.81952221241769090e02, 1.71204761263407058e03,
          2.05107837782607147e03, 1.23033935479799725e03, 2.15311535474403846e-8)  # fmt: skip
_ERF_D = (1.57449261107098347e01, 1.17693950891312499e02, 5.37181101862009858e02,
          1.62138957456669019e03, 3.29079923573345963e03, 4.36261909014324716e03,
          3.43936767414372164e03, 1.23033935480374942e03)  # fmt: skip
_ERF_P = (3.05326634961232344e-1, 3.60344899949804439e-1, 1.25781726111229246e-1,
          1.60837851487422766e-2, 6.58749161529837803e-4, 1.63153871373020978e-2)  # fmt: skip
_ERF_Q = (2.56852019228982242e00, 1.87295284992346047e00, 5.27905102951428412e-1,
          6.05183413124413191e-2, 2.33520497626869185e-3)  # fmt: skip
_RSQRTPI = 0.5641895835477562869480794515607725858440


def _erf64(x: Array) -> Array:
    """erf in float64 (relative error ~1e-16), NaN-preserving."""
    y = np.abs(x)
    # |x| <= 0.46875: erf directly.
    z = np.minimum(y, 0.46875) ** 2
    num, den = _ERF_A[4] * z, z
    for i in range(3):
        num = (num + _ERF_A[i]) * z
        den = (den + _ERF_B[i]) * z
    small = x * (num + _ERF_A[3]) / (den + _ERF_B[3])
    # 0.46875 < |x| <= 4: scaled erfc.
    t = np.clip(y, 0.46875, 4.0)
    num, den = _ERF_C[8] * t, t
    for i in range(7):
        num = (num + _ERF_C[i]) * t
        den = (den + _ERF_D[i]) * t
    mid = (num + _ERF_C[7]) / (den + _ERF_D[7])
    # |x| > 4: asymptotic scaled erfc (erf is 1 to double precision beyond ~6).
    u = np.clip(y, 4.0, 8.0)
    s = 1.0 / (u * u)
    num, den = _ERF_P[5] * s, s
    for i in range(4):
        num = (num + _ERF_P[i]) * s
        den = (den + _ERF_Q[i]) * s
    big = (_RSQRTPI - s * (num + _ERF_P[4]) / (den + _ERF_Q[4])) / u
    scaled = np.where(y <= 4.0, mid, big)
    # erfc = exp(-y^2) * scaled, with y^2 split for accuracy as Cody does.
    yc = np.minimum(y, 8.0)
    ysq = np.trunc(yc * 16.0) / 16.0
    erfc = np.exp(-ysq * ysq) * np.exp(-(yc - ysq) * (yc + ysq)) * scaled
    large = np.copysign(1.0 - erfc, x)
    return np.where(y <= 0.46875, small, np.where(np.isnan(x), x, large))


def erf(x: Array) -> Array:
    """Element-wise erf keeping `x`'s dtype (used by Erf and Gelu)."""
    return np.asarray(_erf64(x.astype(np.float64)).astype(x.dtype, copy=False))


def expm1(x: Array) -> Array:
    """exp(x) - 1 keeping `x`'s dtype, the same on every machine: narrower floats computed in
    float64 and rounded once. numpy's own float32 expm1 is SVML's on AVX-512 machines (1 ulp
    off at -3.0) and libm's elsewhere; providers computing in double agree with this bit for
    bit (Selu, `activations.selu_scales`)."""
    if x.dtype == np.float64:
        return np.expm1(x)
    return np.asarray(np.expm1(x.astype(np.float64)).astype(x.dtype, copy=False))


# erfc(z), z >= 0, as t * exp(P(t) - z^2) with t = 1 / (1 + z / 2): one formula over the whole
# range, where Cody's erf takes three branches, each evaluated on every element. P is a degree-10
# polynomial in t fitted for turnout: least squares of log(erfc(z) / t) + z^2 against
# math.erfc on 200,001 points of [0, 10], reweighted towards the largest errors. Relative error
# of erfc <= 5.8e-9 there (float32's half-ulp is 3e-8); beyond 10, erfc < 2e-45 underflows
# float32. Lowest degree first.
_ERFC_T = (-1.2655730443489026, 1.0016936137452161, 0.3545342269805497, 0.22486586827951846,
           -0.7055877478419158, 1.6444986499661596, -3.5038598995610974, 4.1764227061698636,
           -2.740630364579284, 0.9518589062190203, -0.13822290927715292)  # fmt: skip
_GELU_CHUNK = 1 << 14
"""Elements per float64 block of `gelu_erf` (128 KB): each of its ~35 passes stays in cache."""


def gelu_erf(x: Array) -> Array:
    """Gelu with the exact normal CDF: x * Phi(x) = x / 2 * erfc(-x / sqrt(2)).

    float64 (and non-float) inputs take Cody's erf. Narrower floats are computed in float64
    blocks from the one-formula erfc above, which keeps the negative tail's relative accuracy
    (1 + erf(x) cancels there; erfc(|x| / sqrt 2) does not) at ~12x the speed (BERT's FFN,
    128 x 3072 float32: 69 -> ~5 ms)."""
    if x.dtype.kind != "f" or x.dtype.itemsize >= 8 or x.ndim == 0 or x.size == 0:
        t = x.dtype.type
        return np.asarray(t(0.5) * x * (t(1) + erf(x * t(np.sqrt(0.5)))))
    flat = np.ascontiguousarray(x).reshape(-1)
    out: Array = np.empty(x.shape, x.dtype)
    dest = out.reshape(-1)
    n = min(flat.size, _GELU_CHUNK)
    xb, z, t, p = (np.empty(n) for _ in range(4))
    for lo in range(0, flat.size, n):
        hi = min(flat.size, lo + n)
        k = hi - lo
        xs, zs, ts, ps = xb[:k], z[:k], t[:k], p[:k]
        np.copyto(xs, flat[lo:hi])
        np.abs(xs, out=zs)
        np.multiply(zs, np.sqrt(0.5), out=zs)  # z = |x| / sqrt 2
        np.multiply(zs, 0.5, out=ts)
        np.add(ts, 1.0, out=ts)
        np.reciprocal(ts, out=ts)  # t = 1 / (1 + z / 2)
        ps.fill(_ERFC_T[-1])
        for c in _ERFC_T[-2::-1]:
            np.multiply(ps, ts, out=ps)
            np.add(ps, c, out=ps)
        np.multiply(zs, zs, out=zs)
        np.subtract(ps, zs, out=ps)
        np.exp(ps, out=ps)
        np.multiply(ps, ts, out=ps)  # erfc(|x| / sqrt 2)
        np.subtract(2.0, ps, out=ps, where=xs > 0)  # erfc(-x / sqrt 2) = 2 Phi(x)
        np.multiply(ps, xs, out=ps)
        np.multiply(ps, 0.5, out=dest[lo:hi], casting="same_kind")
    return out


def typed_constants(*values: float) -> Callable[[np.dtype[Any]], tuple[Array, ...]]:
    """`get(dtype)`: `values` as read-only 0-d arrays of that dtype, made once per dtype.

    numpy resolves a 0-d array operand ~250 ns faster than a scalar (of any kind) in a ufunc
    call; the values are `dtype.type(v)`, so results do not change.
    """
    made: dict[np.dtype[Any], tuple[Array, ...]] = {}

    def get(dt: np.dtype[Any]) -> tuple[Array, ...]:
        found = made.get(dt)
        if found is None:
            found = tuple(np.asarray(dt.type(v)) for v in values)
            for a in found:
                a.flags.writeable = False
            made[dt] = found
        return found

    return get


_ZERO_ONE = typed_constants(0, 1)
_SIGNED = {2: np.int16, 4: np.int32, 8: np.int64}
_SIGN_BIT = {n: t(-1) << (8 * n - 1) for n, t in _SIGNED.items()}  # as a signed integer
_BLEND_ABOVE = 4096  # elements: where np.where's per-element branch costs more than 3 passes


def logistic(x: Array) -> Array:
    """Numerically stable sigmoid: 1 / (1 + e) where x >= 0, else e / (1 + e), e = exp(-|x|).

    exp only ever sees non-positive arguments. Shared by Sigmoid, Swish, the fused ops' and
    the recurrent ops' activations. The values are those of the `np.where` form, in fewer
    passes: -|x| is x with its sign bit set, the numerator (1 or e) is chosen before the one
    division, with scalars of x's type (a Python scalar costs numpy ~1 us of type resolution
    per call). On large inputs the numerator is chosen by x's sign bit with integer ops, as
    np.where costs ~3.5 ns an element on a mixed-sign mask; at -0.0, where the sign bit and
    `x >= 0` disagree, both numerators give 0.5.
    """
    signed = _SIGNED.get(x.dtype.itemsize)
    if x.ndim == 0 or signed is None:  # (a 0-d input's ufunc results are scalars: no `out=`)
        one = x.dtype.type(1)
        e0 = np.exp(-np.abs(x))
        return np.asarray(np.where(x >= 0, one / (one + e0), e0 / (one + e0)))
    zero, one = _ZERO_ONE(x.dtype)
    xi = x.view(signed)
    e = np.bitwise_or(xi, _SIGN_BIT[x.dtype.itemsize]).view(x.dtype)  # -|x|
    np.exp(e, out=e)
    d: Array = np.add(e, one)
    if x.size <= _BLEND_ABOVE:
        np.copyto(e, one, where=np.greater_equal(x, zero))
        np.divide(e, d, out=d)
        return d
    sign = np.right_shift(xi, 8 * x.dtype.itemsize - 1)  # -1 where x's sign bit is set, else 0
    ei, one_bits = e.view(signed), one.view(signed)
    np.bitwise_xor(ei, one_bits, out=ei)
    np.bitwise_and(ei, sign, out=ei)
    np.bitwise_xor(ei, one_bits, out=ei)  # e where the sign bit is set, else 1
    np.divide(e, d, out=d)
    return d


# onnxruntime's MLAS approximations (Eigen's coefficients), as its x86-64 kernels with FMA3
# compute them (LogisticKernelFma3, and the tanh of onnxruntime 1.32): p(x^2) * x / q(x^2),
# each polynomial by Horner's rule with fused multiply-adds, everything else in float32.
class MlasRational(NamedTuple):
    """One of MLAS's rational approximations: x clamped to [-bound, bound], x2 = x * x, then
    (p(x2) * x) / q(x2). The coefficients are float32 values, highest power first; each Horner
    step, acc * x2 + c, is one float32 fused multiply-add (the first is x2 * p[0] + p[1])."""

    bound: float
    p: tuple[float, ...]
    q: tuple[float, ...]


def _f32_values(coefs: tuple[float, ...]) -> tuple[float, ...]:
    return tuple(float(np.float32(c)) for c in coefs)


MLAS_LOGISTIC = MlasRational(
    18.0,
    _f32_values((4.37031012579801e-11, 1.15627324459942e-07, 6.08574864600143e-05,
                 8.51377133304701e-03, 2.48287947061529e-01)),
    _f32_values((6.10247389755681e-13, 5.76102136993427e-09, 6.29106785017040e-06,
                 1.70198817374094e-03, 1.16817656904453e-01, 9.93151921023180e-01)),
)  # fmt: skip
"""`mlas_logistic`'s rational part: the sigmoid is that + 0.5, then at least 0."""

MLAS_TANH = MlasRational(
    9.0,
    _f32_values((-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11,
                 5.12229709037114e-08, 1.48572235717979e-05, 6.37261928875436e-04,
                 4.89352455891786e-03)),
    _f32_values((1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03,
                 4.89352518554385e-03)),
)  # fmt: skip
"""`mlas_tanh`: the rational function itself."""

_MLAS_BLOCK = 32768
"""Elements a block: its float64 temporaries stay in cache (a sigmoid over 408,000 floats took
5.1 ms in whole-array passes, 1.75 ms in blocks)."""


def _fma_horner(x2: Array, coefs: tuple[float, ...], t: Array, acc: Array) -> None:
    """acc = coefs[0] * x2**n + ... + coefs[n] by Horner's rule, each step a float32 fused
    multiply-add: the product of two float32 values is exact in float64, so the float64 sum
    rounded to float32 is the fma's one rounding (a double rounding, one draw in about 2**29,
    aside). `x2` is a float64 array holding float32 values, `t` a float64 scratch array of its
    size, `acc` the float32 result."""
    np.multiply(x2, coefs[0], out=t)
    np.add(t, coefs[1], out=t)
    for c in coefs[2:]:
        acc[...] = t  # the fma's rounding
        t[...] = acc  # back to float64, exactly
        np.multiply(t, x2, out=t)
        np.add(t, c, out=t)
    acc[...] = t


def _mlas_rational(x: Array, r: MlasRational) -> Array:
    """(p(x2) * x) / q(x2) of float32 `x` clamped to [-bound, bound]: a new float32 array of
    x's shape, computed in blocks of `_MLAS_BLOCK`."""
    x = np.asarray(x, np.float32)
    out = np.empty(x.shape, np.float32)
    src, dst = x.reshape(-1), out.reshape(-1)
    n = src.size
    b = max(1, min(n, _MLAS_BLOCK))
    v, num, den = np.empty((3, b), np.float32)
    x2, t = np.empty((2, b), np.float64)
    lo, hi = np.float32(-r.bound), np.float32(r.bound)
    for i in range(0, n, b):
        m = min(b, n - i)
        vb, nb, db, x2b, tb = v[:m], num[:m], den[:m], x2[:m], t[:m]
        np.maximum(src[i : i + m], lo, out=vb)  # NaN passes both clamps, as in MLAS
        np.minimum(vb, hi, out=vb)
        np.multiply(vb, vb, out=nb)
        x2b[...] = nb
        _fma_horner(x2b, r.p, tb, nb)
        np.multiply(nb, vb, out=nb)
        _fma_horner(x2b, r.q, tb, db)
        np.divide(nb, db, out=dst[i : i + m])
    return out


def mlas_logistic(x: Array) -> Array:
    """onnxruntime's sigmoid of float32 `x` (MlasComputeLogistic on x86-64 with FMA3, what its
    float32 Sigmoid, its fused Sigmoid activations and its LSTM/GRU gates compute): x clamped
    to [-18, 18], p(x^2) * x / q(x^2) + 0.5 (`MLAS_LOGISTIC`), then at least 0. Within about
    2e-7 of the exact sigmoid (absolute: the tails below e^-18 are not resolved). NaN stays NaN,
    its payload kept."""
    out = _mlas_rational(x, MLAS_LOGISTIC)
    np.add(out, np.float32(0.5), out=out)
    np.maximum(out, np.float32(0), out=out)
    return out


def mlas_tanh(x: Array) -> Array:
    """onnxruntime's tanh of float32 `x` (MlasComputeTanh on x86-64 with FMA3, as in
    onnxruntime 1.32): x clamped to [-9, 9], p(x^2) * x / q(x^2) (`MLAS_TANH`). Within about
    3e-7 of tanh."""
    return _mlas_rational(x, MLAS_TANH)


def sigmoid(x: Array) -> Array:
    """The Sigmoid op's function, and that of the activations built on it (Swish, QuickGelu,
    the fused ops' Sigmoid and Swish): onnxruntime's `mlas_logistic` in float32, whose result a
    quantized model rounds again downstream (a last-bit difference flips a uint8 code), the
    exact `logistic` in the other dtypes (onnxruntime's float16 and float64 kernels compute
    those otherwise)."""
    return mlas_logistic(x) if x.dtype == np.float32 else logistic(x)


def tanh(x: Array) -> Array:
    """The Tanh op's function (and the fused ops' Tanh): onnxruntime's `mlas_tanh` in float32,
    numpy's tanh in the other dtypes."""
    out: Array = mlas_tanh(x) if x.dtype == np.float32 else np.tanh(x)
    return out
