"""Layout passes: hand Conv-like nodes to a provider that prefers channels-last data (NHWC) in
their channels-last form, and cancel the transposes that then meet between such nodes.

A provider declares `ExecutionProvider.preferred_layout = "NHWC"` and registers kernels for the
channels-last variants it runs (`NHWC_OPS`: `ai.turnout::NhwcConv` for Conv, and so on). When
the provider that would run a layout-sensitive node (the first, in priority order, with a kernel
for the op or for its variant) is such a provider, `nhwc_layout` rewrites

    X -> Conv -> Y    into    X -> Transpose(NCHW->NHWC) -> NhwcConv -> Transpose(NHWC->NCHW) -> Y

and `cancel_transposes` then removes each pair of transposes that undo each other (pushing a
transpose through a unary element-wise op first), so a chain of channels-last nodes keeps one
transpose at each end.

A variant takes the attributes of the op it replaces (kernel_shape, pads, strides and dilations
keep their spatial order) and the same inputs, but its data inputs (`NHWC_OPS`' indices) and its
output are channels-last, `[N, spatial..., C]`; weights stay as the op has them (Conv's W is
`[M, C/group, kernel...]`). Both passes are at level LAYOUT (onnxruntime's level 3), after the
fusions; they are the only users of this mechanism.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import onnx
from onnx import NodeProto

from turnout.graph.ir import schema_since_version
from turnout.optimizer.base import TURNOUT_DOMAIN, Level, PassContext, graph_pass
from turnout.optimizer.graph import OptGraph
from turnout.optimizer.transpose import merge_transposes, push_transposes

if TYPE_CHECKING:
    from turnout.sdk.provider import ExecutionProvider

__all__ = [
    "NHWC",
    "NHWC_DOMAIN",
    "NHWC_OPS",
    "cancel_transposes",
    "channels_last_ops",
    "nhwc_layout",
    "nhwc_ops",
]

NHWC = "NHWC"
"""The value of `ExecutionProvider.preferred_layout` that asks for channels-last nodes."""
NHWC_DOMAIN = TURNOUT_DOMAIN
NHWC_OPS: Mapping[tuple[str, str], tuple[str, tuple[int, ...]]] = {
    ("", "Conv"): ("NhwcConv", (0,)),
    (TURNOUT_DOMAIN, "FusedConv"): ("NhwcFusedConv", (0, 3)),
    ("", "MaxPool"): ("NhwcMaxPool", (0,)),
    ("", "AveragePool"): ("NhwcAveragePool", (0,)),
    ("", "GlobalAveragePool"): ("NhwcGlobalAveragePool", (0,)),
    ("", "GlobalMaxPool"): ("NhwcGlobalMaxPool", (0,)),
}
"""(domain, op type) of each layout-sensitive op -> (its channels-last variant in `NHWC_DOMAIN`,
the indices of its inputs that are channels-last in the variant)."""

_MAX_ROUNDS = 8


def channels_last_ops(provider: ExecutionProvider) -> frozenset[tuple[str, str]]:
    """The (domain, op type) pairs of `NHWC_OPS` that `provider` runs as their channels-last
    variants: those whose variant it registers, if it prefers NHWC (else none)."""
    if provider.preferred_layout != NHWC:
        return frozenset()
    return frozenset(
        key
        for key, (variant, _) in NHWC_OPS.items()
        if provider.kernels.lookup(NHWC_DOMAIN, variant, 1)
    )


def nhwc_ops(
    providers: Sequence[ExecutionProvider], opsets: Mapping[str, int]
) -> frozenset[tuple[str, str]]:
    """The (domain, op type) pairs of `NHWC_OPS` to hand over channels-last in a session with
    these providers (priority order): those whose owner, the first provider that runs the op
    in either layout, runs it channels-last."""
    out = set()
    for domain, op_type in NHWC_OPS:
        opset = opsets.get(domain, 1)
        since = schema_since_version(domain, op_type, opset) or opset
        for p in providers:
            if (domain, op_type) in channels_last_ops(p):
                out.add((domain, op_type))
                break
            if p.kernels.lookup(domain, op_type, since) is not None:
                break
    return frozenset(out)


def _perms(rank: int) -> tuple[list[int], list[int]]:
    """(channels-first -> channels-last, channels-last -> channels-first) for `rank`."""
    return [0, *range(2, rank), 1], [0, rank - 1, *range(1, rank - 1)]


def _permuted(tp: onnx.TypeProto, perm: list[int]) -> onnx.TypeProto:
    out = onnx.TypeProto()
    out.CopyFrom(tp)
    dims = out.tensor_type.shape.dim
    old = [onnx.TensorShapeProto.Dimension() for _ in dims]
    for d, src in zip(old, dims):
        d.CopyFrom(src)
    for d, p in zip(dims, perm):
        d.CopyFrom(old[p])
    return out


def _ranked_type(g: OptGraph, name: str) -> onnx.TypeProto | None:
    tp = g.types.get(name)
    if tp is None or tp.WhichOneof("value") != "tensor_type":
        return None
    return tp if tp.tensor_type.HasField("shape") else None


@graph_pass("nhwc_layout", Level.LAYOUT)
def nhwc_layout(g: OptGraph, ctx: PassContext) -> int:
    """Conv-like nodes whose provider prefers NHWC become their channels-last variant,
    between transposes."""
    if not ctx.nhwc_ops:
        return 0
    changes = 0
    moved: dict[str, str] = {}  # value -> its channels-last copy, shared by all its readers
    for n in list(g.nodes):
        key = ("" if n.domain == "ai.onnx" else n.domain, n.op_type)
        if key not in ctx.nhwc_ops or len([y for y in n.output if y]) != 1 or not n.output[0]:
            continue  # MaxPool's Indices output has no channels-last form
        variant, data = NHWC_OPS[key]
        y_type = _ranked_type(g, n.output[0])
        data = tuple(i for i in data if i < len(n.input) and n.input[i])
        in_types = [_ranked_type(g, n.input[i]) for i in data]
        rank = len(y_type.tensor_type.shape.dim) if y_type is not None else 0
        if rank < 3 or any(t is None or len(t.tensor_type.shape.dim) != rank for t in in_types):
            continue
        to_last, to_first = _perms(rank)
        for i, tp in zip(data, in_types):
            assert tp is not None
            x = n.input[i]
            if x not in moved:
                moved[x] = g.fresh(f"{x}_nhwc")
                g.insert_before(n, g.make_node("Transpose", [x], [moved[x]], perm=to_last))
                g.types[moved[x]] = _permuted(tp, to_last)
            n.input[i] = moved[x]
        assert y_type is not None
        y, mid = n.output[0], g.fresh(f"{n.output[0]}_nhwc")
        n.output[0] = mid
        n.op_type, n.domain = variant, NHWC_DOMAIN
        g.types[mid] = _permuted(y_type, to_last)
        _insert_after(g, n, g.make_node("Transpose", [mid], [y], perm=to_first))
        g.ensure_opset(NHWC_DOMAIN)
        changes += 1
    return changes


def _insert_after(g: OptGraph, anchor: NodeProto, node: NodeProto) -> None:
    for i, n in enumerate(g.nodes):
        if n is anchor:
            g.nodes.insert(i + 1, node)
            return
    g.nodes.append(node)


@graph_pass("cancel_transposes", Level.LAYOUT)
def cancel_transposes(g: OptGraph, ctx: PassContext) -> int:
    """Transpose pairs that undo each other are removed (after pushing transposes through unary
    element-wise ops): the basic passes' rewrites, run again after `nhwc_layout`."""
    if not ctx.nhwc_ops:
        return 0
    total = 0
    for _ in range(_MAX_ROUNDS):
        changes = push_transposes(g, ctx) + merge_transposes(g, ctx)
        if not changes:
            break
        total += changes
    if total:  # the first of a cancelled pair is unread now (in a body, no later pass drops it)
        reads, outside = g.consumers(), g.protected | g.subgraph_reads()
        g.remove(
            *(
                n
                for n in g.nodes
                if n.op_type == "Transpose"
                and n.domain in ("", "ai.onnx")
                and n.output[0] not in outside
                and not reads.get(n.output[0])
            )
        )
    return total
