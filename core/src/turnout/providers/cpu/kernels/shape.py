"""Shape and data-movement kernels: Reshape, Transpose, Concat, Split, Slice, Squeeze, Unsqueeze,
Flatten, Shape, Size, Expand, Tile, Pad, Constant(OfShape), Identity, Range, NonZero, OneHot, Trilu,
DepthToSpace, SpaceToDepth, Compress, Unique, ReverseSequence, EyeLike, CenterCropPad, Optional*.

Ops that only change metadata (Reshape, Squeeze, Unsqueeze, Flatten, Transpose, Slice, Split,
Identity) return numpy views of their input; nothing here writes into an input. Versions whose
attributes became inputs (Split/Squeeze/Unsqueeze at 13, Slice at 10, Pad at 11) branch on
`node.since_version` inside one factory.

Small models spend most of their time in these ops at tiny sizes, where the Python that turns
attributes and shape-like inputs into numpy arguments costs more than numpy itself. So a
kernel keeps its last plan (target shape, index tuple, pad layout, ...) with the key it was
made from (the input shapes and the values of the shape-like inputs) and reuses it while the
key stays the same; any other key takes the general path, with its checks and errors.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from turnout.graph.errors import InvalidArgument
from turnout.providers.cpu.registry import cpu_kernel
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.indexing import reverse_sequence_axes
from turnout.sdk.semantics.literal import constant_attr_value
from turnout.sdk.semantics.pad import PAD_MODES, center_crop_pad_plan, pad_plan
from turnout.sdk.semantics.shape import (
    cut_axis,
    depth_to_space_plan,
    norm_axis,
    slice_index,
    space_to_depth_plan,
    split_request,
    split_sizes,
    squeezed_shape,
    unsqueezed_shape,
)

__all__: list[str] = []


# --------------------------------------------------------------------------------------------
# Shared helpers


def _bad(node: KernelNode, msg: str) -> InvalidArgument:
    return InvalidArgument(f"{node.name}: {msg}")


def ints(value: Any) -> list[int]:
    """A shape-like tensor (or list, or scalar) as a list of Python ints."""
    return [int(v) for v in np.asarray(value).ravel().tolist()]


# --------------------------------------------------------------------------------------------
# Reshape family (views)


def reshape_target(
    node: KernelNode, in_shape: tuple[int, ...], shape: Sequence[int], allowzero: bool
) -> tuple[int, ...]:
    """Resolve ONNX's 0 (copy the input dim unless allowzero) and -1 (infer) in a target shape."""
    out = []
    infer = -1
    for i, s in enumerate(shape):
        if s == 0 and not allowzero:
            if i >= len(in_shape):
                raise _bad(
                    node, f"shape {list(shape)} copies dim {i} of a rank-{len(in_shape)} input"
                )
            s = in_shape[i]
        elif s == -1:
            if infer >= 0:
                raise _bad(node, f"shape {list(shape)} has more than one -1")
            infer = i
        elif s < 0:
            raise _bad(node, f"shape {list(shape)} has a negative dimension")
        out.append(s)
    total = math.prod(in_shape)
    if infer >= 0:
        known = math.prod(s for i, s in enumerate(out) if i != infer)
        if known == 0 or total % known:
            raise _bad(node, f"cannot reshape input of shape {in_shape} to {list(shape)}")
        out[infer] = total // known
    if math.prod(out) != total:
        raise _bad(node, f"cannot reshape input of shape {in_shape} to {list(shape)}")
    return tuple(out)


def _read_only(*values: Any) -> tuple[Any, ...] | None:
    """`values` when each is None or a read-only array, else None. An initializer, or a shape
    value a memoized shape chain keeps, is read-only and passed as the same object every run:
    a kernel that saw it may trust its memo on that object's identity instead of reading the
    values again (0.1-0.2 us each, several per node of a small model's shape arithmetic)."""
    for v in values:
        if v is not None and v.flags.writeable:
            return None
    return values


