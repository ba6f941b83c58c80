"""The session pipeline, one function per stage: load, validate, optimize, partition, compile,
plan.

`InferenceSession` is a facade over these stages: it calls them in this order and keeps what
they return. Each stage takes what the one before produced and the session's options, so a
tool (a compiler of artifacts, `turnout explain`, a test) can run the stages it needs and
inspect what lies between them:

    model = load(source, options)               # parsed, external data, known operators
    validate(model, label, decoded)             # valid ONNX, types agree with the schemas
    model = drop_decoded_bytes(model, decoded)  # the weights held once: as decoded arrays
    optimized = optimize(model, providers, options, label)   # rewritten graph, as IR
    part = partition(optimized.graph, providers)             # node -> provider
    prepared = compile(part, providers, reports)             # kernels built, groups compiled
    runnable = plan(prepared)                                # copies inserted, steps ordered

Nested graphs (If, Loop, Scan bodies) go through partition, compile and plan when their
control-flow kernel is built, with the same providers.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from turnout.engine.evaluate import evaluate_model
from turnout.engine.executor.build import PreparedGraph, compile_partition
from turnout.engine.executor.plan import Plan
from turnout.engine.options import EngineOptions
from turnout.engine.partition import GraphPartition, PartitionReport
from turnout.engine.placement import PlacementPolicy, PriorityPlacement, policy_name
from turnout.graph.errors import GraphPassError, OptimizationSkippedWarning
from turnout.graph.ir import Graph, schema_since_version
from turnout.graph.logs import logger
from turnout.graph.model import (
    ModelSource,
    allow_unknown_domains,
    infer_shapes,
    read_model,
    validate_model,
    without_decoded_data,
)
from turnout.graph.shape_inference import refuse_oversized_values
from turnout.graph.shared_arrays import SharedArrays
from turnout.graph.tensors import TYPED_FIELDS, from_array
from turnout.sdk.custom_ops import custom_domains
from turnout.sdk.plugins import graph_passes
from turnout.sdk.provider import ExecutionProvider

__all__ = [
    "OptimizedModel",
    "compile",
    "drop_decoded_bytes",
    "load",
    "optimize",
    "partition",
    "plan",
    "save_optimized",
    "validate",
]


@dataclass(frozen=True)
class OptimizedModel:
    """What `optimize` hands on: the rewritten model (shapes inferred), its IR, and the
    optimizer's report of what it did."""

    model: onnx.ModelProto
    graph: Graph
    report: Any  # optimizer.OptimizationReport


def load(
    source: ModelSource, options: EngineOptions, mapped: dict[str, np.ndarray] | None = None
) -> onnx.ModelProto:
    """Parse the model, with the external data and free-dimension values the options supply;
    refuse what cannot be read or uses operators nobody defines. `mapped`, given, receives
    the big initializers of external files as arrays over the mapped files (their tensors
    keep no bytes): pass it on to `validate` as `decoded`."""
    model = read_model(
        source,
        custom_domains=custom_domains(),
        supplied=options.supplied,
        allow_unknown=allow_unknown_domains(options.config),
        mapped=mapped,
    )
    _override_free_dims(model, options)
    return model


def validate(
    model: onnx.ModelProto, label: str, decoded: dict[str, np.ndarray] | None = None
) -> None:
    """The graph is valid ONNX as onnxruntime checks it, and its types agree with the schemas.
    `decoded` receives the big initializers the checks decoded (pass it on to `optimize`)."""
    validate_model(model, label, decoded)


def drop_decoded_bytes(model: onnx.ModelProto, decoded: dict[str, np.ndarray]) -> onnx.ModelProto:
    """`model` without the bytes of the initializers `validate` decoded into `decoded`: a copy
    (the parsed proto can then be freed) for `optimize` with that same `decoded`, which
    keeps the arrays for it (`turnout.graph.model.without_decoded_data`)."""
    return without_decoded_data(model, decoded)


