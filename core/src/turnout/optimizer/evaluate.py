"""Running nodes at optimization time, through the evaluator the caller handed in.

Constant folding and the QDQ table fold compute values by running nodes; the optimizer is below
the engine, so it never builds a session: `PassContext.evaluate` (the engine's, when the
pipeline runs the optimizer) does the running.
"""

from __future__ import annotations

import numpy as np
from onnx import NodeProto, helper

from turnout.graph.tensors import from_array
from turnout.optimizer.base import PassContext
from turnout.optimizer.graph import OptGraph

__all__ = ["evaluate_nodes"]


def evaluate_nodes(
    g: OptGraph, nodes: list[NodeProto], known: dict[str, np.ndarray], ctx: PassContext
) -> dict[str, np.ndarray] | None:
    """Run `nodes` (all inputs constant or in `known`) with the evaluator the caller handed
    in, as one model; None when there is none or any node fails."""
    if ctx.evaluate is None:
        return None
    produced = {o for n in nodes for o in n.output if o}
    inputs = dict.fromkeys(x for n in nodes for x in n.input if x and x not in produced)
    inits = [
        from_array(known[x] if x in known else g.const(x), x)  # type: ignore[arg-type]
        for x in inputs
    ]
    outputs = [o for n in nodes for o in n.output if o]
    graph = helper.make_graph(
        list(nodes), "fold", [], [helper.make_empty_tensor_value_info(o) for o in outputs], inits
    )
    model = helper.make_model(
        graph, opset_imports=list(g.model.opset_import), ir_version=g.model.ir_version
    )
    try:
        results = ctx.evaluate(model)
    except Exception:
        return None
    out: dict[str, np.ndarray] = {}
    for name, v in zip(outputs, results):
        if not isinstance(v, np.ndarray):
            return None
        out[name] = v
    return out
