"""Row kernels (`normgen`): Softmax/LogSoftmax over the last axis as one generated kernel, and
LayerNormalization over the last axis, with the residual Add that feeds it fused in when the
two fit: same float type, the Add's inputs of the
LayerNorm's input shape (no broadcasting), only the normalized output used. The Add's sum is
also written out when a node outside the pair reads it.

`norm_groups` picks the pairs (and the lone LayerNorms) among the claimed nodes before the
elementwise grouping runs; `compile_norm_group` turns one into a `CompiledState`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

import numpy as np

from turnout.graph.errors import InvalidArgument
from turnout.graph.ir import GraphView, Node
from turnout.sdk.fusion import GraphIndex, is_convex
from turnout.sdk.provider import CompiledState, FusedSubgraph, KernelRegistry

from .backend import Backend
from .codegen import Variant
from .fusion import EmulatedRunner, Generated
from .launch import CupyLauncher
from .normgen import LayerNormProgram, SoftmaxProgram

__all__ = ["SOFTMAX_OPS", "compile_norm_group", "norm_groups"]

_FLOATS = frozenset({"float32", "float64"})
SOFTMAX_OPS = frozenset({"Softmax", "LogSoftmax"})
_NO_VARIANT = Variant(0, ())


def _float_dtype(info: Any) -> str | None:
    return info.dtype.name if info is not None and info.dtype is not None else None


def _layer_norm_fits(node: Node) -> bool:
    if node.op_type != "LayerNormalization" or node.domain not in ("", "ai.onnx"):
        return False
    if any(node.outputs[1:]):  # Mean / InvStdDev wanted
        return False
    x, y = node.input_infos[0], node.output_infos[0]
    if x is None or x.shape is None or _float_dtype(x) not in _FLOATS:
        return False
    if _float_dtype(y) != _float_dtype(x):
        return False
    axis = int(node.attrs.get("axis", -1))
    if axis not in (-1, len(x.shape) - 1):
        return False
    for info in node.input_infos[1:]:  # scale and bias: one value per element of the row
        if info is not None and (info.shape is None or len(info.shape) != 1):
            return False
        if info is not None and _float_dtype(info) != _float_dtype(x):
            return False
    return True


def _residual(add: Node | None, ln: Node) -> bool:
    if add is None or add.op_type != "Add" or len(add.inputs) != 2:
        return False
    want = ln.input_infos[0]
    if want is None:
        return False
    return all(
        i is not None and i.dtype == want.dtype and i.shape is not None and i.shape == want.shape
        for i in add.input_infos
    )


def _softmax_fits(node: Node) -> bool:
    if node.op_type not in SOFTMAX_OPS or node.domain not in ("", "ai.onnx"):
        return False
    x, y = node.input_infos[0], node.output_infos[0]
    if x is None or x.shape is None or not x.shape or _float_dtype(x) not in _FLOATS:
        return False
    axis = int(node.attrs.get("axis", -1))
    return _float_dtype(y) == _float_dtype(x) and axis in (-1, len(x.shape) - 1)


def norm_groups(graph: GraphView, claimed: Collection[str]) -> list[list[str]]:
    """[Add, LayerNorm] pairs, lone LayerNorms and last-axis Softmaxes among the claimed
    nodes (Softmax from opset 13: older ones coerce to 2-D, which the kernels run)."""
    idx = GraphIndex.of(graph)
    claimed = set(claimed)
    groups = []
    for node in graph.nodes:
        if node.name not in claimed:
            continue
        if _softmax_fits(node) and graph.kernel_node(node).since_version >= 13:
            groups.append([node.name])
            continue
        if not _layer_norm_fits(node):
            continue
        producer = idx.producer.get(node.inputs[0])
        add = idx.by_name[producer] if producer in claimed else None
        pair = [add.name, node.name] if add is not None and _residual(add, node) else None
        groups.append(pair if pair is not None and is_convex(pair, idx) else [node.name])
    return groups


def compile_norm_group(
    sg: FusedSubgraph, be: Backend, registry: KernelRegistry, generated: Generated | None = None
) -> CompiledState:
    """One `CompiledState` for a [Add,] LayerNorm group or a Softmax."""
    if sg.nodes[-1].op_type in SOFTMAX_OPS:
        return _compile_softmax(sg, be, registry, generated)
    ln = sg.nodes[-1]
    add = sg.nodes[0] if len(sg.nodes) == 2 else None
    outputs = tuple(v.name for v in sg.outputs)
    inputs = tuple(v.name for v in sg.inputs)
    has_bias = len(ln.inputs) > 2 and bool(ln.inputs[2])
    write_sum = add is not None and add.outputs[0] in outputs
    program = LayerNormProgram(sg.outputs[0].dtype, add is not None, has_bias, write_sum)
    eps = np.float64(np.float32(ln.attrs.get("epsilon", 1e-5)))
    operands = [
        *(add.inputs if add is not None else ln.inputs[:1]),
        *ln.inputs[1 : 3 if has_bias else 2],
    ]
    members, launch, create = _how_to_run(program, sg, be, registry, generated)

    def compute(kernel: Any, *args: Any) -> tuple[Any, ...]:
        xp = be.xp
        values = dict(zip(inputs, args))
        x = values[operands[0]]
        y = xp.empty(x.shape, program.dtype)
        s = xp.empty(x.shape, program.dtype) if write_sum else None
        named = {ln.outputs[0]: y} | (
            {add.outputs[0]: s} if add is not None and s is not None else {}
        )
        if members is not None:
            members.run(args, [named[o] for o in outputs])
            return tuple(named[o] for o in outputs)
        h = int(x.shape[-1]) if x.ndim else 1
        arrays = [xp.ascontiguousarray(values[name]) for name in operands]
        if add is not None and arrays[1].shape != x.shape:
            raise InvalidArgument(
                f"{sg.name}: {add.name}: inputs of shapes {tuple(x.shape)} and "
                f"{tuple(arrays[1].shape)} (this fused kernel takes equal shapes)"
            )
        first = 2 if add is not None else 1
        for k in range(first, len(arrays)):  # scale, bias: one value per row element
            a = arrays[k]
            if a.size != h:
                try:
                    arrays[k] = xp.ascontiguousarray(xp.broadcast_to(a.reshape(-1), (h,)))
                except ValueError:
                    raise InvalidArgument(
                        f"{sg.name}: {ln.name}: scale/bias of {a.size} values for rows of {h}"
                    ) from None
        rows = x.size // h if h else 0
        if rows:
            grid, block = program.launch(rows)
            tail = [y, *([s] if s is not None else []), np.int64(rows), np.int64(h), eps]
            launch.call(kernel, grid, block, [*arrays, *tail])
        return tuple(named[o] for o in outputs)

    return CompiledState(sg.name, inputs, outputs, compute, create)


def _how_to_run(
    program: Any,
    sg: FusedSubgraph,
    be: Backend,
    registry: KernelRegistry,
    generated: Generated | None,
) -> tuple[EmulatedRunner | None, Any, Callable[[], Any]]:
    """What a generated row kernel runs with: the member kernels on the emulated backend
    (None elsewhere), the launcher, and the CompiledState's create (records the source for the
    compile-only check, builds the kernel unless emulated)."""
    members = EmulatedRunner(sg, registry) if be.emulated and be.launcher is None else None
    launch = be.launcher or CupyLauncher()

    def create() -> Any:
        if generated is not None:
            generated.append((program, _NO_VARIANT))
        return None if members else launch.build(program.kernel_name(), program.source())

    return members, launch, create


def _compile_softmax(
    sg: FusedSubgraph, be: Backend, registry: KernelRegistry, generated: Generated | None
) -> CompiledState:
    node = sg.nodes[0]
    program = SoftmaxProgram(sg.outputs[0].dtype, node.op_type == "LogSoftmax")
    members, launch, create = _how_to_run(program, sg, be, registry, generated)

    def compute(kernel: Any, x: Any) -> tuple[Any]:
        y = be.xp.empty(x.shape, program.dtype)
        if members is not None:
            members.run([x], [y])
            return (y,)
        h = int(x.shape[-1]) if x.ndim else 1
        rows = x.size // h if h else 0
        if rows:
            grid, block = program.launch(rows)
            params = [be.xp.ascontiguousarray(x), y, np.int64(rows), np.int64(h)]
            launch.call(kernel, grid, block, params)
        return (y,)

    name = (sg.inputs[0].name,)
    return CompiledState(sg.name, name, (sg.outputs[0].name,), compute, create)
