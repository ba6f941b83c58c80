"""Sequence kernels: SequenceEmpty/Construct/Insert/At/Erase/Length, SplitToSequence,
ConcatFromSequence.

A sequence value is a Python list of arrays. Inputs may be shared with other consumers, so every
op that changes a sequence returns a new list and never mutates the one it was given.
"""

from __future__ import annotations

import numpy as np

from turnout.graph.errors import InvalidArgument
from turnout.providers.cpu.registry import cpu_kernel
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.shape import norm_axis

__all__: list[str] = []


def _bad(node: KernelNode, msg: str) -> InvalidArgument:
    return InvalidArgument(f"{node.name}: {msg}")


def _position(
    node: KernelNode, pos: np.ndarray | None, n: int, default: int, inclusive: bool
) -> int:
    """A sequence position in [-n, n) (or [-n, n] when inserting) mapped to [0, n]."""
    if pos is None:
        return default
    p = int(np.asarray(pos).ravel()[0])
    hi = n if inclusive else n - 1
    if not -n <= p <= hi:
        raise _bad(node, f"position {p} is out of range for a sequence of length {n}")
    return p + n if p < 0 else p


@cpu_kernel("SequenceEmpty", since=11)
def sequence_empty(node: KernelNode) -> KernelFn:
    return lambda: ([],)


@cpu_kernel("SequenceConstruct", since=11)
def sequence_construct(node: KernelNode) -> KernelFn:
    return lambda *xs: (list(xs),)


@cpu_kernel("SequenceInsert", since=11)
def sequence_insert(node: KernelNode) -> KernelFn:
    def run(
        seq: list[np.ndarray], x: np.ndarray, pos: np.ndarray | None = None
    ) -> tuple[list[np.ndarray]]:
        p = _position(node, pos, len(seq), len(seq), inclusive=True)
        return ([*seq[:p], x, *seq[p:]],)

    return run


@cpu_kernel("SequenceAt", since=11)
def sequence_at(node: KernelNode) -> KernelFn:
    def run(seq: list[np.ndarray], pos: np.ndarray) -> tuple[np.ndarray]:
        return (seq[_position(node, pos, len(seq), 0, inclusive=False)],)

    return run


@cpu_kernel("SequenceErase", since=11)
def sequence_erase(node: KernelNode) -> KernelFn:
    def run(seq: list[np.ndarray], pos: np.ndarray | None = None) -> tuple[list[np.ndarray]]:
        if not seq:
            raise _bad(node, "cannot erase from an empty sequence")
        p = _position(node, pos, len(seq), len(seq) - 1, inclusive=False)
        return (seq[:p] + seq[p + 1 :],)

    return run


@cpu_kernel("SequenceLength", since=11)
def sequence_length(node: KernelNode) -> KernelFn:
    return lambda seq: (np.array(len(seq), dtype=np.int64),)


@cpu_kernel("SplitToSequence", since=11)
def split_to_sequence(node: KernelNode) -> KernelFn:
    axis = node.attr("axis", 0)
    keepdims = bool(node.attr("keepdims", 1))

    def run(x: np.ndarray, split: np.ndarray | None = None) -> tuple[list[np.ndarray]]:
        a = norm_axis(node, axis, x.ndim)
        dim = x.shape[a]
        if split is None:
            parts = np.split(x, dim, axis=a) if dim else []
            return ([p if keepdims else p.squeeze(a) for p in parts],)
        s = np.asarray(split)
        if s.ndim == 0:
            chunk = int(s)
            if chunk <= 0:
                raise _bad(node, f"split size {chunk} must be positive")
            cuts = list(range(chunk, dim, chunk))
        else:
            sizes = [int(v) for v in s.tolist()]
            if sum(sizes) != dim or any(v < 0 for v in sizes):
                raise _bad(node, f"split {sizes} does not sum to the dim {dim}")
            cuts = np.cumsum(sizes)[:-1].tolist()
        return (np.split(x, cuts, axis=a),)

    return run


@cpu_kernel("ConcatFromSequence", since=11)
def concat_from_sequence(node: KernelNode) -> KernelFn:
    axis = node.attr("axis")
    new_axis = bool(node.attr("new_axis", 0))

    def run(seq: list[np.ndarray]) -> tuple[np.ndarray]:
        if not seq:
            raise _bad(node, "cannot concatenate an empty sequence")
        rank = seq[0].ndim + (1 if new_axis else 0)
        a = norm_axis(node, axis, rank)
        try:
            return ((np.stack if new_axis else np.concatenate)(seq, axis=a),)
        except ValueError as e:
            raise _bad(node, f"sequence elements do not fit together: {e}") from None

    return run
