"""turnout.sdk.fusion: the provider-independent graph analysis behind fused groups (index, convex
grouping, group boundaries)."""

from __future__ import annotations

from typing import Any

import onnx
from onnx import TensorProto, helper

from turnout.graph.ir import Graph, GraphView
from turnout.sdk.fusion import GraphIndex, find_groups, group_inputs, group_outputs, is_convex

EW = {"Exp", "Relu", "Neg", "Abs", "Add", "Mul", "Sigmoid"}  # what the tests call fusible


def _node(op: str, inputs: list[str], outputs: list[str], **attrs: Any) -> onnx.NodeProto:
    return helper.make_node(op, inputs, outputs, name=outputs[0].upper(), **attrs)


def _index(
    nodes: list[onnx.NodeProto], outputs: list[str], inputs: tuple[str, ...] = ("x",)
) -> GraphIndex:
    vi = [helper.make_tensor_value_info(i, TensorProto.FLOAT, [4]) for i in inputs]
    vo = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs]
    graph = Graph.from_proto(helper.make_graph(nodes, "g", vi, vo), {"": 17})
    return GraphIndex.of(GraphView(graph, {}))


def _fusible(idx: GraphIndex) -> set[str]:
    return {n.name for n in idx.nodes if n.op_type in EW}


def test_chain_is_one_group_in_topological_order() -> None:
    nodes = [_node("Exp", ["x"], ["e"]), _node("Relu", ["e"], ["r"]), _node("Neg", ["r"], ["n"])]
    idx = _index(nodes, ["n"])
    assert find_groups(idx, _fusible(idx)) == [["E", "R", "N"]]
    assert group_inputs(["E", "R", "N"], idx) == ["x"]
    assert group_outputs(["E", "R", "N"], idx) == ["n"]


def test_path_leaving_the_group_and_coming_back_prevents_merging() -> None:
    # Exp -> Relu -> Add and Exp -> Transpose (not fusible) -> Add: {Exp, Relu, Add} would need
    # Transpose's result inside the group that produces Transpose's input.
    nodes = [
        _node("Exp", ["x"], ["e"]),
        _node("Relu", ["e"], ["r"]),
        _node("Transpose", ["e"], ["t"], perm=[0]),
        _node("Add", ["r", "t"], ["a"]),
    ]
    idx = _index(nodes, ["a"])
    assert not is_convex({"E", "R", "A"}, idx)
    assert is_convex({"E", "R"}, idx)
    assert find_groups(idx, _fusible(idx)) == [["E", "R"]]
    assert group_outputs(["E", "R"], idx) == ["e", "r"]  # e feeds Transpose, r feeds Add


def test_producer_groups_merge_when_the_union_is_convex() -> None:
    nodes = [
        _node("Exp", ["x"], ["e"]),
        _node("Neg", ["y"], ["n"]),
        _node("Relu", ["e"], ["r"]),
        _node("Abs", ["n"], ["b"]),
        _node("Add", ["r", "b"], ["a"]),
    ]
    idx = _index(nodes, ["a"], inputs=("x", "y"))
    assert find_groups(idx, _fusible(idx)) == [["E", "N", "R", "B", "A"]]
    assert group_inputs(["E", "N", "R", "B", "A"], idx) == ["x", "y"]


def test_key_keeps_incompatible_nodes_apart() -> None:
    nodes = [
        _node("Exp", ["x"], ["e"]),
        _node("Relu", ["e"], ["r"]),
        _node("Neg", ["r"], ["n"]),
        _node("Abs", ["n"], ["b"]),
    ]
    idx = _index(nodes, ["b"])
    key = {"E": 1, "R": 1, "N": 2, "B": 2}
    assert find_groups(idx, set(key), key=key.__getitem__) == [["E", "R"], ["N", "B"]]


