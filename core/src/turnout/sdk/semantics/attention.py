"""Input checks of the Attention op (ai.onnx, opset 23 and later).

Q, K and V come 3-D (batch, sequence, heads * head size; the head counts are attributes) or
4-D (batch, heads, sequence, head size); past_key/past_value extend K and V along the
sequence; the query heads are a multiple of the key/value heads (grouped-query attention).
`attention_shapes` checks one run's input shapes against all of that and returns the sizes a
kernel needs, so a malformed input is the same InvalidArgument on every provider. It takes
shapes, not arrays, so device arrays need no transfer to be checked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from turnout.graph.errors import InvalidArgument

__all__ = ["AttentionShapes", "attention_shapes"]

Shape = Sequence[int]


@dataclass(frozen=True)
class AttentionShapes:
    """The sizes of one Attention run, every input already checked against the others."""

    batch: int
    q_heads: int
    kv_heads: int
    q_len: int
    past_len: int
    kv_len: int  # keys attended to: past_len plus K's sequence
    head_size: int  # of Q and K
    v_head_size: int
    rank: int  # 3 or 4, as Q, K and V came

    @property
    def group(self) -> int:
        """Query heads per key/value head: query head h reads KV head h // group."""
        return self.q_heads // self.kv_heads


def _as_4d(name: str, what: str, shape: Shape, heads: int | None) -> tuple[int, ...]:
    if len(shape) == 4:
        return tuple(int(d) for d in shape)
    b, s, hidden = (int(d) for d in shape)
    if heads is None or heads <= 0 or hidden % heads:
        raise InvalidArgument(
            f"{name}: {what} hidden size {hidden} is not a multiple of {heads} heads"
        )
    return (b, heads, s, hidden // heads)


def attention_shapes(
    name: str,
    version: int,
    q: Shape,
    k: Shape,
    v: Shape,
    *,
    q_num_heads: int | None,
    kv_num_heads: int | None,
    attn_mask: Shape | None = None,
    past_key: Shape | None = None,
    past_value: Shape | None = None,
    nonpad_kv_seqlen: Shape | None = None,
) -> AttentionShapes:
    """Check one run's input shapes (None for an absent optional input) and size the run.

    `version` is the node's since-version: from 25 on, a 4-D input with the head-count
    attributes set is refused. attn_mask is 1-D to 4-D (the ONNX node tests use 1-D) and must
    broadcast to (batch, q_heads, q_len, keys) with at most `kv_len` keys (the spec masks out
    the keys past its end).
    """
    if not len(q) == len(k) == len(v) or len(q) not in (3, 4):
        raise InvalidArgument(
            f"{name}: Q, K, V must all be 3-D or all 4-D, got ranks {len(q)}, {len(k)}, {len(v)}"
        )
    rank = len(q)
    if rank == 3 and (q_num_heads is None or kv_num_heads is None):
        raise InvalidArgument(f"{name}: 3-D inputs need q_num_heads and kv_num_heads")
    if rank == 4 and version >= 25 and (q_num_heads is not None or kv_num_heads is not None):
        raise InvalidArgument(f"{name}: q_num_heads/kv_num_heads must not be set for 4-D")
    nb, hq, sq, dq = _as_4d(name, "Q", q, q_num_heads)
    k4 = _as_4d(name, "K", k, kv_num_heads)
    v4 = _as_4d(name, "V", v, kv_num_heads)
    hkv, skv = k4[1], k4[2]
    if (
        k4[0] != nb
        or v4[0] != nb
        or v4[1] != hkv
        or v4[2] != skv
        or k4[3] != dq
        or hkv == 0
        or hq % hkv
    ):
        raise InvalidArgument(
            f"{name}: shapes Q {tuple(q)}, K {tuple(k)}, V {tuple(v)} do not fit "
            "(batch, heads, sequence, head size) with query heads a multiple of KV heads"
        )
    if (past_key is None) != (past_value is None):
        raise InvalidArgument(f"{name}: past_key and past_value must be given together")
    past = 0
    if past_key is not None and past_value is not None:
        if nonpad_kv_seqlen is not None:
            raise InvalidArgument(f"{name}: nonpad_kv_seqlen cannot be used with a past cache")
        pk, pv = tuple(past_key), tuple(past_value)
        if (
            len(pk) != 4
            or len(pv) != 4
            or pk[:2] != (nb, hkv)
            or pv[:2] != (nb, hkv)
            or pk[2] != pv[2]
            or pk[3] != dq
            or pv[3] != v4[3]
        ):
            raise InvalidArgument(
                f"{name}: past_key {pk}/past_value {pv} do not fit K {k4}/V {v4} "
                "(batch, kv heads, past sequence, head size)"
            )
        past = int(pk[2])
    total = past + skv
    if nonpad_kv_seqlen is not None and tuple(nonpad_kv_seqlen) != (nb,):
        raise InvalidArgument(
            f"{name}: nonpad_kv_seqlen of shape {tuple(nonpad_kv_seqlen)} is not ({nb},)"
        )
    if attn_mask is not None:
        mask = tuple(int(d) for d in attn_mask)
        if not 1 <= len(mask) <= 4:  # (onnxruntime 1.32 refuses 1-D too; the ONNX tests use it)
            raise InvalidArgument(f"{name}: attn_mask must be 1-D to 4-D, got shape {mask}")
        if mask[-1] > total:
            raise InvalidArgument(f"{name}: attn_mask of shape {mask} does not fit {total} keys")
        lead = (nb, hq, sq)[4 - len(mask) :]
        if any(m not in (1, t) for m, t in zip(mask[:-1], lead)):
            raise InvalidArgument(
                f"{name}: attn_mask of shape {mask} does not broadcast to {(nb, hq, sq, total)}"
            )
    return AttentionShapes(nb, hq, hkv, sq, past, total, dq, v4[3], rank)
