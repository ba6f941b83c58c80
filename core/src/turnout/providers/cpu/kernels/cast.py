"""Type conversion kernels: Cast and CastLike.

`convert(x, dtype, saturate, round_mode)` is the one conversion routine; it is shared with the
quantization kernels. numpy and ml_dtypes do most conversions; this module adds what ONNX
specifies beyond a plain `astype`: float8 saturation, float8e8m0 rounding modes, conversions into
the 4- and 2-bit integer types (computed here, so the result does not change with the installed
ml_dtypes release), and string formatting/parsing as onnxruntime does it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
from onnx import TensorProto

from turnout.graph.dtypes import np_dtype
from turnout.graph.errors import InvalidArgument
from turnout.providers.cpu.registry import cpu_kernel
from turnout.sdk.provider import KernelFn, KernelNode

__all__ = ["convert", "converter"]


# ml_dtypes' types, read when a conversion involves one (never for numpy's own types: importing
# ml_dtypes costs 0.35-0.45 s, see turnout._deferred_imports)
@functools.cache
def _f8_types() -> frozenset[np.dtype[Any]]:
    names = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")
    return frozenset(np.dtype(getattr(ml_dtypes, n)) for n in names)


@functools.cache
def _subbyte_ints() -> frozenset[np.dtype[Any]]:
    names = ("int4", "uint4", "int2", "uint2")
    return frozenset(np.dtype(getattr(ml_dtypes, n)) for n in names if hasattr(ml_dtypes, n))


@functools.cache
def _e8m0() -> np.dtype[Any] | None:
    return np.dtype(ml_dtypes.float8_e8m0fnu) if hasattr(ml_dtypes, "float8_e8m0fnu") else None


def _is_subbyte_int(dt: np.dtype[Any]) -> bool:
    return _is_ml(dt) and dt in _subbyte_ints()


_OBJ = np.dtype(object)
_ROUND_MODES = ("up", "down", "nearest")


def _is_ml(dt: np.dtype[Any]) -> bool:
    """True for ml_dtypes types (bfloat16, float8, float4, 2/4-bit ints).

    Most report kind 'V', but not all (float8_e5m2 says 'f'), so ask for the defining module.
    """
    return dt.type.__module__.startswith("ml_dtypes")


def _as_numpy_number(x: np.ndarray) -> np.ndarray:
    """`x` as an array numpy's ufuncs handle: ml_dtypes floats -> float32, 2/4-bit ints -> int8."""
    dt = x.dtype
    if _is_subbyte_int(dt):
        return x.astype(np.int8 if ml_dtypes.iinfo(dt).min < 0 else np.uint8)
    if _is_ml(dt):
        return x.astype(np.float32)
    return x


def _wrap_subbyte(v: np.ndarray, dt: np.dtype[Any]) -> np.ndarray:
    """Integers into a 2/4-bit type by keeping the low bits (two's complement), as ONNX does."""
    info = ml_dtypes.iinfo(dt)
    bits = int(info.bits)
    low = v.astype(np.int64) & ((1 << bits) - 1)
    if info.min < 0:
        low = np.where(low >= 1 << (bits - 1), low - (1 << bits), low)
    return low.astype(dt)


def _float_to_subbyte(v: np.ndarray, dt: np.dtype[Any]) -> np.ndarray:
    """Floats into a 2/4-bit type: truncated toward zero, and 0 where the truncated value is out
    of the type's range (NaN and infinities included). The spec leaves out-of-range values
    undefined; the ONNX node tests pin 0 (ml_dtypes >= 0.7 and onnx.reference give it)."""
    info = ml_dtypes.iinfo(dt)
    with np.errstate(invalid="ignore"):
        t = np.trunc(v.astype(np.float64))
        inside = (t >= int(info.min)) & (t <= int(info.max))
        return np.where(inside, t, 0).astype(np.int8).astype(dt)


