"""Basic passes over nested graphs (If/Loop/Scan bodies).

- `inline_constant_if`: an If whose condition is a constant (after folding) becomes the nodes
  of the branch it takes, names made unique in the outer graph. An If on a graph input stays.
- `fold_subgraphs`: each body is optimized as a graph of its own (constant and shape folding,
  no-ops, constant Ifs inside it, its own bodies, dead nodes), with the outer graph's
  constants that it reads standing in as constants. Folded values become the body's own
  initializers; outer-scope names and the body's inputs and outputs keep their names.
- `fuse_subgraphs` (extended): the session's extended passes run inside each body too.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import onnx
from onnx import GraphProto, NodeProto

from turnout.graph.tensors import decode_tensor, from_array
from turnout.optimizer.base import Level, PassContext, graph_pass
from turnout.optimizer.graph import OptGraph, attr
from turnout.optimizer.shapes import light_model

__all__ = [
    "fold_subgraphs",
    "free_reads",
    "fuse_subgraphs",
    "inline_constant_if",
    "passes_load_checks",
]

MAX_BODY_ROUNDS = 4

_GRAPH, _GRAPHS = onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS


def _bodies(n: NodeProto) -> Iterator[tuple[str, GraphProto]]:
    for a in n.attribute:
        if a.type == _GRAPH:
            yield a.name, a.g
        elif a.type == _GRAPHS:
            for i, sub in enumerate(a.graphs):
                yield f"{a.name}[{i}]", sub


def _defined(g: GraphProto) -> set[str]:
    names = {v.name for v in g.input} | {t.name for t in g.initializer}
    names.update(t.values.name for t in g.sparse_initializer)
    names.update(o for n in g.node for o in n.output if o)
    return names


def free_reads(g: GraphProto) -> set[str]:
    """Names `g` (or a graph nested in it) reads from enclosing scopes."""
    own = _defined(g)
    reads = {x for n in g.node for x in n.input if x}
    reads.update(o.name for o in g.output)
    for n in g.node:
        for _, sub in _bodies(n):
            reads.update(free_reads(sub))
    return reads - own


def _rename_free(g: GraphProto, mapping: dict[str, str]) -> None:
    """Rename the names `g` reads from enclosing scopes (not those it defines itself)."""
    local = {k: v for k, v in mapping.items() if k not in _defined(g)}
    if not local:
        return
    for n in g.node:
        for i, x in enumerate(n.input):
            if x in local:
                n.input[i] = local[x]
        for _, sub in _bodies(n):
            _rename_free(sub, local)
    for o in g.output:
        if o.name in local:
            o.name = local[o.name]


# ---------------------------------------------------------------------------------- inlining
@graph_pass("inline_constant_if", Level.BASIC)
def inline_constant_if(g: OptGraph, ctx: PassContext) -> int:
    """An If whose condition is a constant becomes the branch it takes, inlined.

    A branch can hold what only its If's loose output types let pass (a Range of [1]-shaped
    limits where the spec says scalars): the graph that inlined one is checked as a model is
    checked at load (`passes_load_checks`), and optimized again without inlining
    (`ctx.inline_ifs`) if it fails; `optimize` does so for the top graph, `fold_subgraphs`
    for a body.
    """
    if not ctx.inline_ifs:
        return 0
    changes = 0
    for n in list(g.nodes):
        if n.op_type != "If" or n.domain not in ("", "ai.onnx") or not n.input:
            continue
        cond = g.const(n.input[0])
        if cond is None or cond.size != 1:
            continue
        branch = attr(n, "then_branch" if bool(cond.reshape(())) else "else_branch")
        if not isinstance(branch, GraphProto) or len(branch.output) != len(n.output):
            continue
        if len(branch.sparse_initializer) or len(branch.input):
            continue
        inlined = _inline(g, n, branch)
        at = next(i for i, m in enumerate(g.nodes) if m is n)
        g.nodes[at : at + 1] = inlined
        for m in inlined:
            g.added_nested(m)
        changes += 1
    g.inlined += changes
    return changes


def passes_load_checks(model: onnx.ModelProto) -> bool:
    """Whether `model` passes the type and shape checks of loading (`check_types`)."""
    from turnout.graph.errors import TurnoutError
    from turnout.graph.validate import check_types

    try:
        check_types(model, "optimized model")
    except TurnoutError:
        return False
    return True


def _inline(g: OptGraph, n: NodeProto, branch: GraphProto) -> list[NodeProto]:
    """The branch's nodes for the outer graph: every name it defines made fresh, its
    initializers added to the outer graph, its outputs written under the If's output names."""
    mapping: dict[str, str] = {}
    produced = {o for m in branch.node for o in m.output if o}
    tail: list[NodeProto] = []
    claimed: set[str] = set()
    for out, bo in zip(n.output, branch.output):
        if out and bo.name in produced and bo.name not in claimed:
            mapping[bo.name] = out  # the node computing it writes the If's output directly
            claimed.add(bo.name)
    for t in branch.initializer:
        mapping[t.name] = g.fresh(t.name)
        g.inits[mapping[t.name]] = decode_tensor(t, f"initializer of If branch {branch.name!r}")
    for m in branch.node:
        for o in m.output:
            if o and o not in mapping:
                mapping[o] = g.fresh(o)
    nodes: list[NodeProto] = []
    for m in branch.node:
        c = NodeProto()
        c.CopyFrom(m)
        for i, x in enumerate(c.input):
            c.input[i] = mapping.get(x, x)
        for i, o in enumerate(c.output):
            c.output[i] = mapping.get(o, o)
        c.name = g.fresh(m.name or m.op_type)
        for _, sub in _bodies(c):
            _rename_free(sub, mapping)
        nodes.append(c)
    for out, bo in zip(n.output, branch.output):
        if out and mapping.get(bo.name) != out:  # an outer value, an initializer or a repeat
            tail.append(g.make_node("Identity", [mapping.get(bo.name, bo.name)], [out]))
    return nodes + tail