def optimize(
    model: onnx.ModelProto,
    providers: Sequence[ExecutionProvider],
    options: EngineOptions,
    label: str,
    already_optimized: bool = False,
    decoded: dict[str, np.ndarray] | None = None,
    shared: SharedArrays | None = None,
) -> OptimizedModel:
    """Rewrite the graph at the options' level for these providers (a fusion fires only when
    the provider that would run it has the fused kernel), infer shapes, build the IR.

    `decoded` caches `model`'s initializers as arrays across calls (a session's two tiers
    optimize the same model: their IRs share the arrays of the weights neither changes); it
    must hold those `drop_decoded_bytes` took out of `model`. `shared`: the arrays of the
    other tier's IR, which this optimization's equal arrays become (`SharedArrays`).
    The returned proto holds no data for the big initializers the IR holds as arrays
    (`full_model` puts it back): the weights live once, and copying, checking and inferring
    the proto costs no copy of them.

    A graph pass that fails does not stop the model from running: the model goes on
    unoptimized, with an `OptimizationSkippedWarning`. A compiled model (`already_optimized`)
    is the optimized graph already: only shapes are inferred.
    """
    from turnout.optimizer import Level, OptimizationReport
    from turnout.optimizer import optimize as run_passes
    from turnout.optimizer.layout import NHWC_OPS, nhwc_ops

    values: dict[str, np.ndarray] = {}  # initializers the optimizer already decoded
    if already_optimized:  # its initializers are the IR's: those decoded already are used
        values = dict(decoded) if decoded else values
        return _as_ir(model, False, OptimizationReport(Level.DISABLE), values, options, label)
    try:
        optimized, report = run_passes(
            model,
            options.optimization_level,
            supports=_fused_op_support(
                providers, model, any_provider=policy_name(options.config) == "measured"
            ),
            extra_passes=graph_passes(),
            keep_initializers=options.overrides,
            limits=options.limits,
            values=values,
            nhwc_ops=(
                nhwc_ops(providers, _opsets(model))
                if _uses_any(model.graph, {op for _, op in NHWC_OPS})
                else frozenset()  # asking loads the providers' conv and pool kernels
            ),
            evaluate=evaluate_model,
            decoded=decoded,
            values_only_above=options.limits.shape_data_max_elements,
            shared=shared,
        )
    except GraphPassError as e:
        message = f"{label}: graph optimization skipped: {e}"
        warnings.warn(message, OptimizationSkippedWarning, stacklevel=4)
        logger.warning("%s", message)
        optimized, report, values = model, OptimizationReport(Level.DISABLE), {}
    if optimized is model and decoded:  # not optimized: the initializers are the model's own
        values = {**decoded, **values}
    return _as_ir(optimized, optimized is not model, report, values, options, label)


def _as_ir(
    model: onnx.ModelProto,
    owned: bool,
    report: Any,
    values: dict[str, np.ndarray],
    options: EngineOptions,
    label: str,
) -> OptimizedModel:
    """Shapes inferred (into `model` when `owned`, else into a copy: inference writes into
    its model), oversized values refused, the IR built."""
    if not owned:
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        model = copy
    limits = options.limits
    inferred = infer_shapes(model, limits.shape_data_max_elements)
    refuse_oversized_values(inferred, limits.max_tensor_elements, label)
    opsets = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in inferred.opset_import}
    graph = Graph.from_proto(inferred.graph, opsets, values=values)
    return OptimizedModel(inferred, graph, report)


def _holds_data(t: onnx.TensorProto) -> bool:
    """Whether `t` has its values (the optimizer leaves big ones without, see `optimize`)."""
    return t.HasField("raw_data") or any(len(getattr(t, f)) for f in TYPED_FIELDS)


def full_model(model: onnx.ModelProto, graph: Graph) -> onnx.ModelProto:
    """A copy of an optimized `model` with the initializer values `optimize` left in `graph`
    written back (each tensor's other fields as they were): the model to save or compile."""
    full = onnx.ModelProto()
    full.CopyFrom(model)
    for t in full.graph.initializer:
        value = graph.initializers.get(t.name)
        if not isinstance(value, np.ndarray) or _holds_data(t):
            continue
        encoded = from_array(value, t.name)
        if encoded.HasField("raw_data"):
            t.raw_data = encoded.raw_data
        for field in TYPED_FIELDS:
            getattr(t, field).extend(getattr(encoded, field))
    return full


