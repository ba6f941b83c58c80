"""Shape ops: metadata-only views (Reshape, Squeeze, Unsqueeze, Flatten, Identity, Dropout in
inference), host-memory outputs (Shape, Size), and fills (Constant, ConstantOfShape, Range,
EyeLike, Trilu).

Views share the device buffer: kernels never write their inputs, so aliasing is safe.
Shape-like inputs (Reshape's shape, Squeeze's axes, ...) are declared host inputs; Shape and
Size write host outputs, so planning never reads a shape back from the device.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from turnout.graph.errors import InvalidArgument
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics import shape as shape_sem

from ..runtime import CTYPES, HALFS, STORE, Runtime, buf, lit
from .base import ALL, NUM, dtype_out, host_ints, ocl_kernel

__all__: list[str] = []


def _view(x: Any, shape: tuple[int, ...]) -> Any:
    if tuple(x.shape) == shape:
        return x
    return (
        x.reshape(shape) if x.size else x.__class__(x.queue, shape, x.dtype, allocator=x.allocator)
    )


def _reshape_shape(
    name: str, shape: tuple[int, ...], target: list[int], allowzero: bool
) -> tuple[int, ...]:
    out = list(target)
    for i, d in enumerate(out):
        if d == 0 and not allowzero:
            if i >= len(shape):
                raise InvalidArgument(f"{name}: 0 at position {i} but input has rank {len(shape)}")
            out[i] = shape[i]
    if out.count(-1) > 1:
        raise InvalidArgument(f"{name}: more than one -1 in shape {target}")
    total = math.prod(shape)
    if -1 in out:
        rest = math.prod(d for d in out if d != -1)
        if rest == 0 or total % rest:
            raise InvalidArgument(f"{name}: cannot reshape {shape} to {target}")
        out[out.index(-1)] = total // rest
    if math.prod(out) != total:
        raise InvalidArgument(f"{name}: cannot reshape {shape} ({total} elements) to {target}")
    return tuple(out)


@ocl_kernel("Reshape", 5, dtypes=ALL, half="bits", host_inputs=(1,))
def reshape(kn: KernelNode, rt: Runtime) -> KernelFn:
    allowzero = bool(kn.attr("allowzero", 0))

    def run(x: Any, shape: Any) -> tuple[Any]:
        return (_view(x, _reshape_shape(kn.name, tuple(x.shape), host_ints(shape), allowzero)),)

    return run


@ocl_kernel("Flatten", 1, dtypes=ALL, half="bits")
def flatten(kn: KernelNode, rt: Runtime) -> KernelFn:
    axis_attr = int(kn.attr("axis", 1))

    def run(x: Any) -> tuple[Any]:
        r = len(x.shape)
        axis = shape_sem.cut_axis(kn, axis_attr, r)
        return (_view(x, (math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))),)

    return run


def _squeeze(kn: KernelNode, from_input: bool) -> KernelFn:
    def run(x: Any, axes: Any = None) -> tuple[Any]:
        ax = host_ints(axes) if from_input and axes is not None else kn.attr("axes")
        return (_view(x, shape_sem.squeezed_shape(kn, tuple(x.shape), ax)),)

    return run


def _unsqueeze(kn: KernelNode, from_input: bool) -> KernelFn:
    def run(x: Any, axes: Any = None) -> tuple[Any]:
        ax = host_ints(axes) if from_input else list(kn.attr("axes"))
        return (_view(x, shape_sem.unsqueezed_shape(kn, tuple(x.shape), ax)),)

    return run


@ocl_kernel("Squeeze", 1, until=12, dtypes=ALL, half="bits")
def squeeze_attr(kn: KernelNode, rt: Runtime) -> KernelFn:
    return _squeeze(kn, False)


@ocl_kernel("Squeeze", 13, dtypes=ALL, half="bits", host_inputs=(1,))
def squeeze_input(kn: KernelNode, rt: Runtime) -> KernelFn:
    return _squeeze(kn, True)


@ocl_kernel("Unsqueeze", 1, until=12, dtypes=ALL, half="bits")
def unsqueeze_attr(kn: KernelNode, rt: Runtime) -> KernelFn:
    return _unsqueeze(kn, False)


@ocl_kernel("Unsqueeze", 13, dtypes=ALL, half="bits", host_inputs=(1,))
def unsqueeze_input(kn: KernelNode, rt: Runtime) -> KernelFn:
    return _unsqueeze(kn, True)


@ocl_kernel("Identity", 1, dtypes=ALL, half="bits")
def identity(kn: KernelNode, rt: Runtime) -> KernelFn:
    return lambda x: (x,)


def _dropout_supports(kn: KernelNode, rt: Runtime) -> str | None:
    if len(kn.inputs) > 2 and kn.inputs[2] is not None:
        return "Dropout with a training_mode input is random; not claimed"
    if kn.since_version < 7 and not kn.attr("is_test", 0):
        return "Dropout in training mode is random; not claimed"
    return None


@ocl_kernel("Dropout", 1, dtypes=ALL, half="bits", supports=_dropout_supports, host_inputs=(1,))
def dropout(kn: KernelNode, rt: Runtime) -> KernelFn:
    (k,) = rt.build(_FILL_SRC.format(T="uchar"), "fill")
    want_mask = len(kn.node.outputs) > 1 and kn.node.outputs[1]

    def run(x: Any, ratio: Any = None, training: Any = None) -> tuple[Any, ...]:
        if not want_mask:
            return (x,)
        mask = rt.empty(tuple(x.shape), np.bool_)
        rt.launch(k, mask.size, buf(mask), np.uint8(1))
        return (x, mask)

    return run


# ---------------------------------------------------------------------------- host outputs
@ocl_kernel("Shape", 1, dtypes=ALL, half="bits", host_outputs=(0,))
def shape_op(kn: KernelNode, rt: Runtime) -> KernelFn:
    start, end = kn.attr("start", 0), kn.attr("end")

    def run(x: Any) -> tuple[np.ndarray]:
        s = list(x.shape)
        return (np.array(s[slice(start, end)], np.int64),)

    return run


@ocl_kernel("Size", 1, dtypes=ALL, half="bits", host_outputs=(0,))
def size_op(kn: KernelNode, rt: Runtime) -> KernelFn:
    return lambda x: (np.array(math.prod(x.shape), np.int64),)


# ---------------------------------------------------------------------------- fills
_FILL_SRC = """
__kernel void fill(long n, __global {T}* out, {T} value) {{
  long gid = get_global_id(0);
  if (gid < n) out[gid] = value;
}}
"""
_RANGE_SRC = """
__kernel void range(long n, __global {T}* out, {T} start, {T} delta) {{
  long gid = get_global_id(0);
  if (gid < n) out[gid] = start + ({T})gid * delta;
}}
"""
_TRI_SRC = """
__kernel void eye(long n, long rows, long cols, long k, int upper, int keep, __global {T}* out,
                  __global const {T}* x) {{
  long gid = get_global_id(0);
  if (gid >= n) return;
  long j = gid % cols; long i = (gid / cols) % rows;
  int on = upper ? (j - i >= k) : (j - i <= k);
  out[gid] = keep ? (on ? x[gid] : ({T})0) : (j - i == k ? ({T})1 : ({T})0);
}}
"""


def _scalar(v: Any, dt: np.dtype[Any]) -> Any:
    """A kernel argument holding `v` as `dt` (16-bit floats as their bits)."""
    a = np.array(v).astype(dt)
    if dt in HALFS:
        return a.view(np.uint16)[()]
    return (a.astype(np.uint8) if dt == np.bool_ else a)[()]


def _constant_value(kn: KernelNode) -> np.ndarray:
    for key in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        v = kn.attr(key)
        if v is not None:
            if key == "value_float" or key == "value_floats":
                return np.asarray(v, np.float32)
            if key.startswith("value_int"):
                return np.asarray(v, np.int64)
            return np.asarray(v)
    raise InvalidArgument(f"{kn.name}: Constant without a numeric value attribute")


def _constant_supports(kn: KernelNode, rt: Runtime) -> str | None:
    if kn.attr("value") is None and not any(
        kn.attr(k) is not None for k in ("value_float", "value_floats", "value_int", "value_ints")
    ):
        return "Constant holds a string or sparse value; not on the device"
    return None


@ocl_kernel("Constant", 1, dtypes=ALL, half="bits", supports=_constant_supports)
def constant(kn: KernelNode, rt: Runtime) -> KernelFn:
    value = rt.upload(_constant_value(kn))  # once, at session creation
    return lambda: (value,)


@ocl_kernel("ConstantOfShape", 9, dtypes=ALL, half="bits", host_inputs=(0,), dtype_of=())
def constant_of_shape(kn: KernelNode, rt: Runtime) -> KernelFn:
    v = kn.attr("value")
    arr = np.asarray(v).reshape(-1) if v is not None else np.zeros(1, np.float32)
    dt = arr.dtype
    (k,) = rt.build(_FILL_SRC.format(T=STORE[dt]), "fill")
    val = _scalar(arr[0], dt)

    def run(shape: Any) -> tuple[Any]:
        dims = tuple(host_ints(shape))
        if any(d < 0 for d in dims):
            raise InvalidArgument(f"{kn.name}: negative dimension in {dims}")
        out = rt.empty(dims, dt)
        rt.launch(k, out.size, buf(out), val)
        return (out,)

    return run


@ocl_kernel("Range", 11, dtypes=NUM, host_inputs=(0, 1, 2), dtype_of=(), half="no")
def range_op(kn: KernelNode, rt: Runtime) -> KernelFn:
    dt = dtype_out(kn)
    (k,) = rt.build(_RANGE_SRC.format(T=CTYPES[dt]), "range")

    def run(start: Any, limit: Any, delta: Any) -> tuple[Any]:
        s, lim, d = (np.asarray(v).reshape(()) for v in (start, limit, delta))
        if d == 0:
            raise InvalidArgument(f"{kn.name}: delta must not be 0")
        n = max(int(np.ceil((lim - s) / d)), 0)
        out = rt.empty((n,), dt)
        rt.launch(k, n, buf(out), _scalar(s, dt), _scalar(d, dt))
        return (out,)

    return run


@ocl_kernel("Trilu", 14, dtypes=ALL, half="bits", host_inputs=(1,))
def trilu(kn: KernelNode, rt: Runtime) -> KernelFn:
    dt = np.dtype(kn.inputs[0].dtype)
    (k,) = rt.build(_TRI_SRC.format(T=STORE[dt]), "eye")
    upper = int(kn.attr("upper", 1))

    def run(x: Any, kk: Any = None) -> tuple[Any]:
        off = int(np.asarray(kk).reshape(())) if kk is not None else 0
        out = rt.empty(tuple(x.shape), dt)
        rows, cols = x.shape[-2], x.shape[-1]
        rt.launch(
            k,
            out.size,
            np.int64(rows),
            np.int64(cols),
            np.int64(off),
            np.int32(upper),
            np.int32(1),
            buf(out),
            buf(x),
        )
        return (out,)

    return run


@ocl_kernel("EyeLike", 9, dtypes=ALL, half="no", dtype_of=())
def eye_like(kn: KernelNode, rt: Runtime) -> KernelFn:
    dt = dtype_out(kn)
    (k,) = rt.build(_TRI_SRC.format(T=CTYPES[dt]), "eye")
    off = int(kn.attr("k", 0))

    def run(x: Any) -> tuple[Any]:
        if len(x.shape) != 2:
            raise InvalidArgument(f"{kn.name}: EyeLike takes a 2-D tensor, not {x.shape}")
        out = rt.empty(tuple(x.shape), dt)
        rt.launch(
            k,
            out.size,
            np.int64(x.shape[0]),
            np.int64(x.shape[1]),
            np.int64(off),
            np.int32(0),
            np.int32(0),
            buf(out),
            buf(out),
        )
        return (out,)

    return run


_ = lit
