"""What a LinearAttention node (ai.onnx 27) means: its update rule, sizes and input checks.

The recurrent state S (batch, kv_heads, d_k, d_v) is updated per step by the rule: `linear`
S += k ⊗ v; `gated` first decays S by exp(decay); `delta` writes beta * (v - Sᵀk) instead of
v; `gated_delta` both. The output of query head h reads kv head h // (q_heads / kv_heads),
scaled by `scale` (0 or absent: 1/sqrt(d_k)). Providers compute the recurrence; the checks and
errors for a malformed node are these.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from turnout.graph.errors import InvalidArgument
from turnout.sdk.provider import KernelNode

__all__ = ["LinearAttentionAttrs", "LinearAttentionShapes", "linear_attention_attrs"]

UPDATE_RULES = ("linear", "gated", "delta", "gated_delta")


@dataclass(frozen=True)
class LinearAttentionShapes:
    """Sizes of one run; `decay_per_key` says decay holds one value per key dimension (else
    one per head); `beta_heads` is beta's last dimension (kv_heads or 1)."""

    batch: int
    steps: int
    d_k: int
    d_v: int
    group: int
    scale: float
    decay_per_key: bool
    beta_heads: int


@dataclass(frozen=True)
class LinearAttentionAttrs:
    name: str
    rule: str
    q_heads: int
    kv_heads: int
    scale: float | None

    @property
    def gating(self) -> bool:
        return self.rule in ("gated", "gated_delta")

    @property
    def delta(self) -> bool:
        return self.rule in ("delta", "gated_delta")

    def shapes(
        self,
        q: Any,
        k: Any,
        v: Any,
        past: Any | None = None,
        decay: Any | None = None,
        beta: Any | None = None,
    ) -> LinearAttentionShapes:
        """Check the inputs' shapes (tuples of ints; None for an absent input)."""
        name, hq, hkv = self.name, self.q_heads, self.kv_heads
        for what, given, needed in (("decay", decay, self.gating), ("beta", beta, self.delta)):
            if needed != (given is not None):
                verb = "requires" if needed else "forbids"
                raise InvalidArgument(f"{name}: update_rule {self.rule!r} {verb} the {what} input")
        for what, s in (("query", q), ("key", k), ("value", v)):
            if len(s) != 3:
                raise InvalidArgument(f"{name}: {what} must be (batch, seq, heads * dim), got {s}")
        b, t = q[0], q[1]
        if q[2] % hq or k[2] % hkv or v[2] % hkv or k[:2] != (b, t) or v[:2] != (b, t):
            raise InvalidArgument(
                f"{name}: query {q}, key {k} and value {v} do not split into {hq} query and "
                f"{hkv} key/value heads over the same (batch, seq)"
            )
        d_k, d_v = q[2] // hq, v[2] // hkv
        if k[2] // hkv != d_k:
            raise InvalidArgument(f"{name}: key head size {k[2] // hkv} != query's {d_k}")
        per_key = False
        if decay is not None:
            if len(decay) != 3 or decay[:2] != (b, t) or decay[2] not in (hkv, hkv * d_k):
                raise InvalidArgument(
                    f"{name}: decay {decay} must be {(b, t)} by kv_num_heads ({hkv}) or "
                    f"kv_num_heads * d_k ({hkv * d_k})"
                )
            per_key = decay[2] == hkv * d_k and d_k != 1
        beta_heads = 0
        if beta is not None:
            if len(beta) != 3 or beta[:2] != (b, t) or beta[2] not in (hkv, 1):
                raise InvalidArgument(
                    f"{name}: beta {beta} must be {(b, t)} by kv_num_heads ({hkv}) or 1"
                )
            beta_heads = beta[2]
        if past is not None and past != (b, hkv, d_k, d_v):
            raise InvalidArgument(f"{name}: past_state {past} does not match {(b, hkv, d_k, d_v)}")
        scale = self.scale if self.scale else 1.0 / math.sqrt(d_k)
        return LinearAttentionShapes(b, t, d_k, d_v, hq // hkv, scale, per_key, beta_heads)


def linear_attention_attrs(node: KernelNode) -> LinearAttentionAttrs:
    """Decode and check a LinearAttention node's attributes (chunk_size is a tuning hint with
    no effect on the result)."""
    name = node.name
    rule = node.attr("update_rule", "gated_delta")
    if isinstance(rule, bytes):
        rule = rule.decode()
    if rule not in UPDATE_RULES:
        raise InvalidArgument(
            f"{name}: unknown update_rule {rule!r}, expected one of {UPDATE_RULES}"
        )
    hq, hkv = node.attr("q_num_heads"), node.attr("kv_num_heads")
    if hq is None or hkv is None:
        raise InvalidArgument(f"{name}: q_num_heads and kv_num_heads are required")
    hq, hkv = int(hq), int(hkv)
    if hq <= 0 or hkv <= 0 or hq % hkv:
        raise InvalidArgument(
            f"{name}: q_num_heads ({hq}) must be a positive multiple of kv_num_heads ({hkv})"
        )
    scale = node.attr("scale")
    return LinearAttentionAttrs(name, rule, hq, hkv, None if scale is None else float(scale))