@cpu_kernel("Reshape", since=1)
def reshape(node: KernelNode) -> KernelFn:
    allowzero = bool(node.attr("allowzero", 0))
    if node.since_version < 5:
        fixed = list(node.attr("shape", []))
        return lambda x: (x.reshape(reshape_target(node, x.shape, fixed, allowzero)),)

    # (shape values, input shape, target, the shape array when read-only: `_read_only`)
    memo: tuple[Any, Any, Any, Any] = (None, None, None, None)

    def run(x: np.ndarray, shape: np.ndarray) -> tuple[np.ndarray]:
        nonlocal memo
        seen, seen_x, target, fixed = memo
        if shape is fixed and x.shape == seen_x:
            return (x.reshape(target),)
        want = shape.tolist()
        if want != seen or x.shape != seen_x:
            target = reshape_target(node, x.shape, ints(shape), allowzero)
        memo = (want, x.shape, target, shape if _read_only(shape) else None)
        return (x.reshape(target),)

    return run


@cpu_kernel("Transpose", since=1)
def transpose(node: KernelNode) -> KernelFn:
    perm = node.attr("perm")
    memo: tuple[int, Any] = (-1, None)  # (rank, checked permutation)

    def run(x: np.ndarray) -> tuple[np.ndarray]:
        nonlocal memo
        rank, p = memo
        if x.ndim != rank:
            p = list(range(x.ndim))[::-1] if perm is None else perm
            if sorted(p) != list(range(x.ndim)):
                raise _bad(node, f"perm {p} is not a permutation of the {x.ndim} input axes")
            memo = (x.ndim, p)
        return (x.transpose(p),)

    return run


def _axes_reshape(
    node: KernelNode,
    target: Callable[[KernelNode, tuple[int, ...], Any], tuple[int, ...]],
    attr_axes: list[int] | None,
    from_input: bool,
) -> KernelFn:
    """Squeeze/Unsqueeze: a reshape to `target(shape, axes)`, kept per (shape, axes)."""
    # (input shape, axes values, target, `_read_only` of the axes)
    memo: tuple[Any, Any, Any, Any] = (None, None, None, None)

    def run(x: np.ndarray, axes: np.ndarray | None = None) -> tuple[np.ndarray]:
        nonlocal memo
        seen_x, seen, out, fixed = memo
        if fixed is not None and axes is fixed[0] and x.shape == seen_x:
            return (x.reshape(out),)
        want = None if axes is None else axes.tolist()
        if x.shape != seen_x or want != seen:
            given = (None if axes is None else ints(axes)) if from_input else attr_axes
            out = target(node, x.shape, given)
        memo = (x.shape, want, out, _read_only(axes))
        return (x.reshape(out),)

    return run


@cpu_kernel("Squeeze", since=1)
def squeeze(node: KernelNode) -> KernelFn:
    if node.since_version < 13:
        return _axes_reshape(node, squeezed_shape, node.attr("axes"), from_input=False)
    return _axes_reshape(node, squeezed_shape, None, from_input=True)


@cpu_kernel("Unsqueeze", since=1)
def unsqueeze(node: KernelNode) -> KernelFn:
    if node.since_version < 13:
        return _axes_reshape(node, unsqueezed_shape, list(node.attr("axes", [])), from_input=False)
    return _axes_reshape(node, unsqueezed_shape, None, from_input=True)


@cpu_kernel("Flatten", since=1)
def flatten(node: KernelNode) -> KernelFn:
    axis = node.attr("axis", 1)
    memo: tuple[Any, Any] = (None, None)  # (input shape, 2-D shape)

    def run(x: np.ndarray) -> tuple[np.ndarray]:
        nonlocal memo
        seen, out = memo
        if x.shape != seen:
            a = cut_axis(node, axis, x.ndim)
            out = (math.prod(x.shape[:a]), math.prod(x.shape[a:]))
            memo = (x.shape, out)
        return (x.reshape(out),)

    return run


@cpu_kernel("Identity", since=1)
def identity(node: KernelNode) -> KernelFn:
    """Tensors, sequences and optionals (None included) pass through unchanged."""
    return lambda x: (x,)