def _to_e8m0(x: np.ndarray, saturate: bool, round_mode: str) -> np.ndarray:
    """float -> float8e8m0 (a bare power-of-two exponent) with ONNX's rounding and saturation."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32)
    exp = ((bits >> 23) & 0xFF).astype(np.int32)
    mant = bits & 0x7FFFFF
    special = exp == 0xFF
    if round_mode == "nearest":
        g = (bits & 0x400000) != 0
        r = (bits & 0x200000) != 0
        s = (bits & 0x1FFFFF) != 0
        up = g & (r | s | (exp > 0))
    elif round_mode == "up":
        up = mant != 0
    else:
        up = np.zeros(exp.shape, bool)
    up &= ~special
    if saturate:
        up &= exp != 0xFE
    out = np.where(special, 0xFF, exp + up).astype(np.uint8)
    e8m0 = _e8m0()
    assert e8m0 is not None  # only called for that type
    return out.view(e8m0)


def _format_floats(x: np.ndarray) -> np.ndarray:
    """Numbers -> strings as onnxruntime writes them: "%.8g", and "NaN", "INF", "-INF"."""
    f = x.astype(np.float64)
    flat = f.ravel()
    out = np.empty(flat.shape, dtype=object)
    for i, v in enumerate(flat.tolist()):
        if v != v:
            out[i] = "NaN"
        elif v in (np.inf, -np.inf):
            out[i] = "INF" if v > 0 else "-INF"
        else:
            out[i] = f"{v:.8g}"
    return out.reshape(x.shape)


def _to_string(x: np.ndarray) -> np.ndarray:
    dt = x.dtype
    if dt == _OBJ:
        return np.asarray(x, dtype=object)
    if dt == np.bool_:
        return np.where(x, "1", "0").astype(object)
    if dt.kind in "iu" or _is_subbyte_int(dt):
        return np.asarray(_as_numpy_number(x)).astype(object).astype(str).astype(object)
    return _format_floats(_as_numpy_number(x))


def _parse_strings(x: np.ndarray, dt: np.dtype[Any]) -> np.ndarray:
    """Strings -> numbers: plain and scientific notation, "INF"/"-INF"/"NaN" in any case."""
    flat = [s.decode() if isinstance(s, bytes) else str(s) for s in x.ravel().tolist()]
    if dt.kind in "iu" or _is_subbyte_int(dt):
        vals: list[int] = []
        for s in flat:
            try:
                vals.append(int(s.strip()))
            except ValueError:
                try:
                    vals.append(int(float(s)))
                except (ValueError, OverflowError):
                    raise InvalidArgument(f"cannot convert string {s!r} to an integer") from None
        if dt == np.uint64:
            big = np.array([v & 0xFFFFFFFFFFFFFFFF for v in vals], dtype=np.uint64)
        else:
            big = np.array([(v + 2**63) % 2**64 - 2**63 for v in vals], dtype=np.int64)
        big = big.reshape(x.shape)
        return convert(big, dt)
    try:
        f = np.array([float(s) for s in flat], dtype=np.float64).reshape(x.shape)
    except ValueError as e:
        raise InvalidArgument(f"cannot convert string to a number: {e}") from None
    return convert(f, dt)


def convert(
    x: np.ndarray, dt: np.dtype[Any], saturate: bool = True, round_mode: str = "up"
) -> np.ndarray:
    """`x` converted to dtype `dt` following the ONNX Cast rules (see the module docstring)."""
    x = np.asarray(x)
    src = x.dtype
    # saturation maps e5m2 inf to max
    if src == dt and not (saturate and _is_ml(dt) and dt in _f8_types()):
        return x
    if dt == _OBJ:
        return _to_string(x)
    if src == _OBJ or src.kind in "US":
        return _parse_strings(x, dt)
    if dt == np.bool_:
        return _as_numpy_number(x) != 0
    v = x.astype(np.uint8) if src == np.bool_ else _as_numpy_number(x)
    if _is_ml(dt) and dt in _f8_types():
        if v.dtype.kind in "iub":
            v = v.astype(np.float64)
        if saturate:
            fmax = float(ml_dtypes.finfo(dt).max)
            v = np.clip(v, v.dtype.type(-fmax), v.dtype.type(fmax))
        return v.astype(dt)
    if _is_ml(dt) and dt == _e8m0():
        return _to_e8m0(v, saturate, round_mode)
    if _is_subbyte_int(dt):
        if v.dtype.kind == "f":
            return _float_to_subbyte(v, dt)
        return _wrap_subbyte(v, dt)
    if dt.kind in "iu" and v.dtype.kind == "f" and dt.itemsize < 4:
        # truncate toward zero through int32, then keep the low bits, as C++ casts do on x86
        return v.astype(np.int32).astype(dt)
    if _is_ml(dt) and v.dtype.kind in "iu":
        v = v.astype(np.float64)
    return v.astype(dt)


_PLAIN = frozenset("biuf")


def converter(
    src: np.dtype[Any], dt: np.dtype[Any], saturate: bool = True, round_mode: str = "up"
) -> Callable[[Any], Any]:
    """`convert` specialized to inputs of dtype `src`: between numpy's own bool, integer and
    float types, only the branches `convert` would take for them, decided once; any other
    pair calls `convert` itself."""
    plain = src.kind in _PLAIN and dt.kind in _PLAIN and not (_is_ml(src) or _is_ml(dt))
    if not plain:
        return lambda x: convert(x, dt, saturate, round_mode)
    if src == dt:
        return np.asarray
    if dt == np.bool_:
        return lambda x: np.asarray(x) != 0
    if src == np.bool_:
        return lambda x: np.asarray(x).astype(np.uint8).astype(dt)
    if dt.kind in "iu" and src.kind == "f" and dt.itemsize < 4:
        return lambda x: np.asarray(x).astype(np.int32).astype(dt)
    return lambda x: np.asarray(x).astype(dt)


def _cast_attrs(node: KernelNode) -> tuple[bool, str]:
    saturate = bool(node.attr("saturate", 1))
    round_mode = node.attr("round_mode", "up")
    if round_mode not in _ROUND_MODES:
        raise InvalidArgument(
            f"{node.name}: round_mode must be one of {_ROUND_MODES}, not {round_mode!r}"
        )
    return saturate, round_mode


def _target_dtype(node: KernelNode, to: int) -> np.dtype[Any]:
    try:
        return np_dtype(to)
    except KeyError:
        name = TensorProto.DataType.Name(to) if to in TensorProto.DataType.values() else str(to)
        raise InvalidArgument(f"{node.name}: cannot cast to element type {name}") from None


@cpu_kernel("Cast", since=1)
def cast(node: KernelNode) -> KernelFn:
    to = node.attr("to")
    if to is None:
        raise InvalidArgument(f"{node.name}: Cast needs the 'to' attribute")
    if isinstance(to, str):  # Cast-1 names the type: to="FLOAT"
        try:
            to = TensorProto.DataType.Value(to.upper())
        except ValueError:
            raise InvalidArgument(f"{node.name}: unknown type name {to!r}") from None
    dt = _target_dtype(node, int(to))
    saturate, round_mode = _cast_attrs(node)
    memo: tuple[Any, Callable[[Any], Any]] = (None, np.asarray)  # (input dtype, converter)

    def run(x: np.ndarray) -> tuple[np.ndarray]:
        nonlocal memo
        src, conv = memo
        if src is None or x.dtype != src:  # (a dtype equals None: np.dtype(None) is float64)
            conv = converter(np.asarray(x).dtype, dt, saturate, round_mode)
            memo = (x.dtype, conv)
        return (conv(x),)

    return run


@cpu_kernel("CastLike", since=15)
def cast_like(node: KernelNode) -> KernelFn:
    saturate, round_mode = _cast_attrs(node)

    def run(x: np.ndarray, like: np.ndarray) -> tuple[np.ndarray]:
        return (convert(x, np.asarray(like).dtype, saturate, round_mode),)

    return run
