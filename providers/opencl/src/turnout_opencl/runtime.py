"""One session's OpenCL state: context, in-order queue, device features, programs, launches.

Kernels are 1-D: one work item per output element (or per output row), guarded by `n`.
Work-group sizes come from the device and the kernel (`WORK_GROUP_SIZE`, the preferred
multiple), never from a constant. Shapes and strides travel in small `long` buffers that are
cached by content, so a steady-state run uploads nothing but its inputs.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import ml_dtypes
import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from turnout.graph.dtypes import ELEM_TYPE_NAMES, np_dtype
from turnout.sdk.provider import Event, Stream

from .allocator import OpenCLAllocator
from .program_cache import ProgramCache

__all__ = ["CTYPES", "OpenCLEvent", "OpenCLStream", "Runtime", "lit"]

CTYPES: dict[np.dtype[Any], str] = {
    np.dtype(np.bool_): "uchar",
    np.dtype(np.int8): "char",
    np.dtype(np.uint8): "uchar",
    np.dtype(np.int16): "short",
    np.dtype(np.uint16): "ushort",
    np.dtype(np.int32): "int",
    np.dtype(np.uint32): "uint",
    np.dtype(np.int64): "long",
    np.dtype(np.uint64): "ulong",
    np.dtype(np.float16): "half",
    np.dtype(np.float32): "float",
    np.dtype(np.float64): "double",
    np.dtype(ml_dtypes.bfloat16): "ushort",
}
FLOAT_C = ("half", "float", "double")
F16 = np.dtype(np.float16)
BF16 = np.dtype(ml_dtypes.bfloat16)
HALFS = frozenset({F16, BF16})
# float16 lives as `half` storage (vload_half/vstore_half, OpenCL 1.2 core: no cl_khr_fp16 needed),
# bfloat16 as `ushort` bits; both are computed in float.
STORE: dict[np.dtype[Any], str] = {**CTYPES, F16: "ushort"}

# Conversions between 16-bit float storage and float (round to nearest even on store).
HALF_HELPERS = r"""
inline float rh(float v) {  /* v rounded to float16 and back (private storage) */
  ushort t; vstore_half_rte(v, 0, (__private half*)&t); return vload_half(0, (__private half*)&t);
}
inline float bf2f(ushort b) { return as_float(((uint)b) << 16); }
inline ushort f2bf(float f) {
  uint u = as_uint(f);
  if (isnan(f)) return (ushort)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (ushort)(u >> 16);
}
inline float rbf(float v) { return bf2f(f2bf(v)); }
"""

_META_CACHE = 4096
_ERR_SLOTS = 4096


def lit(x: float | int, ctype: str) -> str:
    """A C literal of `x` in `ctype` (float literals carry the f suffix, specials are macros)."""
    if ctype in FLOAT_C:
        x = float(x)
        if np.isnan(x):
            return f"(({ctype})NAN)"
        if np.isinf(x):
            return f"(({ctype})({'-' if x < 0 else ''}INFINITY))"
        if ctype == "float":
            return f"({float(np.float32(x))!r}f)"
        return f"(({ctype}){x!r})"
    return f"(({ctype}){int(x)})"


_CVT_SRC = """
__kernel void h2f(long n, __global float* o, __global const half* x) {
  long i = get_global_id(0); if (i < n) o[i] = vload_half(i, x); }
__kernel void f2h(long n, __global half* o, __global const float* x) {
  long i = get_global_id(0); if (i < n) vstore_half_rte(x[i], i, o); }
__kernel void b2f(long n, __global float* o, __global const ushort* x) {
  long i = get_global_id(0); if (i < n) o[i] = bf2f(x[i]); }
__kernel void f2b(long n, __global ushort* o, __global const float* x) {
  long i = get_global_id(0); if (i < n) o[i] = f2bf(x[i]); }
"""


class OpenCLEvent(Event):
    """A marker enqueued on a session's queue: done when the commands before it are."""

    __slots__ = ("native", "queue")

    def __init__(self, native: cl.Event, queue: cl.CommandQueue) -> None:
        self.native = native
        self.queue = queue

    def wait(self) -> None:
        self.native.wait()