# --------------------------------------------------------------------------------------------
# Shape queries and constants


@cpu_kernel("Shape", since=1)
def shape(node: KernelNode) -> KernelFn:
    start = node.attr("start", 0)
    end = node.attr("end")
    return lambda x: (np.array(x.shape[start:end], dtype=np.int64),)


@cpu_kernel("Size", since=1)
def size(node: KernelNode) -> KernelFn:
    return lambda x: (np.array(x.size, dtype=np.int64),)


@cpu_kernel("Constant", since=1)
def constant(node: KernelNode) -> KernelFn:
    value = constant_attr_value(node.name, node.attrs)
    value.setflags(write=False)  # shared by every run
    return lambda: (value,)


@cpu_kernel("ConstantOfShape", since=9)
def constant_of_shape(node: KernelNode) -> KernelFn:
    v = node.attr("value")
    fill = np.zeros(1, np.float32) if v is None else np.asarray(v).ravel()[:1]
    # np.zeros is one C call where np.full is Python: same bits for a fill of +0 / 0 / False
    zero = fill.dtype.kind in "biuf" and fill[0] == 0 and not np.signbit(fill[0])
    memo: tuple[Any, Any] = (None, None)  # (shape values, checked dims)

    def run(shape_: np.ndarray) -> tuple[np.ndarray]:
        nonlocal memo
        want = shape_.tolist()
        seen, dims = memo
        if want != seen:
            dims = ints(shape_)
            if any(d < 0 for d in dims):
                raise _bad(node, f"negative dimension in shape {dims}")
            memo = (want, dims)
        if zero:
            return (np.zeros(dims, dtype=fill.dtype),)
        return (np.full(dims, fill[0], dtype=fill.dtype),)

    return run


@cpu_kernel("EyeLike", since=9)
def eye_like(node: KernelNode) -> KernelFn:
    k = node.attr("k", 0)
    dt = node.attr("dtype")

    def run(x: np.ndarray) -> tuple[np.ndarray]:
        from turnout.graph.dtypes import np_dtype

        if x.ndim != 2:
            raise _bad(node, f"EyeLike needs a 2-D input, got shape {x.shape}")
        dtype = x.dtype if dt is None else np_dtype(dt)
        return (np.eye(x.shape[0], x.shape[1], k, dtype=dtype),)

    return run


@cpu_kernel("Range", since=11)
def range_(node: KernelNode) -> KernelFn:
    """output[i] = start + i * delta; float16/bfloat16 computed in float32 (stash_type, 27)."""
    stash = node.attr("stash_type", 1)
    memo: tuple[Any, Any] = (None, None)  # (the three inputs' bytes and dtypes, result)

    def run(start: np.ndarray, limit: np.ndarray, delta: np.ndarray) -> tuple[np.ndarray]:
        nonlocal memo
        s, lim, d = np.asarray(start), np.asarray(limit), np.asarray(delta)
        key = (s.tobytes(), lim.tobytes(), d.tobytes(), s.dtype, lim.dtype, d.dtype)
        seen, out = memo
        if key != seen:
            out = compute(start, limit, delta)
            memo = (key, out)
        return (out.copy(),)  # the result is the caller's to keep

    def compute(start: np.ndarray, limit: np.ndarray, delta: np.ndarray) -> np.ndarray:
        dt = np.asarray(start).dtype
        s, lim, d = (np.asarray(v).item() for v in (start, limit, delta))
        if d == 0:
            raise _bad(node, "delta is zero")
        n = max(math.ceil((lim - s) / d), 0)
        if dt.kind in "iu":
            return (s + np.arange(n, dtype=np.int64) * d).astype(dt)
        ct = np.dtype(np.float32) if stash == 1 and dt.itemsize == 2 else dt
        return (ct.type(s) + np.arange(n).astype(ct) * ct.type(d)).astype(dt)

    return run


# --------------------------------------------------------------------------------------------
# Joining and splitting