# ------------------------------------------------------------------------------ body folding
@graph_pass("fold_subgraphs", Level.BASIC)
def fold_subgraphs(g: OptGraph, ctx: PassContext) -> int:
    """Fold constants (with the outer constants a body reads), shapes, no-ops and constant
    Ifs inside If/Loop/Scan bodies, at every depth."""
    if not g.nested:
        return 0
    return sum(_fold_body(g, n, key, body, ctx) for n, key, body in _control_flow_bodies(g))


def _control_flow_bodies(g: OptGraph) -> list[tuple[NodeProto, str, GraphProto]]:
    """(node, attribute key, body) of every standard-domain node with a subgraph, listed
    before any is rewritten (a pass replaces bodies as it goes)."""
    return [
        (n, key, body)
        for n in g.nodes
        if n.domain in ("", "ai.onnx") and g.has_subgraph(n)
        for key, body in _bodies(n)
    ]


def _fold_body(g: OptGraph, n: NodeProto, key: str, body: GraphProto, ctx: PassContext) -> int:
    consts = {x: g.const(x) for x in sorted(free_reads(body))}
    settled = (id(n), key, frozenset(x for x, v in consts.items() if v is not None))
    if settled in g.settled:  # optimized before, with the same outer constants
        return 0
    outer_inits, outer_types = _outer_reads(g, body)
    budget = ctx.folded_bytes
    model, changes = _optimized_body(g, body, outer_inits, outer_types, ctx)
    if model is None:  # an inlined If failed the load checks: again, keeping this body's Ifs
        ctx.folded_bytes, ctx.inline_ifs = budget, False
        try:
            model, changes = _optimized_body(g, body, outer_inits, outer_types, ctx)
        finally:
            ctx.inline_ifs = True  # it was, or nothing would have been inlined
        assert model is not None
    g.settled.add(settled)
    if not changes:
        return 0
    _replace_body(g, n, body, model)
    return changes


def _outer_reads(
    g: OptGraph, body: GraphProto
) -> tuple[list[onnx.TensorProto], dict[str, onnx.TypeProto | None]]:
    """What `body` reads from enclosing scopes: the constants among them as TensorProtos, the
    others with their types (None where unknown)."""
    consts = {x: g.const(x) for x in sorted(free_reads(body))}
    inits = [_as_proto(g, x, v) for x, v in consts.items() if v is not None]
    types = {x: g.types.get(x) for x, v in consts.items() if v is None}
    return inits, types


