"""Fused elementwise groups: which claimed nodes fuse, and each group as one CUDA kernel.

The graph analysis is core's (`turnout.sdk.fusion.find_groups`); the rules here are this
provider's: an op in `codegen.FUSED_OPS`, float32/float64 values (Where's condition bool), and a
fully known output shape, which is the group key: every member of a group has the group's output
shape, so one index space covers the whole group and broadcasting happens only at its inputs.
A node that fuses with nothing becomes a group of one, so every float elementwise node runs as
generated CUDA (one launch), and the tests check one code path.

`compile_group` turns a `FusedSubgraph` into a `CompiledState`. `create` builds the
`GroupProgram`; `compute` picks the launch layout (`Variant`) from the input shapes and strides,
compiles that variant once (`launch.CupyLauncher`: cached in memory and in CuPy's on-disk kernel
cache) and launches it on the session's stream. On the emulated backend it records the same
source and runs the member kernels with numpy instead (or, in the tests, the host build).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from turnout.graph.errors import EPFail, InvalidArgument
from turnout.graph.ir import GraphView, Node
from turnout.sdk.fusion import GraphIndex, find_groups
from turnout.sdk.provider import CompiledState, FusedSubgraph, KernelFn, KernelRegistry

from .backend import Backend
from .codegen import FUSED_OPS, GroupProgram, Step, Variant
from .launch import CupyLauncher

__all__ = ["EmulatedRunner", "Generated", "compile_group", "fusible", "fused_groups", "layout"]

_FLOATS = frozenset({"float32", "float64"})


def _clip_ok(node: Node) -> bool:
    return node.op_type != "Clip" or not ({"min", "max"} & set(node.attrs))


def fusible(node: Node) -> bool:
    """Whether `node` may be compiled into a generated kernel (see the module docstring)."""
    if node.op_type not in FUSED_OPS or node.domain not in ("", "ai.onnx") or not _clip_ok(node):
        return False
    out = node.output_infos[0] if node.output_infos else None
    if out is None or out.dtype is None or out.dtype.name not in _FLOATS:
        return False
    if out.shape is None or any(d is None for d in out.shape) or len(node.outputs) != 1:
        return False
    for k, info in enumerate(node.input_infos):
        if info is None:
            continue
        want = "bool" if node.op_type == "Where" and k == 0 else out.dtype.name
        if info.dtype is None or info.dtype.name != want:
            return False
    return True


def fused_groups(graph: GraphView, claimed: Collection[str]) -> list[list[str]]:
    """Groups of claimed fusible nodes (one output shape each), singletons included."""
    by_name = {n.name: n for n in graph.nodes}
    ok = {n for n in claimed if fusible(by_name[n])}
    idx = GraphIndex.of(graph)
    groups = find_groups(idx, ok, key=lambda n: by_name[n].output_infos[0].shape)  # type: ignore[union-attr]
    grouped = {n for g in groups for n in g}
    singles = [[n] for n in sorted(ok - grouped, key=idx.order.__getitem__)]
    return groups + singles


def _program(sg: FusedSubgraph) -> GroupProgram:
    steps = [Step(n.op_type, dict(n.attrs), tuple(n.inputs), n.outputs[0]) for n in sg.nodes]
    dtype = sg.outputs[0].dtype
    inputs = [(v.name, np.dtype(v.dtype)) for v in sg.inputs]
    return GroupProgram(sg.name, inputs, steps, [v.name for v in sg.outputs], dtype)


def layout(
    shapes: Sequence[tuple[int, ...]],
    strides: Sequence[tuple[int, ...]],
    contiguous: Sequence[bool],
    out_shape: tuple[int, ...],
) -> tuple[Variant, list[int]]:
    """The launch variant for inputs of these shapes and element strides, and the integer
    arguments after `n` (dims, then each strided input's broadcast strides)."""
    rank = len(out_shape)
    dense = tuple(c and tuple(s) == out_shape for s, c in zip(shapes, contiguous))
    if all(dense):
        return Variant(0, dense), []
    args = [int(d) for d in out_shape]
    for shape, st, d in zip(shapes, strides, dense):
        if d:
            continue
        pad = rank - len(shape)
        for k in range(rank):
            j = k - pad
            args.append(0 if j < 0 or shape[j] == 1 else int(st[j]))
    return Variant(rank, dense), args


@dataclass(frozen=True)
class _Launch:
    kernel: Any
    out_shape: tuple[int, ...]
    n: int
    grid: int
    block: int
    scalars: list[Any]


Generated = list[tuple[Any, Variant]]
"""(program, layout) pairs: any program with `source(variant)` and `kernel_name(variant)`."""


def compile_group(
    sg: FusedSubgraph, be: Backend, registry: KernelRegistry, generated: Generated | None = None
) -> CompiledState:
    """One `CompiledState` for `sg`; `generated` (if given) collects each (program, variant)
    whose source was generated, for the compile-only check and the tests."""
    inputs = tuple(v.name for v in sg.inputs)
    outputs = tuple(v.name for v in sg.outputs)
    program = _program(sg)
    members = EmulatedRunner(sg, registry) if be.emulated and be.launcher is None else None
    launch = be.launcher or CupyLauncher()

    def create() -> dict[Any, Any]:
        return {}

    def prepare(kernels: dict[Any, Any], args: Sequence[Any]) -> _Launch:
        """The launch for inputs of these shapes and strides: layout, kernel, grid, scalars."""
        shapes = [tuple(a.shape) for a in args]
        try:
            out_shape = tuple(np.broadcast_shapes(*shapes))
        except ValueError as e:
            raise InvalidArgument(f"{sg.name}: inputs do not broadcast ({e})") from None
        itemsize = [a.dtype.itemsize for a in args]
        strides = [tuple(s // k for s in a.strides) for a, k in zip(args, itemsize)]
        contiguous = [bool(a.flags.c_contiguous) for a in args]
        variant, ints = layout(shapes, strides, contiguous, out_shape)
        kernel = kernels.get(variant)
        if kernel is None:
            source = program.source(variant)
            if generated is not None:
                generated.append((program, variant))
            name = program.kernel_name(variant)
            kernel = kernels[variant] = source if members else launch.build(name, source)
        n = int(np.prod(out_shape, dtype=np.int64))
        grid, block = program.launch(variant, n) if n else (0, 0)
        scalars = [np.int64(n), *(np.int64(x) for x in ints)]
        return _Launch(kernel, out_shape, n, grid, block, scalars)

    def compute(kernels: dict[Any, Any], *args: Any) -> tuple[Any, ...]:
        # one dict lookup per call once these shapes and strides were seen: the hot path
        key = tuple((a.shape, a.strides) for a in args)
        plan = kernels.get(key)
        if plan is None:
            plan = kernels[key] = prepare(kernels, args)
        outs = [be.xp.empty(plan.out_shape, program.dtype) for _ in outputs]
        if members is not None:
            members.run(args, outs)
        elif plan.n:
            launch.call(plan.kernel, plan.grid, plan.block, [*args, *outs, *plan.scalars])
        return tuple(outs)

    def release(kernels: dict[Any, Any]) -> None:
        kernels.clear()

    return CompiledState(sg.name, inputs, outputs, compute, create, release)


class EmulatedRunner:
    """Runs the members' numpy kernels in order (the emulated backend has no CUDA)."""

    def __init__(self, sg: FusedSubgraph, registry: KernelRegistry) -> None:
        self.sg = sg
        self.steps: list[tuple[KernelFn, Sequence[str], Sequence[str]]] = []
        for node in sg.nodes:
            kn = sg.kernel_node(node)
            kdef, reason = registry.match(kn)
            if kdef is None:
                raise EPFail(f"{sg.name}: node {node.name!r} has no kernel: {reason}")
            self.steps.append((kdef.factory(kn), node.inputs, node.outputs))

    def run(self, args: Sequence[Any], outs: Sequence[Any]) -> None:
        values = dict(zip((v.name for v in self.sg.inputs), args))
        for fn, ins, names in self.steps:
            values.update(zip(names, fn(*[values[x] if x else None for x in ins])))
        for out, v in zip(outs, self.sg.outputs):
            out[...] = values[v.name]