@cpu_kernel("Concat", since=1)
def concat(node: KernelNode) -> KernelFn:
    axis = node.attr("axis", 1)
    memo: tuple[Any, int] = (None, 0)  # (input shapes, checked axis)

    def run(*xs: np.ndarray) -> tuple[np.ndarray]:
        nonlocal memo
        shapes = [x.shape for x in xs]
        seen, a = memo
        if shapes != seen:
            a = check(xs)
            memo = (shapes, a)
        return (np.concatenate(xs, axis=a),)

    def check(xs: Sequence[np.ndarray]) -> int:
        if not xs:
            raise _bad(node, "Concat needs at least one input")
        a = norm_axis(node, axis, xs[0].ndim)
        for x in xs[1:]:
            if x.ndim != xs[0].ndim or any(
                p != q for i, (p, q) in enumerate(zip(x.shape, xs[0].shape)) if i != a
            ):
                raise _bad(
                    node, f"cannot concatenate shapes {xs[0].shape} and {x.shape} on axis {a}"
                )
        return a

    return run


@cpu_kernel("Split", since=1)
def split(node: KernelNode) -> KernelFn:
    axis = node.attr("axis", 0)
    n_out = len(node.node.outputs)
    num_outputs = node.attr("num_outputs")
    memo: tuple[Any, Any, Any] = (None, None, None)  # (input shape, split values, indices)

    def run(x: np.ndarray, split_in: np.ndarray | None = None) -> list[np.ndarray]:
        nonlocal memo
        want = None if split_in is None else split_in.tolist()
        seen_x, seen, parts = memo
        if x.shape != seen_x or want != seen:
            parts = plan(x, split_in)
            memo = (x.shape, want, parts)
        return [x[p] for p in parts]  # the views np.split returns

    def plan(x: np.ndarray, split_in: np.ndarray | None) -> list[tuple[slice, ...]]:
        a = norm_axis(node, axis, x.ndim)
        sizes = split_sizes(node, x.shape[a], split_request(node, split_in), n_out, num_outputs)
        ends = np.cumsum(sizes).tolist()
        lead = (slice(None),) * a
        return [(*lead, slice(e - n, e)) for n, e in zip(sizes, ends)]

    return run


@cpu_kernel("Slice", since=1)
def slice_(node: KernelNode) -> KernelFn:
    # (input shape, parameter values, index, `_read_only` of the parameters)
    memo: tuple[Any, Any, Any, Any] = (None, None, None, None)
    if node.since_version < 10:
        st, en, ax = node.attr("starts"), node.attr("ends"), node.attr("axes")

        def run_attrs(x: np.ndarray) -> tuple[np.ndarray]:
            nonlocal memo
            seen_x, _, idx, _ = memo
            if x.shape != seen_x:
                idx = slice_index(node, x.shape, st, en, ax, None)
                memo = (x.shape, None, idx, None)
            return (x[idx],)

        return run_attrs

    def run(
        x: np.ndarray,
        starts: np.ndarray,
        ends: np.ndarray,
        axes: np.ndarray | None = None,
        steps: np.ndarray | None = None,
    ) -> tuple[np.ndarray]:
        nonlocal memo
        seen_x, seen, idx, fixed = memo
        if (
            fixed is not None
            and starts is fixed[0]
            and ends is fixed[1]
            and axes is fixed[2]
            and steps is fixed[3]
            and x.shape == seen_x
        ):
            return (x[idx],)
        want = (
            starts.tolist(),
            ends.tolist(),
            None if axes is None else axes.tolist(),
            None if steps is None else steps.tolist(),
        )
        if x.shape != seen_x or want != seen:
            idx = slice_index(
                node,
                x.shape,
                ints(starts),
                ints(ends),
                None if axes is None else ints(axes),
                None if steps is None else ints(steps),
            )
        memo = (x.shape, want, idx, _read_only(starts, ends, axes, steps))
        return (x[idx],)

    return run