# ------------------------------------------------------------------------------ body fusions
@graph_pass("fuse_subgraphs", Level.EXTENDED)
def fuse_subgraphs(g: OptGraph, ctx: PassContext) -> int:
    """The session's extended passes (fusions, and plugins' passes of those levels) inside
    If/Loop/Scan bodies, at every depth: a branch's Conv + Relu fuses as the top graph's
    does. A fusion asks `ctx.supports` as at the top, so it fires only where the owner of
    the body's nodes runs the fused op."""
    if not g.nested or not ctx.body_passes:
        return 0
    changes = 0
    for n, _, body in _control_flow_bodies(g):
        outer_inits, outer_types = _outer_reads(g, body)
        model, sub = _body_graph(g, body, outer_inits, outer_types)
        done = 0
        for p in ctx.body_passes:
            c = p.fn(sub, ctx)
            if c and not p.keeps_types:
                sub.mark_changed()
            done += c
        if done:
            _commit_body(sub, outer_inits)
            _replace_body(g, n, body, model)
            changes += done
    return changes


def _optimized_body(
    g: OptGraph,
    body: GraphProto,
    outer_inits: list[onnx.TensorProto],
    outer_types: dict[str, onnx.TypeProto | None],
    ctx: PassContext,
) -> tuple[onnx.ModelProto | None, int]:
    """`body` optimized as a model of its own (committed into the returned model when it
    changed): the outer constants it reads are initializers there, the other outer values it
    reads typed inputs. No model when it inlined an If and then failed the load checks."""
    model, sub = _body_graph(g, body, outer_inits, outer_types)
    changes = _run_body_passes(sub, ctx)
    if sub.inlined and not passes_load_checks(light_model(sub)):
        return None, changes
    if changes:
        _commit_body(sub, outer_inits)
    return model, changes


def _body_graph(
    g: OptGraph,
    body: GraphProto,
    outer_inits: list[onnx.TensorProto],
    outer_types: dict[str, onnx.TypeProto | None],
) -> tuple[onnx.ModelProto, OptGraph]:
    """`body` as a model of its own, editable by passes: the outer constants it reads are
    initializers there, the other outer values it reads (with a known type) typed inputs."""
    model = onnx.ModelProto(ir_version=g.model.ir_version)
    model.opset_import.extend(g.model.opset_import)
    model.graph.CopyFrom(body)
    for x, tp in outer_types.items():
        if tp is not None:
            vi = model.graph.input.add(name=x)
            vi.type.CopyFrom(tp)
    own = list(model.graph.initializer)
    del model.graph.initializer[:]
    sub = OptGraph(
        model,
        initializers=[*own, *outer_inits],
        shape_data_max_elements=g.shape_data_max_elements,
    )
    sub.share_names(g)
    sub.settled = g.settled
    return model, sub


def _commit_body(sub: OptGraph, outer_inits: list[onnx.TensorProto]) -> None:
    """Write the edited body back into its model, without the outer constants it was lent."""
    for t in outer_inits:
        sub.drop_init(t.name)
    sub.toposort()
    sub.commit()


def _replace_body(g: OptGraph, n: NodeProto, body: GraphProto, model: onnx.ModelProto) -> None:
    """Put the optimized body (`model`'s graph) in place of `body` of node `n`; the domains
    its new nodes use are imported by the outer model too."""
    g.body_changed(n)  # what it reads, and its output types, may differ now
    del body.node[:]
    body.node.extend(model.graph.node)
    del body.initializer[:]
    body.initializer.extend(model.graph.initializer)
    del body.value_info[:]
    body.value_info.extend(model.graph.value_info)
    for o in model.opset_import:
        g.ensure_opset("" if o.domain == "ai.onnx" else o.domain, o.version)


def _as_proto(g: OptGraph, name: str, value: np.ndarray) -> onnx.TensorProto:
    """Outer constant `name` as a TensorProto: the original one when it is one."""
    if not g.is_initializer(name) or name in g.inits:
        return from_array(value, name)
    found = g.original_proto(name)
    return found if found is not None else from_array(value, name)


def _run_body_passes(sub: OptGraph, ctx: PassContext) -> int:
    from turnout.optimizer.cleanup import eliminate_dead_nodes, eliminate_noops
    from turnout.optimizer.fold import fold_constants, fold_shapes

    passes = (  # (pass, whether it keeps the types: see GraphPass.keeps_types)
        (fold_constants, False),
        (fold_shapes, False),
        (inline_constant_if, False),
        (fold_subgraphs, False),
        (eliminate_noops, False),
        (eliminate_dead_nodes, True),
    )
    total = 0
    for _ in range(MAX_BODY_ROUNDS):
        changed = 0
        for p, keeps_types in passes:
            c = p(sub, ctx)
            if c and not keeps_types:
                sub.mark_changed()
            changed += c
        total += changed
        if not changed:
            break
    return total
