"""The long tail: ops without an own CPU kernel run through onnx.reference, behind the same
kernel interface. The partition report marks these nodes (source "onnx.reference") so users see
which nodes run on the slow path.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import numpy as np
from onnx import TypeProto, helper

if TYPE_CHECKING:  # imported by the first reference kernel: 15 ms a session may not need
    from onnx.reference import ReferenceEvaluator

from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.seed import random_state

__all__ = ["reference_kernel", "reference_supports"]


def _graph_for(kn: KernelNode) -> Any:
    node = kn.node
    inputs = []
    for name, info in zip(node.inputs, node.input_infos):
        if name:
            tp = (
                info.type_proto if info is not None and info.type_proto is not None else TypeProto()
            )
            inputs.append(helper.make_value_info(name, tp))
    outputs = [helper.make_value_info(o, TypeProto()) for o in node.outputs if o]
    return helper.make_graph([node.proto], f"ref_{node.name}", inputs, outputs)


_DOMAIN_MODULES = {
    "": "onnx.reference.ops",
    "ai.onnx.ml": "onnx.reference.ops.aionnxml",
    "ai.onnx.preview": "onnx.reference.ops.aionnx_preview",
    "ai.onnx.preview.training": "onnx.reference.ops.aionnx_preview_training",
    "experimental": "onnx.reference.ops.experimental",
}


@functools.cache
def _has_impl(domain: str, op_type: str, opset: int) -> str | None:
    module = _DOMAIN_MODULES.get(domain)
    if module is None:
        return f"onnx.reference has no domain {domain!r}"
    try:
        importlib.import_module(module).load_op(domain, op_type, opset)
    except Exception as e:
        return f"onnx.reference cannot run it: {str(e).splitlines()[0][:160]}"
    return None


def reference_supports(kn: KernelNode) -> str | None:
    """None when onnx.reference can run the node, else the reason it cannot."""
    if kn.node.implicit_inputs:
        return "its subgraphs read outer-scope values, which onnx.reference cannot receive"
    return _has_impl(kn.domain, kn.op_type, kn.opset)


def reference_kernel(kn: KernelNode) -> KernelFn:
    """A kernel function that runs one node with a ReferenceEvaluator built once."""
    from onnx.reference import ReferenceEvaluator

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ev = ReferenceEvaluator(_graph_for(kn), opsets=dict(kn.node.graph.opsets))
    in_names = kn.node.inputs
    out_names = kn.node.outputs
    produced = [o for o in out_names if o]
    reseed = _reseeder(kn, ev)

    def run(*inputs: Any) -> tuple[Any, ...]:
        feeds = {n: v for n, v in zip(in_names, inputs) if n}
        with warnings.catch_warnings(), reseed():
            warnings.simplefilter("ignore")
            got = dict(zip(produced, ev.run(None, feeds)))
        return tuple(_as_value(got.get(o)) if o else None for o in out_names)

    return run


# onnx.reference draws an unseeded random op from fresh OS entropy on every run
_RANDOM_OPS = frozenset(
    {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Bernoulli"}
)


def _reseeder(kn: KernelNode, ev: ReferenceEvaluator) -> Callable[[], AbstractContextManager[Any]]:
    """For a random op without a `seed` attribute: a context that seeds each run from the
    node's own generator, which `turnout.set_seed` seeds (so a seeded process repeats itself,
    and an unseeded one still draws fresh numbers each run)."""
    if kn.op_type not in _RANDOM_OPS or kn.domain or kn.attr("seed") is not None:
        return contextlib.nullcontext
    op = ev.rt_nodes_[0]
    rng = random_state()
    lock = threading.Lock()  # the seed is an attribute of the shared evaluator

    @contextlib.contextmanager
    def seeded() -> Iterator[None]:
        with lock:
            op.seed = float(rng.randint(0, 2**31 - 1))
            yield

    return seeded


def _as_value(v: Any) -> Any:
    if isinstance(v, np.generic):
        return np.asarray(v)
    return v
