"""What the training ops of ai.onnx.preview.training (Adagrad, Adam, Momentum) mean: their
attributes, input grouping and the step's scalar coefficients.

Inputs are R (learning rate) and T (update count), then n tensors per role: X, G and the
optimizer's state (Adagrad: H; Momentum: V; Adam: V, H), all X first, then all G, and so
on; outputs are the new X, then each state. The scalars below depend only on R, T and the
attributes, so a provider computes them once per run on the host and applies them to the
tensors wherever they live.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from turnout.graph.errors import InvalidArgument
from turnout.sdk.provider import KernelNode

__all__ = ["OPTIMIZER_STATES", "OptimizerAttrs", "optimizer_attrs", "optimizer_groups"]

OPTIMIZER_STATES = {"Adagrad": 1, "Momentum": 1, "Adam": 2}
"""State tensors per optimized tensor, besides X and G."""

_DEFAULTS: dict[str, dict[str, float]] = {
    "Adagrad": {"norm_coefficient": 0.0, "decay_factor": 0.0, "epsilon": 1e-6},
    "Adam": {
        "alpha": 0.9,
        "beta": 0.999,
        "epsilon": 1e-6,
        "norm_coefficient": 0.0,
        "norm_coefficient_post": 0.0,
    },
}


@dataclass(frozen=True)
class OptimizerAttrs:
    op: str
    values: dict[str, float]
    nesterov: bool

    def __getitem__(self, key: str) -> float:
        return self.values[key]

    def rate(self, r: float, t: int) -> float:
        """The step's learning rate: Adagrad's decayed by T, Adam's bias-corrected (T > 0)."""
        if self.op == "Adagrad":
            return r / (1 + t * self["decay_factor"])
        if self.op == "Adam" and t > 0:
            return r * math.sqrt(1 - self["beta"] ** t) / (1 - self["alpha"] ** t)
        return r

    def gradient_weight(self, t: int) -> float:
        """Momentum's coefficient of the gradient: 1 at the first update (T = 0), else beta."""
        return self["beta"] if t > 0 else 1.0


def optimizer_attrs(node: KernelNode) -> OptimizerAttrs:
    """Decode the attributes with the schema's defaults; Momentum's are all required."""
    op = node.op_type
    if op == "Momentum":
        names = ("alpha", "beta", "norm_coefficient")
        missing = [n for n in (*names, "mode") if node.attr(n) is None]
        if missing:
            raise InvalidArgument(f"{node.name}: Momentum needs the attributes {missing}")
        mode = node.attr("mode")
        mode = mode.decode() if isinstance(mode, bytes) else str(mode)
        if mode not in ("standard", "nesterov"):
            raise InvalidArgument(f"{node.name}: unknown Momentum mode {mode!r}")
        return OptimizerAttrs(op, {n: float(node.attr(n)) for n in names}, mode == "nesterov")
    values = {n: float(node.attr(n, d)) for n, d in _DEFAULTS[op].items()}
    return OptimizerAttrs(op, values, False)


def optimizer_groups(name: str, op: str, inputs: list[Any]) -> list[list[Any]]:
    """The tensors after R and T split by role: [Xs, Gs, states...], each of n tensors."""
    roles = 2 + OPTIMIZER_STATES[op]
    rest = inputs[2:]
    if not rest or len(rest) % roles:
        raise InvalidArgument(
            f"{name}: {op} takes R, T and {roles} tensors per optimized tensor, got "
            f"{len(inputs)} inputs"
        )
    n = len(rest) // roles
    return [rest[i * n : (i + 1) * n] for i in range(roles)]