@cpu_kernel("Expand", since=8)
def expand(node: KernelNode) -> KernelFn:
    memo: tuple[Any, Any, Any] = (None, None, None)  # (input shape, shape values, out shape)

    def run(x: np.ndarray, shape_: np.ndarray) -> tuple[np.ndarray]:
        nonlocal memo
        want = shape_.tolist()
        seen_x, seen, out = memo
        if x.shape != seen_x or want != seen:
            try:
                out = np.broadcast_shapes(x.shape, tuple(ints(shape_)))
            except ValueError:
                raise _bad(node, f"cannot expand shape {x.shape} to {ints(shape_)}") from None
            memo = (x.shape, want, out)
        y = np.empty(out, x.dtype)
        np.copyto(y, x)  # np.array(np.broadcast_to(x, out)), without broadcast_to's Python
        return (y,)

    return run


@cpu_kernel("Tile", since=6)
def tile(node: KernelNode) -> KernelFn:
    def run(x: np.ndarray, repeats: np.ndarray) -> tuple[np.ndarray]:
        reps = ints(repeats)
        if len(reps) != x.ndim or any(r < 0 for r in reps):
            raise _bad(node, f"repeats {reps} must be {x.ndim} non-negative counts")
        return (np.tile(x, reps),)

    return run


# --------------------------------------------------------------------------------------------
# Padding and cropping


def pad_array(
    node: KernelNode, x: np.ndarray, pads: list[int], mode: str, value: Any, axes: list[int] | None
) -> np.ndarray:
    """Pad (negative pads crop first, then positive pads are added)."""
    return _pad_with(x, pad_plan(node.name, x.shape, pads, mode, axes), value)


def _pad_with(x: np.ndarray, plan: tuple[Any, ...], value: Any) -> np.ndarray:
    crop, out_shape, inside, gathers = plan
    if crop is not None:
        x = x[crop]
    if inside is not None:
        if value == 0 and x.dtype.kind in "biuf" and not np.signbit(value):
            out = np.zeros(out_shape, dtype=x.dtype)  # one C call; np.full is Python
        else:
            out = np.full(out_shape, value, dtype=x.dtype)
        out[inside] = x
        return out
    for a, index in gathers:
        x = x.take(index, axis=a)  # the method: np.take's dispatch is ~1 us on a small pad
    return x


@cpu_kernel("Pad", since=1)
def pad(node: KernelNode) -> KernelFn:
    mode = node.attr("mode", "constant")
    if mode not in PAD_MODES:
        raise _bad(node, f"unknown pad mode {mode!r}")
    memo: tuple[Any, Any, Any] = (None, None, None)  # (input shape, pads/axes values, plan)

    def fill(x: np.ndarray, value: Any) -> Any:
        if value is None:
            return "" if x.dtype == object else 0
        v = np.asarray(value)
        return v.item() if v.size == 1 else v.ravel()[0]

    if node.since_version < 11:
        pads_attr = list(node.attr("pads", node.attr("paddings", [])))
        value_attr = node.attr("value", 0.0)

        def run_attrs(x: np.ndarray) -> tuple[np.ndarray]:
            nonlocal memo
            seen_x, _, plan = memo
            if x.shape != seen_x:
                plan = pad_plan(node.name, x.shape, pads_attr, mode, None)
                memo = (x.shape, None, plan)
            return (_pad_with(x, plan, fill(x, value_attr)),)

        return run_attrs

    def run(
        x: np.ndarray,
        pads_: np.ndarray,
        constant_value: np.ndarray | None = None,
        axes: np.ndarray | None = None,
    ) -> tuple[np.ndarray]:
        nonlocal memo
        want = (pads_.tolist(), None if axes is None else axes.tolist())
        seen_x, seen, plan = memo
        if x.shape != seen_x or want != seen:
            plan = pad_plan(
                node.name, x.shape, ints(pads_), mode, None if axes is None else ints(axes)
            )
            memo = (x.shape, want, plan)
        return (_pad_with(x, plan, fill(x, constant_value)),)

    return run


