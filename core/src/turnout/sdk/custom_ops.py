"""Operator domains that plugins bring (`turnout_custom_ops`), known to the whole pipeline.

A plugin returns `CustomOpSet`s: a domain, a `KernelRegistry` of numpy kernels for its ops,
and their schemas (`turnout.graph.contrib.OpSpec`, the form turnout's com.microsoft ops use: inputs,
outputs, type constraints, attributes, output type/shape inference). Then:

- the loader accepts models that use the domain;
- onnx's checker and shape inference, and turnout's type checks, know each op by its schema;
- the CPU provider runs the ops with the plugin's kernels (after any provider that claims
  them), and the partition report marks them "custom op".

An op of the domain that the set has no kernel for is refused at session creation, naming it.
`SessionOptions.register_custom_ops_library(path)` installs the sets of a module by path, as
onnxruntime loads a custom-op library.
"""

from __future__ import annotations

from turnout.sdk.op_sets import CUSTOM_SOURCE, CustomOpSet, forget, install, lookup
from turnout.sdk.op_sets import installed_domains as _installed_domains
from turnout.sdk.plugins import registry

__all__ = ["CUSTOM_SOURCE", "CustomOpSet", "custom_domains", "forget", "install", "lookup"]


def custom_domains() -> frozenset[str]:
    """The domains plugins brought (the loader accepts them)."""
    registry.all()  # plugins discovered, their op sets installed
    return _installed_domains()