class OpenCLStream(Stream):
    """The session's in-order command queue as turnout's stream: kernels and copies enqueued
    on it run in order, so only a reader elsewhere (the host, another queue) waits."""

    def __init__(self, queue: cl.CommandQueue, device: Any) -> None:
        super().__init__(device)
        self.queue = queue

    @property
    def handle(self) -> cl.CommandQueue:
        return self.queue

    def record(self) -> OpenCLEvent:
        return OpenCLEvent(cl.enqueue_marker(self.queue), self.queue)

    def wait_event(self, event: Event) -> None:
        if isinstance(event, OpenCLEvent):
            if event.queue is self.queue:
                return  # in order: later commands already follow it
            if event.queue.context == self.queue.context:
                cl.enqueue_barrier(self.queue, wait_for=[event.native])
                return
        event.wait()

    def synchronize(self) -> None:
        self.queue.finish()


class Runtime:
    """Context, queue and helpers shared by every kernel of one provider instance."""

    def __init__(self, device: cl.Device, device_index: int, turnout_device: Any) -> None:
        self.cl_device = device
        self.index = device_index
        self.context = cl.Context([device])
        self.queue = cl.CommandQueue(self.context)
        # Held from on_run_start to on_run_end: a session's runs use the device one at a time
        # (see the provider's docstring for why). Reentrant, so a nested run cannot deadlock.
        self.run_lock = threading.RLock()
        ext = device.extensions.split()
        self.fp64 = "cl_khr_fp64" in ext
        self.fp16 = "cl_khr_fp16" in ext
        self.max_wg = int(device.max_work_group_size)
        self.local_mem = int(device.local_mem_size)
        self.name = device.name.strip()
        self.allocator = OpenCLAllocator(self.queue, turnout_device, frozenset(CTYPES))
        self.stream = OpenCLStream(self.queue, turnout_device)
        self.programs = ProgramCache(self.context, device)
        self._meta: OrderedDict[tuple[int, ...], Any] = OrderedDict()
        self._meta_lock = threading.Lock()
        self._wg: dict[Any, int] = {}
        self.empty_meta = self.meta((0,))
        self._err_buf: Any = None
        self._err_names: list[str] = []

    # -- types --------------------------------------------------------------------------------
    def type_problem(self, elem_type: int | None) -> str | None:
        """Why tensors of `elem_type` cannot live on this device, or None."""
        if elem_type is None:
            return "input/output type unknown at session creation"
        name = ELEM_TYPE_NAMES.get(elem_type, str(elem_type))
        try:
            dt = np_dtype(elem_type)
        except KeyError:
            return f"dtype {name} has no OpenCL type"
        if dt not in CTYPES:
            return f"dtype {name} has no OpenCL type"
        if dt == np.float64 and not self.fp64:
            return f"float64 needs cl_khr_fp64, which {self.name} lacks"
        return None

    @property
    def prelude(self) -> str:
        lines = [HALF_HELPERS]
        if self.fp64:
            lines.append("#pragma OPENCL EXTENSION cl_khr_fp64 : enable")
        return "\n".join(lines) + "\n"

    # -- programs and launches ----------------------------------------------------------------
    def build(self, source: str, *names: str) -> list[cl.Kernel]:
        """Kernels `names` of `source` (prelude added), built now or taken from the cache."""
        prg = self.programs.get(self.prelude + source)
        return [cl.Kernel(prg, n) for n in names]

    def local_size(self, kernel: cl.Kernel, cap: int = 256) -> int:
        key = (kernel.function_name, kernel.int_ptr)
        ls = self._wg.get(key)
        if ls is None:
            dev = self.cl_device
            kmax = kernel.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE, dev)
            pref = kernel.get_work_group_info(
                cl.kernel_work_group_info.PREFERRED_WORK_GROUP_SIZE_MULTIPLE, dev
            )
            top = max(1, min(int(kmax), self.max_wg, cap))
            pref = max(1, int(pref))
            ls = max(pref, (top // pref) * pref) if pref <= top else top
            self._wg[key] = ls
        return ls

    def launch(self, kernel: cl.Kernel, n: int, *args: Any) -> None:
        """Run `kernel` over `n` work items (rounded up to the work-group size)."""
        if n <= 0:
            return
        ls = self.local_size(kernel)
        gs = (n + ls - 1) // ls * ls
        kernel(self.queue, (gs,), (ls,), np.int64(n), *args)

    # -- error flags -------------------------------------------------------------------------------
    def error_slot(self, what: str) -> tuple[Any, int]:
        """(flag buffer, slot) for a kernel that detects bad input on the device (an
        out-of-range index); `check_errors` reads the flags after the run's kernels."""
        with self._meta_lock:
            if self._err_buf is None:
                self._err_buf = cl.Buffer(
                    self.context,
                    cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR,
                    hostbuf=np.zeros(_ERR_SLOTS, np.int32),
                )
            if len(self._err_names) >= _ERR_SLOTS:
                raise RuntimeError("too many OpenCL kernels with error flags in one session")
            self._err_names.append(what)
            return self._err_buf, len(self._err_names) - 1

    def check_errors(self) -> None:
        """Raise InvalidArgument for the first flagged kernel (one small read, a sync)."""
        if not self._err_names:
            return
        host = np.zeros(len(self._err_names), np.int32)
        cl.enqueue_copy(self.queue, host, self._err_buf)
        bad = np.flatnonzero(host)
        if bad.size:
            cl.enqueue_copy(self.queue, self._err_buf, np.zeros_like(host))
            self.queue.finish()
            from turnout.graph.errors import InvalidArgument

            raise InvalidArgument(self._err_names[int(bad[0])])

    # -- 16-bit floats ---------------------------------------------------------------------------
    def half_kernels(self) -> dict[str, cl.Kernel]:
        """Conversion kernels float16/bfloat16 <-> float32 (built once per runtime)."""
        ks = self.__dict__.get("_half_k")
        if ks is None:
            names = ("h2f", "f2h", "b2f", "f2b")
            ks = dict(zip(names, self.build(_CVT_SRC, *names)))
            self._half_k = ks
        return ks

    def widen(self, x: cla.Array) -> cla.Array:
        """A float32 copy of a float16/bfloat16 device array."""
        out = self.empty(tuple(x.shape), np.float32)
        k = self.half_kernels()["h2f" if x.dtype == F16 else "b2f"]
        self.launch(k, x.size, buf(out), buf(x))
        return out

    def narrow(self, x: cla.Array, dt: np.dtype[Any]) -> cla.Array:
        """A float16/bfloat16 copy (rounded to nearest even) of a float32 device array."""
        if x.dtype == dt:
            return x
        if x.dtype != np.float32:
            raise TypeError(f"narrow expects float32, got {x.dtype}")
        out = self.empty(tuple(x.shape), dt)
        k = self.half_kernels()["f2h" if dt == F16 else "f2b"]
        self.launch(k, x.size, buf(out), buf(x))
        return out

    def meta(self, values: tuple[int, ...]) -> Any:
        """A device buffer holding `values` as longs; cached by content."""
        with self._meta_lock:
            buf = self._meta.get(values)
            if buf is not None:
                self._meta.move_to_end(values)
                return buf
            host = np.array(values if values else (0,), np.int64)
            buf = cl.Buffer(
                self.context, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR, hostbuf=host
            )
            self._meta[values] = buf
            if len(self._meta) > _META_CACHE:
                self._meta.popitem(last=False)
            return buf

    def empty(self, shape: tuple[int, ...], dtype: Any) -> cla.Array:
        """A kernel's output buffer, from the provider's allocator (its pool)."""
        return self.allocator.empty(shape, dtype)  # type: ignore[no-any-return]

    def upload(self, host: np.ndarray) -> cla.Array:
        return self.allocator.upload(host)

    def finish(self) -> None:
        self.queue.finish()


def buf(a: cla.Array | None) -> Any:
    """The buffer argument of an array (all arrays here are contiguous with offset 0)."""
    if a is None or a.size == 0:
        return None
    return a.base_data


def c_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    out = [1] * len(shape)
    acc = 1
    for i in range(len(shape) - 1, -1, -1):
        out[i] = acc
        acc *= shape[i]
    return tuple(out)


def bcast_strides(shape: tuple[int, ...], out_shape: tuple[int, ...]) -> tuple[int, ...]:
    """Element strides of a contiguous `shape` broadcast to `out_shape` (0 on broadcast dims)."""
    st = c_strides(shape)
    pad = len(out_shape) - len(shape)
    return tuple(
        0 if i < pad or shape[i - pad] == 1 else st[i - pad] for i in range(len(out_shape))
    )