@cpu_kernel("CenterCropPad", since=18)
def center_crop_pad(node: KernelNode) -> KernelFn:
    axes_attr = node.attr("axes")

    def run(x: np.ndarray, shape_: np.ndarray) -> tuple[np.ndarray]:
        plan = center_crop_pad_plan(node.name, x.shape, ints(shape_), axes_attr)
        out = np.zeros(plan.out_shape, dtype=x.dtype)
        out[plan.dst] = x[plan.src]
        return (out,)

    return run


# --------------------------------------------------------------------------------------------
# Index-producing and masking ops


@cpu_kernel("NonZero", since=9)
def nonzero(node: KernelNode) -> KernelFn:
    def run(x: np.ndarray) -> tuple[np.ndarray]:
        if x.ndim == 0:
            return (np.zeros((0, 1 if bool(x) else 0), dtype=np.int64),)
        nz = np.nonzero(x)
        if not nz:
            return (np.zeros((0, 0), dtype=np.int64),)
        return (np.stack(nz).astype(np.int64, copy=False),)

    return run


@cpu_kernel("OneHot", since=9)
def one_hot(node: KernelNode) -> KernelFn:
    axis = node.attr("axis", -1)

    def run(indices: np.ndarray, depth: np.ndarray, values: np.ndarray) -> tuple[np.ndarray]:
        d = np.asarray(depth)
        if d.size != 1:
            raise _bad(node, f"depth must have one element, got shape {d.shape}")
        n = int(d.ravel()[0])
        if n < 1:
            raise _bad(node, f"depth must be positive, got {n}")
        if np.asarray(values).size != 2:
            raise _bad(node, "values must have two elements [off, on]")
        off, on = np.asarray(values).ravel()
        idx = np.asarray(indices).astype(np.int64)
        idx = np.where(idx < 0, idx + n, idx)
        a = norm_axis(node, axis, idx.ndim + 1)
        hot = np.expand_dims(idx, a) == np.arange(n).reshape((n,) + (1,) * (idx.ndim - a))
        return (np.where(hot, on, off).astype(np.asarray(values).dtype, copy=False),)

    return run


@cpu_kernel("Trilu", since=14)
def trilu(node: KernelNode) -> KernelFn:
    upper = bool(node.attr("upper", 1))

    def run(x: np.ndarray, k: np.ndarray | None = None) -> tuple[np.ndarray]:
        if x.ndim < 2:
            raise _bad(node, f"Trilu needs rank >= 2, got shape {x.shape}")
        kk = 0 if k is None else int(np.asarray(k).ravel()[0])
        return ((np.triu if upper else np.tril)(x, kk),)

    return run


@cpu_kernel("Compress", since=9)
def compress(node: KernelNode) -> KernelFn:
    axis = node.attr("axis")

    def run(x: np.ndarray, cond: np.ndarray) -> tuple[np.ndarray]:
        c = np.asarray(cond).astype(bool).ravel()
        a = None if axis is None else norm_axis(node, axis, x.ndim)
        n = x.size if a is None else x.shape[a]
        if c.size > n:
            if c[n:].any():
                raise _bad(node, f"condition selects past the end of a dim of {n}")
            c = c[:n]
        return (np.compress(c, x, axis=a),)

    return run


def _unique_rows(rows: np.ndarray) -> tuple[np.ndarray, ...]:
    """np.unique(axis=0) for any dtype: sort rows as tuples (object arrays cannot be viewed)."""
    keys = [tuple(r) for r in rows.tolist()]
    order = sorted(range(len(keys)), key=lambda i: keys[i])
    first: dict[tuple[Any, ...], int] = {}
    for i in order:
        first.setdefault(keys[i], i)
    uniq_keys = sorted(first)
    pos = {k: j for j, k in enumerate(uniq_keys)}
    idx = np.array([first[k] for k in uniq_keys], dtype=np.int64)
    inv = np.array([pos[k] for k in keys], dtype=np.int64)
    counts = np.bincount(inv, minlength=len(uniq_keys)).astype(np.int64)
    return rows[idx], idx, inv, counts


