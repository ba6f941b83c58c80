"""The names that say whether a model needs the contrib schemas, without loading them.

Registering the schemas (`turnout.graph.contrib.register`) imports onnx.reference and defines
about fifty ops: 15-20 ms that a model of onnx's own ops never needs. The loader and the graph
stages read these names to register only for a model that uses a contrib op.
"""

from __future__ import annotations

__all__ = ["DOMAIN", "DOMAINS", "NCHWC_DOMAIN", "ONNX_DOMAIN_OPS", "OPSET"]

DOMAIN = "com.microsoft"
OPSET = 1
"""The only com.microsoft opset version onnxruntime defines."""

NCHWC_DOMAIN = "com.microsoft.nchwc"
"""onnxruntime's blocked-layout ops (`turnout.graph.contrib.nchwc_layout`)."""

DOMAINS = frozenset((DOMAIN, NCHWC_DOMAIN))
"""The domains whose every op is a contrib op."""

ONNX_DOMAIN_OPS = frozenset(("LayerNormalization", "SimplifiedLayerNormalization"))
"""Contrib ops that onnxruntime defines in the ONNX domain: SimplifiedLayerNormalization, which
onnx lacks, and LayerNormalization below opset 17, where onnx's begins
(`tests/core/test_contrib_loading.py` checks this list against the schemas)."""
