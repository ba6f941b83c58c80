"""`turnout compare`: run one model on two providers (or a provider and onnx.reference) with
every intermediate value exposed, and list the values that differ, first divergence first.

Every node output becomes a graph output on a copy of the model (typed where shape inference
knows the type, untyped otherwise). Values are compared in topological order; a difference whose
producing node got agreeing inputs is marked as introduced there, the rest inherited it.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

__all__ = ["REFERENCE", "Comparison", "ValueDiff", "compare_model", "expose_all", "load_inputs"]

REFERENCE = "reference"


@dataclass(frozen=True)
class ValueDiff:
    """One intermediate value that differs, and the node that produced it."""

    position: int
    value: str
    node: str
    op_type: str
    introduced: bool
    detail: str
    placed_on: dict[str, str] = field(default_factory=dict)


@dataclass
class Comparison:
    model: str
    providers: tuple[str, str]
    rtol: float
    atol: float
    compared: int
    diffs: list[ValueDiff]
    missing: list[str]

    @property
    def first(self) -> ValueDiff | None:
        return self.diffs[0] if self.diffs else None

    def to_text(self, limit: int = 50) -> str:
        a, b = self.providers
        lines = [
            f"compare {self.model}: {a} vs {b}, {self.compared} values "
            f"(rtol {self.rtol:g}, atol {self.atol:g})"
        ]
        if self.missing:
            lines.append(f"not produced on both sides: {', '.join(self.missing)}")
        if not self.diffs:
            lines.append("no value differs beyond tolerance")
            return "\n".join(lines)
        d0 = self.diffs[0]
        lines.append(
            f"first divergence: value {d0.value!r} from node {d0.node!r} ({d0.op_type})"
            + _placement(d0)
        )
        lines.append(f"{len(self.diffs)} value(s) differ, in topological order:")
        for d in self.diffs[:limit]:
            origin = "introduced here" if d.introduced else "inherited"
            lines.append(
                f"  #{d.position:<4} {d.value!r} <- {d.node!r} ({d.op_type}){_placement(d)}: "
                f"{origin}; {d.detail}"
            )
        if len(self.diffs) > limit:
            lines.append(f"  ... and {len(self.diffs) - limit} more")
        return "\n".join(lines)


def _placement(d: ValueDiff) -> str:
    if not d.placed_on:
        return ""
    return " [" + ", ".join(f"{k}: ran on {v}" for k, v in d.placed_on.items()) + "]"


def load_inputs(items: Sequence[str]) -> dict[str, Any]:
    """`["x=a.npy", ...]` -> {"x": array}."""
    feeds: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ValueError(f"--inputs takes NAME=FILE.npy, got {item!r}")
        name, path = item.split("=", 1)
        feeds[name] = np.load(path, allow_pickle=False)
    return feeds


def topological_nodes(graph: onnx.GraphProto) -> list[tuple[int, onnx.NodeProto]]:
    """(index in the file, node) in a topological order (stable: file order where it is one)."""
    produced_by = {o: i for i, n in enumerate(graph.node) for o in n.output if o}
    deps = [
        {produced_by[x] for x in n.input if x in produced_by and produced_by[x] != i}
        for i, n in enumerate(graph.node)
    ]
    done: set[int] = set()
    order: list[int] = []
    while len(order) < len(graph.node):
        progressed = False
        for i in range(len(graph.node)):
            if i not in done and deps[i] <= done:
                done.add(i)
                order.append(i)
                progressed = True
        if not progressed:  # a cycle: keep the file order for the rest
            order += [i for i in range(len(graph.node)) if i not in done]
            break
    return [(i, graph.node[i]) for i in order]


def expose_all(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` whose graph outputs include every node output."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    try:
        inferred = onnx.shape_inference.infer_shapes(out)
        known = {vi.name: vi for vi in inferred.graph.value_info}
    except Exception:  # inference is a convenience: untyped outputs are fine
        known = {}
    have = {o.name for o in out.graph.output}
    for _, node in topological_nodes(out.graph):
        for name in node.output:
            if name and name not in have:
                vi = known.get(name)
                if vi is not None and vi.type.WhichOneof("value"):
                    out.graph.output.append(vi)
                else:
                    out.graph.output.append(onnx.ValueInfoProto(name=name))
                have.add(name)
    return out


def _random_inputs(model: onnx.ModelProto, given: Mapping[str, Any], seed: int) -> dict[str, Any]:
    from onnx import helper

    rng = np.random.default_rng(seed)
    inits = {i.name for i in model.graph.initializer}
    feeds = dict(given)
    for vi in model.graph.input:
        if vi.name in inits or vi.name in feeds:
            continue
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            raise ValueError(f"input {vi.name!r} is not a tensor; pass it with --inputs")
        shape = [d.dim_value if d.HasField("dim_value") else 1 for d in tt.shape.dim]
        dt = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type))
        if dt.kind == "f":
            feeds[vi.name] = rng.standard_normal(shape).astype(dt)
        elif dt.kind in "iu":
            feeds[vi.name] = rng.integers(0, 4, shape).astype(dt)
        elif dt.kind == "b":
            feeds[vi.name] = rng.integers(0, 2, shape).astype(bool)
        else:
            raise ValueError(f"input {vi.name!r} ({dt}): pass it with --inputs")
    return feeds


def _run(
    model: onnx.ModelProto, provider: str, feeds: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, str]]:
    """All graph outputs by name, and node -> provider (empty for onnx.reference)."""
    names = [o.name for o in model.graph.output]
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        if provider == REFERENCE:
            from onnx.reference import ReferenceEvaluator

            outs = ReferenceEvaluator(model).run(None, dict(feeds))
            return dict(zip(names, outs)), {}
        from turnout import InferenceSession, SessionOptions
        from turnout.sdk.provider_options import CPU_NUMPY_ONLY_KEY

        so = SessionOptions()
        so.fallback = "allow"  # what the provider declines runs on CPU; the report says so
        so.add_session_config_entry(CPU_NUMPY_ONLY_KEY, "1")  # CPU here is the numpy kernels
        sess = InferenceSession(model.SerializeToString(), so, providers=[provider])
        outs = sess.run(None, dict(feeds))
        placed = {a.node: a.provider for a in sess.partition_report().assignments}
        return dict(zip([o.name for o in sess.get_outputs()], outs)), placed


def _difference(a: Any, b: Any, rtol: float, atol: float) -> str | None:
    from turnout.tools.testing import assert_outputs_close

    try:
        assert_outputs_close([a], [b], rtol, atol)
    except AssertionError as e:
        if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
            if a.shape != b.shape or a.dtype != b.dtype:
                return f"{a.dtype}{list(a.shape)} vs {b.dtype}{list(b.shape)}"
            if a.dtype.kind in "fciub":
                x, y = a.astype(np.float64), b.astype(np.float64)
                with np.errstate(all="ignore"):
                    err = np.abs(x - y)
                    bad = ~np.isclose(x, y, rtol=rtol, atol=atol, equal_nan=True)
                finite = err[np.isfinite(err)]
                worst = f"{finite.max():.6g}" if finite.size else "nan/inf"
                return f"max abs diff {worst}; {int(bad.sum())}/{a.size} elements beyond tolerance"
        return str(e).strip().splitlines()[0][:300] if str(e).strip() else "differs"
    return None


def compare_model(
    model: str | os.PathLike[str] | onnx.ModelProto,
    a: str,
    b: str,
    inputs: Mapping[str, Any] | None = None,
    rtol: float = 1e-3,
    atol: float = 1e-5,
    seed: int = 0,
) -> Comparison:
    """Run `model` on providers `a` and `b` ("reference" = onnx.reference) and compare every
    node output. Missing inputs are random (standard normal floats, small integers)."""
    proto = model if isinstance(model, onnx.ModelProto) else onnx.load(os.fspath(model))
    label = "<model>" if isinstance(model, onnx.ModelProto) else os.fspath(model)
    if proto.functions:
        proto = onnx.inliner.inline_local_functions(proto)
    exposed = expose_all(proto)
    feeds = _random_inputs(proto, inputs or {}, seed)
    va, placed_a = _run(exposed, a, feeds)
    vb, placed_b = _run(exposed, b, feeds)
    differs: set[str] = set()
    diffs: list[ValueDiff] = []
    missing: list[str] = []
    compared = 0
    for pos, (index, node) in enumerate(topological_nodes(proto.graph)):
        node_name = node.name or f"{node.op_type}_{index}"  # turnout's name for unnamed nodes
        for name in node.output:
            if not name:
                continue
            if name not in va or name not in vb:
                missing.append(name)
                continue
            compared += 1
            detail = _difference(va[name], vb[name], rtol, atol)
            if detail is None:
                continue
            differs.add(name)
            placed = {p: m[node_name] for p, m in ((a, placed_a), (b, placed_b)) if node_name in m}
            diffs.append(
                ValueDiff(
                    position=pos,
                    value=name,
                    node=node_name,
                    op_type=node.op_type,
                    introduced=not any(x in differs for x in node.input),
                    detail=detail,
                    placed_on=placed,
                )
            )
    return Comparison(label, (a, b), rtol, atol, compared, diffs, missing)