def test_value_read_by_a_subgraph_is_a_group_output() -> None:
    then_g = helper.make_graph(
        [helper.make_node("Identity", ["e"], ["t"])],
        "then",
        [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)],
    )
    else_g = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["f"])],
        "else",
        [],
        [helper.make_tensor_value_info("f", TensorProto.FLOAT, None)],
    )
    nodes = [
        _node("Exp", ["x"], ["e"]),
        _node("Relu", ["e"], ["r"]),
        _node("If", ["c"], ["i"], then_branch=then_g, else_branch=else_g),
    ]
    idx = _index(nodes, ["r", "i"], inputs=("x", "c"))
    assert idx.readers["e"] == ["R", "I"]  # the If reads e only through its subgraph
    assert find_groups(idx, _fusible(idx)) == [["E", "R"]]
    assert group_outputs(["E", "R"], idx) == ["e", "r"]


def test_graph_output_inside_the_group_is_exported() -> None:
    nodes = [_node("Exp", ["x"], ["e"]), _node("Relu", ["e"], ["r"])]
    idx = _index(nodes, ["e", "r"])
    assert group_outputs(["E", "R"], idx) == ["e", "r"]


def test_group_nothing_reads_still_exports_its_last_value() -> None:
    nodes = [_node("Exp", ["x"], ["e"]), _node("Relu", ["e"], ["r"]), _node("Neg", ["x"], ["n"])]
    idx = _index(nodes, ["n"])
    assert find_groups(idx, {"E", "R"}) == [["E", "R"]]
    assert group_outputs(["E", "R"], idx) == ["r"]


def test_boundary_inputs_are_in_first_read_order_without_repeats() -> None:
    nodes = [
        _node("Mul", ["y", "x"], ["m"]),
        _node("Add", ["m", "y"], ["a"]),
        _node("Mul", ["a", "z"], ["q"]),
    ]
    idx = _index(nodes, ["q"], inputs=("x", "y", "z"))
    assert group_inputs(["M", "A", "Q"], idx) == ["y", "x", "z"]


def test_groups_do_not_depend_on_the_order_of_the_fusible_names() -> None:
    # Two independent chains and a non-fusible node between them: the result is fixed by the
    # graph's node order alone.
    nodes = [
        _node("Exp", ["x"], ["e"]),
        _node("Sigmoid", ["y"], ["s"]),
        _node("Relu", ["e"], ["r"]),
        _node("Transpose", ["r"], ["t"], perm=[0]),
        _node("Neg", ["s"], ["n"]),
        _node("Abs", ["t"], ["b"]),
        _node("Mul", ["b", "x"], ["m"]),
    ]
    idx = _index(nodes, ["m", "n"], inputs=("x", "y"))
    names = sorted(_fusible(idx))
    want = [["E", "R"], ["S", "N"], ["B", "M"]]
    assert find_groups(idx, names) == want
    assert find_groups(idx, list(reversed(names))) == want
    assert find_groups(idx, set(reversed(names))) == want


def test_groups_of_random_graphs_match_checking_each_group_from_scratch(
    monkeypatch: Any,
) -> None:
    """find_groups keeps each group's outside readers as it grows (not walked member by member
    at each check): on random DAGs of fusible and other nodes it finds the groups it finds
    when every convexity check starts from all the members, and each group is convex."""
    import random

    from turnout.sdk import fusion

    def from_scratch(group: Any, idx: GraphIndex, leaving: Any = None, last: Any = None) -> bool:
        return is_convex(group, idx)

    for seed in range(60):
        rnd = random.Random(seed)
        values = ["x"]
        nodes = []
        for i in range(rnd.randint(4, 40)):
            op = rnd.choice(["Relu", "Neg", "Add", "Mul", "Transpose", "Add"])
            arity = 2 if op in ("Add", "Mul") else 1
            ins = [rnd.choice(values[-6:]) for _ in range(arity)]
            nodes.append(helper.make_node(op, ins, [f"v{i}"], name=f"N{i}"))
            values.append(f"v{i}")
        idx = _index(nodes, [values[-1]])
        groups = find_groups(idx, _fusible(idx))
        with monkeypatch.context() as m:
            m.setattr(fusion, "is_convex", from_scratch)
            assert find_groups(idx, _fusible(idx)) == groups, seed
        for g in groups:
            assert is_convex(g, idx), (seed, g)
