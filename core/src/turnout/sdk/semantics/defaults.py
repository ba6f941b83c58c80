"""Attribute defaults of the ai.onnx ops, read from onnx's schemas: the one table every
provider's kernels and code generators read (Selu's alpha and gamma, HardSigmoid's alpha and
beta, LeakyRelu's alpha, ...).

A kernel holding a `KernelNode` needs none of this: `KernelNode.attr(name)` fills in the
schema default of the node's version, as onnx.reference's `OpRun` does. This serves the places
without one: code generators working on graph nodes, the fused ops' activation table, the
recurrent ops' activation functions. The values are the schema's float32 values (Selu's alpha
is 1.67326319217681884765625, not the float64 1.6732632423543772), as onnx.reference reads them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import onnx

from turnout.graph.ir import schema_defaults

__all__ = ["op_default", "op_defaults"]

_LATEST = onnx.defs.onnx_opset_version()


def op_defaults(op_type: str, opset: int = _LATEST) -> Mapping[str, Any]:
    """The attribute defaults of ai.onnx's `op_type` at `opset` (the newest by default)."""
    return schema_defaults("", op_type, opset)


def op_default(op_type: str, name: str, opset: int = _LATEST) -> Any:
    """One attribute's schema default; a KeyError names an attribute with none."""
    return op_defaults(op_type, opset)[name]