@cpu_kernel("Unique", since=11)
def unique(node: KernelNode) -> KernelFn:
    axis = node.attr("axis")
    is_sorted = bool(node.attr("sorted", 1))
    n_out = len(node.node.outputs)  # indices, inverse_indices and counts are optional

    def run(x: np.ndarray) -> tuple[np.ndarray, ...]:
        if axis is None:
            u, idx, inv, cnt = np.unique(
                x.ravel(), return_index=True, return_inverse=True, return_counts=True
            )
        else:
            a = norm_axis(node, axis, x.ndim)
            moved = np.moveaxis(x, a, 0)
            rows = moved.reshape(moved.shape[0], -1)
            if x.dtype == object:
                ur, idx, inv, cnt = _unique_rows(rows)
            else:
                ur, idx, inv, cnt = np.unique(
                    rows, axis=0, return_index=True, return_inverse=True, return_counts=True
                )
            u = np.moveaxis(ur.reshape((-1, *moved.shape[1:])), 0, a)
        inv = inv.ravel()
        if not is_sorted:
            order = np.argsort(idx, kind="stable")
            rank = np.empty_like(order)
            rank[order] = np.arange(order.size)
            u = np.take(u, order, axis=0 if axis is None else norm_axis(node, axis, x.ndim))
            idx, cnt, inv = idx[order], cnt[order], rank[inv]
        i64 = np.int64
        return (u, idx.astype(i64), inv.astype(i64), cnt.astype(i64))[:n_out]

    return run


@cpu_kernel("ReverseSequence", since=10)
def reverse_sequence(node: KernelNode) -> KernelFn:
    def run(x: np.ndarray, seq_lens: np.ndarray) -> tuple[np.ndarray]:
        time_axis, batch_axis = reverse_sequence_axes(node, x.shape, np.shape(seq_lens))
        m = np.moveaxis(x, (time_axis, batch_axis), (0, 1))
        t_len, b_len = m.shape[:2]
        lens = np.asarray(seq_lens).astype(np.int64).ravel()
        if lens.shape != (b_len,) or (lens < 0).any() or (lens > t_len).any():
            raise _bad(
                node, f"sequence_lens {lens.tolist()} invalid for {b_len} batches of {t_len} steps"
            )
        t = np.arange(t_len)[:, None]
        src = np.where(t < lens[None, :], lens[None, :] - 1 - t, t)
        out = m[src, np.arange(b_len)[None, :]]
        return (np.moveaxis(out, (0, 1), (time_axis, batch_axis)).copy(),)

    return run


# --------------------------------------------------------------------------------------------
# Depth <-> space


@cpu_kernel("DepthToSpace", since=1)
def depth_to_space(node: KernelNode) -> KernelFn:
    def run(x: np.ndarray) -> tuple[np.ndarray]:
        p = depth_to_space_plan(node, x.shape)
        return (x.reshape(p.split).transpose(p.perm).reshape(p.out),)

    return run


@cpu_kernel("SpaceToDepth", since=1)
def space_to_depth(node: KernelNode) -> KernelFn:
    def run(x: np.ndarray) -> tuple[np.ndarray]:
        p = space_to_depth_plan(node, x.shape)
        return (x.reshape(p.split).transpose(p.perm).reshape(p.out),)

    return run


# --------------------------------------------------------------------------------------------
# Optionals (an absent optional is None)


@cpu_kernel("Optional", since=15)
def optional(node: KernelNode) -> KernelFn:
    return lambda x=None: (x,)


@cpu_kernel("OptionalHasElement", since=15)
def optional_has_element(node: KernelNode) -> KernelFn:
    return lambda x=None: (np.array(x is not None),)


@cpu_kernel("OptionalGetElement", since=15)
def optional_get_element(node: KernelNode) -> KernelFn:
    def run(x: Any) -> tuple[Any]:
        if x is None:
            raise _bad(node, "OptionalGetElement on an empty optional")
        return (x,)

    return run
