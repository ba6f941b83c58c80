"""The engine's evaluator for constant folding: a model without inputs, run on the numpy CPU
kernels.

The optimizer sits below the engine and cannot build sessions; the pipeline hands it this
function (`turnout.optimizer.optimize(evaluate=...)`), so folding computes exactly what the
CPU provider would compute at run time, through the same partition, compile and plan stages.
"""

from __future__ import annotations

from typing import Any

import onnx

from turnout.engine.executor.build import compile_partition
from turnout.engine.executor.plan import NO_TERMINATE, ignore_fp_errors, restore_fp_errors
from turnout.engine.outputs import owned_outputs
from turnout.engine.partition import partition_graph
from turnout.engine.provider_creation import create_provider
from turnout.engine.provider_selection import CPU_PROVIDER
from turnout.graph.ir import Graph
from turnout.graph.limits import ResourceLimits
from turnout.graph.model import infer_shapes
from turnout.sdk.plugins import registry

__all__ = ["evaluate_model", "optimize"]


def evaluate_model(model: onnx.ModelProto) -> list[Any]:
    """The outputs of `model` (no inputs) computed by the CPU provider's numpy kernels, through
    the engine's partition, compile and plan stages (not optimized: folding runs inside the
    optimizer)."""
    # the numpy CPU provider alone: a host provider (numba) would compile kernels for one run
    provider = create_provider(registry.resolve(CPU_PROVIDER))
    inferred = infer_shapes(model, ResourceLimits().shape_data_max_elements)
    opsets = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in inferred.opset_import}
    graph = Graph.from_proto(inferred.graph, opsets)
    prepared = compile_partition(partition_graph(graph, [provider]), [provider], {}, "", None)
    plan = prepared.plan(frozenset(), release=True)
    provider.on_run_start()
    fp = ignore_fp_errors()
    try:
        return owned_outputs(plan.run(NO_TERMINATE), ())
    finally:
        restore_fp_errors(fp)
        provider.on_run_end()


def optimize(model: onnx.ModelProto, level: Any = 99, **kwargs: Any) -> tuple[onnx.ModelProto, Any]:
    """`turnout.optimizer.optimize` with this evaluator: the graph rewritten as a session's
    pipeline rewrites it (the optimizer alone folds only what it computes itself)."""
    from turnout.optimizer import optimize as run_passes

    return run_passes(model, level, evaluate=evaluate_model, **kwargs)