def partition(
    graph: Graph,
    providers: Sequence[ExecutionProvider],
    policy: PlacementPolicy | None = None,
) -> GraphPartition:
    """Each node to a provider that claims it, by `policy` (`turnout.engine.placement`): the
    first in priority order (the default), or where the measured plan is fastest; with the
    declines' reasons. A node nobody claims is a `NotImplemented` naming it."""
    return (policy or PriorityPlacement()).place(graph, providers)


def compile(
    part: GraphPartition,
    providers: Sequence[ExecutionProvider],
    reports: dict[str, PartitionReport],
    constants_override: dict[str, Any] | None = None,
    checkpoint: Callable[[], None] | None = None,
) -> PreparedGraph:
    """Build each claimed node's kernel and compile each provider's fused groups; the
    partition report of the main graph lands in `reports[""]`. `checkpoint` is called before
    each kernel (a background build stops there)."""
    return compile_partition(part, providers, reports, "", constants_override, checkpoint)


def plan(
    prepared: PreparedGraph, options: EngineOptions, device_outputs: frozenset[str] = frozenset()
) -> Plan:
    """Insert the copies where values cross devices and order the steps into a runnable plan
    (`device_outputs` stay on their device, for IO binding). Each intermediate is released
    after its last reader unless `options.enable_mem_reuse` is off."""
    return prepared.plan(device_outputs, release=bool(options.enable_mem_reuse))


def save_optimized(model: onnx.ModelProto, options: EngineOptions) -> None:
    """Write the optimized model (`EngineOptions.optimized_model_filepath`); large
    initializers go to an external file when asked (onnxruntime's config entry
    session.optimized_model_external_initializers_file_name)."""
    path = options.optimized_model_filepath
    external = options.config.get("session.optimized_model_external_initializers_file_name")
    if not external:
        onnx.save(model, path)
        return
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    threshold = int(
        options.config.get("session.optimized_model_external_initializers_min_size_in_bytes", 1024)
    )
    onnx.save(
        copy,
        path,
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=external,
        size_threshold=threshold,
    )


def _override_free_dims(model: onnx.ModelProto, options: EngineOptions) -> None:
    """Fix symbolic input dims by name or denotation before shape inference sees them."""
    by_name = options.free_dims_by_name
    by_denotation = options.free_dims_by_denotation
    if not by_name and not by_denotation:
        return
    for vi in model.graph.input:
        for d in vi.type.tensor_type.shape.dim:
            value = by_name.get(d.dim_param) if d.dim_param else None
            if value is None and d.denotation:
                value = by_denotation.get(d.denotation)
            if value is not None:
                d.dim_value = value


def _fused_op_support(
    providers: Sequence[ExecutionProvider], model: onnx.ModelProto, any_provider: bool = False
) -> Callable[[str, str, tuple[str, ...]], bool]:
    """Whether a fusion may fire: the first provider (in priority order) that would take the
    fused op or the ops it replaces must run the fused op (`supports_fused_op`). With
    `any_provider` (measured placement, which places the fused node among the providers
    that claim it), any provider that runs the fused op will do."""
    from turnout.optimizer.layout import channels_last_ops

    opsets = _opsets(model)

    def supports(domain: str, op_type: str, replaced: tuple[str, ...]) -> bool:
        opset = opsets.get(domain, 1)
        since = schema_since_version(domain, op_type, opset) or opset
        for p in providers:
            nhwc = channels_last_ops(p)  # Conv run as NhwcConv counts as Conv
            if p.supports_fused_op(domain, op_type, since) or (domain, op_type) in nhwc:
                return True
            if any_provider:
                continue
            ops = set(p.kernels.ops()) | nhwc
            if any(("", r) in ops for r in replaced):
                return False
        return False

    return supports


def _uses_any(graph: onnx.GraphProto, op_types: set[str]) -> bool:
    """Whether a node of `graph`, or of a graph nested in one, has one of these op types."""
    for node in graph.node:
        if node.op_type in op_types:
            return True
        for a in node.attribute:
            subs = [a.g] if a.HasField("g") else list(a.graphs)
            if any(_uses_any(sub, op_types) for sub in subs):
                return True
    return False


def _opsets(model: onnx.ModelProto) -> dict[str, int]:
    """The model's opset imports by domain ("" for ai.onnx)."""
    return {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
