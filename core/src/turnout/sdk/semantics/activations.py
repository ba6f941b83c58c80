"""The activation table of turnout's fused ops (FusedConv, FusedGemm, ...): names, parameter
defaults and numpy reference functions.

The optimizer folds an activation into the op before it and writes its name and parameters as
the `activation` and `activation_params` attributes. A provider reads them with `activation_of`
(unknown names raise the same error everywhere), and a provider that compiles its own epilogue
tests it against `activation(name, a, b)`; a provider that does not list a name in its table
should decline the node.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from turnout.graph.errors import InvalidArgument
from turnout.sdk.provider import KernelNode
from turnout.sdk.semantics.defaults import op_default
from turnout.sdk.semantics.numerics import gelu_erf, sigmoid, tanh, typed_constants

__all__ = [
    "ACTIVATION_DEFAULTS",
    "activation",
    "activation_of",
    "gelu",
    "gelu_tanh",
    "selu_scales",
]

Array = np.ndarray[Any, Any]


def gelu(x: Array) -> Any:
    """Gelu, exact: x * Phi(x) with the normal CDF (`numerics.gelu_erf`)."""
    return gelu_erf(x)


def selu_scales(alpha: float, gamma: float) -> tuple[float, float]:
    """Selu's two scales, (gamma, gamma * alpha), the product taken in float64.

    Every provider computes Selu as `gamma * x` for x > 0, else `(gamma * alpha) * expm1(x)`,
    each scale rounded once to the compute type and expm1 taken in double and rounded once
    (`numerics.expm1`): so their float32 results agree bit for bit (the conformance case
    `turnout_selu_default_alpha_gamma`), where `gamma * (alpha * exp(x) - alpha)`, `gamma *
    (alpha * expm1(x))` or a float32 expm1 round differently."""
    return float(gamma), float(gamma) * float(alpha)


def gelu_tanh(x: Array) -> Any:
    """Gelu's tanh approximation (approximate="tanh")."""
    t = x.dtype.type
    inner = t(np.sqrt(2 / np.pi)) * (x + t(0.044715) * x * x * x)
    return t(0.5) * x * (t(1) + np.tanh(inner))


# The fused activations and their (activation_params) defaults: the one list every provider's
# fused kernels read (the op schemas' defaults where the op has them). An empty name means none.
ACTIVATION_DEFAULTS: dict[str, tuple[float, float]] = {
    "": (0.0, 0.0),
    "Identity": (0.0, 0.0),
    "Relu": (0.0, 0.0),
    "LeakyRelu": (op_default("LeakyRelu", "alpha"), 0.0),
    "Sigmoid": (0.0, 0.0),
    "Tanh": (0.0, 0.0),
    "HardSigmoid": (op_default("HardSigmoid", "alpha"), op_default("HardSigmoid", "beta")),
    "Clip": (-np.inf, np.inf),
    "Gelu": (0.0, 0.0),
    "GeluTanh": (0.0, 0.0),
    "HardSwish": (1 / 6, 0.5),  # x * HardSigmoid(x)
    "Swish": (1.0, 0.0),  # x * sigmoid(alpha * x): SiLU at alpha 1
}


def activation_of(node: KernelNode) -> tuple[str, float, float]:
    """A fused node's activation name and its two parameters, defaults filled in."""
    name = str(node.attr("activation", "") or "")
    if name not in ACTIVATION_DEFAULTS:
        raise InvalidArgument(f"{node.name}: unknown fused activation {name!r}")
    given = list(node.attr("activation_params", []) or [])
    p0, p1 = (float(given[i]) if len(given) > i else ACTIVATION_DEFAULTS[name][i] for i in (0, 1))
    return name, p0, p1


_ZERO = typed_constants(0)


def activation(name: str, a: float, b: float, owned: bool = False) -> Callable[[Array], Any]:
    """The element-wise function a fused op applies after its main computation.

    `owned`: the argument is a fresh array of at least one dimension that the caller hands
    over, so Relu may write into it.
    """
    if name in ("", "Identity"):
        return lambda x: x
    if name == "Relu":
        if owned:
            return lambda x: np.maximum(x, _ZERO(x.dtype)[0], out=x)
        return lambda x: np.maximum(x, _ZERO(x.dtype)[0])
    if name == "LeakyRelu":
        return lambda x: np.where(x < _ZERO(x.dtype)[0], x * x.dtype.type(a), x)
    if name == "Sigmoid":  # Sigmoid, Tanh, Swish: onnxruntime's MLAS functions in float32
        return sigmoid
    if name == "Tanh":
        return tanh
    if name == "HardSigmoid":
        return lambda x: np.clip(x * x.dtype.type(a) + x.dtype.type(b), 0, 1).astype(x.dtype)
    if name == "Clip":
        return lambda x: np.minimum(np.maximum(x, x.dtype.type(a)), x.dtype.type(b))
    if name == "Gelu":
        return gelu
    if name == "HardSwish":
        return lambda x: x * np.clip(x * x.dtype.type(a) + x.dtype.type(b), 0, 1).astype(x.dtype)
    if name == "Swish":
        return lambda x: x * sigmoid(x * x.dtype.type(a))
    assert name == "GeluTanh", name  # activation_of() admits only ACTIVATION_DEFAULTS' names
    return gelu_tanh
