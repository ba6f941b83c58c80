"""`turnout.tools.symbolic_shape_infer` beside onnxruntime's tool of the same name: on small
transformer models built here (batch and sequence symbolic), both give every value the same
shape, dims and symbols alike, up to the symbols' names."""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto
from onnx import helper as oh
from onnx import numpy_helper as nh

from turnout.tools.symbolic_shape_infer import SymbolicShapeInference

H, HEADS, VOCAB = 16, 2, 50
HD = H // HEADS

Shapes = dict[str, list[int | str] | None]


def _ints(name: str, *values: int) -> onnx.TensorProto:
    return nh.from_array(np.array(values, np.int64), name)


def _weights(*names_shapes: tuple[str, tuple[int, ...]]) -> list[onnx.TensorProto]:
    rng = np.random.default_rng(0)
    return [nh.from_array(rng.standard_normal(s).astype(np.float32), n) for n, s in names_shapes]


def _model(nodes: list[onnx.NodeProto], inputs: list[Any], outputs: list[str], inits: list[Any],
           contrib: bool = False) -> onnx.ModelProto:  # fmt: skip
    opsets = [oh.make_opsetid("", 17)] + ([oh.make_opsetid("com.microsoft", 1)] if contrib else [])
    outs = [oh.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs]
    return oh.make_model(oh.make_graph(nodes, "m", inputs, outs, inits), opset_imports=opsets)


def attention_block() -> onnx.ModelProto:
    """Embedding -> LayerNormalization -> self-attention of standard ops; the head split reads
    batch and sequence from a Shape -> Gather -> Concat chain, the merge reshapes to [-1, H]."""
    inits = [
        *_weights(("emb", (VOCAB, H)), ("ln_s", (H,)), ("ln_b", (H,)), ("bq", (H,))),
        *_weights(("wq", (H, H)), ("wk", (H, H)), ("wv", (H, H)), ("wo", (H, H))),
        nh.from_array(np.array(np.sqrt(HD), np.float32), "scale"),
        *(_ints("heads_hd", HEADS, HD), _ints("i0", 0), _ints("i1", 1)),
        *(_ints("flat_shape", -1, H), _ints("merge_shape", 0, 0, H)),
    ]
    mk = oh.make_node
    nodes = [
        mk("Gather", ["emb", "ids"], ["e"]),
        mk("LayerNormalization", ["e", "ln_s", "ln_b"], ["x"], axis=-1, epsilon=1e-5),
        mk("MatMul", ["x", "wq"], ["q0"]),
        mk("Add", ["q0", "bq"], ["q"]),
        mk("MatMul", ["x", "wk"], ["k"]),
        mk("MatMul", ["x", "wv"], ["v"]),
        mk("Shape", ["x"], ["xs"]),
        mk("Gather", ["xs", "i0"], ["b"], axis=0),
        mk("Gather", ["xs", "i1"], ["s"], axis=0),
        mk("Concat", ["b", "s", "heads_hd"], ["split_shape"], axis=0),
    ]
    for t, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
        nodes += [
            mk("Reshape", [t, "split_shape"], [t + "_heads"]),
            mk("Transpose", [t + "_heads"], [t + "_t"], perm=perm),
        ]
    nodes += [
        mk("MatMul", ["q_t", "k_t"], ["scores"]),
        mk("Div", ["scores", "scale"], ["scaled"]),
        mk("Softmax", ["scaled"], ["probs"], axis=-1),
        mk("MatMul", ["probs", "v_t"], ["ctx"]),
        mk("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]),
        mk("Reshape", ["ctx_t", "merge_shape"], ["merged"]),
        mk("Reshape", ["merged", "flat_shape"], ["flat"]),
        mk("MatMul", ["flat", "wo"], ["proj"]),
        mk("Concat", ["b", "s", "i1"], ["bs1"], axis=0),
        mk("Slice", ["bs1", "i0", "i1"], ["b_only"]),
        mk("Concat", ["b_only", "flat_shape"], ["out_shape"], axis=0),
        mk("Reshape", ["proj", "out_shape"], ["y"]),
        mk("Concat", ["x", "y"], ["both"], axis=1),
    ]
    ids = oh.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])
    return _model(nodes, [ids], ["y", "both"], inits)


def contrib_block() -> onnx.ModelProto:
    """The same block as onnxruntime's transformer optimizer writes it: com.microsoft
    EmbedLayerNormalization, Attention and SkipLayerNormalization."""
    inits = _weights(
        ("emb", (VOCAB, H)), ("pos", (VOCAB, H)), ("seg", (2, H)), ("ln_s", (H,)), ("ln_b", (H,)),
        ("qkv_w", (H, 3 * H)), ("qkv_b", (3 * H,)), ("wo", (H, H)), ("bo", (H,)),
    )  # fmt: skip
    embed_inputs = ["ids", "segs", "emb", "pos", "seg", "ln_s", "ln_b", "mask"]
    ms = functools.partial(oh.make_node, domain="com.microsoft")
    nodes = [
        ms("EmbedLayerNormalization", embed_inputs, ["x", "mask_index"], epsilon=1e-5),
        ms("Attention", ["x", "qkv_w", "qkv_b", "mask_index"], ["a"], num_heads=HEADS),
        oh.make_node("MatMul", ["a", "wo"], ["o"]),
        ms("SkipLayerNormalization", ["o", "x", "ln_s", "ln_b", "bo"], ["y"]),
        oh.make_node("Softmax", ["y"], ["z"], axis=-1),
    ]
    inputs = [
        oh.make_tensor_value_info(n, TensorProto.INT32, ["batch", "seq"])
        for n in ("ids", "segs", "mask")
    ]
    return _model(nodes, inputs, ["z"], inits, contrib=True)


def decoder_step() -> onnx.ModelProto:
    """A decoder step with a KV cache: present = Concat(past, k) on the sequence axis; a mask
    from Shape -> Slice -> ConstantOfShape -> Trilu -> Expand; Slice, Tile and a Reshape whose
    shape is computed with Mul."""
    inits = [
        *_weights(("wk", (H, H)), ("wq", (H, H))),
        *(_ints("heads_hd", HEADS, HD), _ints("i0", 0), _ints("i1", 1), _ints("i2", 2)),
        *(_ints("im1", -1), _ints("big", 2**31 - 1)),
    ]
    mk = oh.make_node
    nodes = [
        mk("MatMul", ["x", "wk"], ["k"]),
        mk("MatMul", ["x", "wq"], ["q"]),
        mk("Shape", ["x"], ["xs"]),
        mk("Slice", ["xs", "i0", "i2"], ["bs"]),
        mk("Concat", ["bs", "heads_hd"], ["split_shape"], axis=0),
        mk("Reshape", ["k", "split_shape"], ["k_heads"]),
        mk("Transpose", ["k_heads"], ["k_t"], perm=[0, 2, 1, 3]),
        mk("Reshape", ["q", "split_shape"], ["q_heads"]),
        mk("Transpose", ["q_heads"], ["q_t"], perm=[0, 2, 1, 3]),
        mk("Concat", ["past", "k_t"], ["present"], axis=2),
        mk("Transpose", ["present"], ["present_t"], perm=[0, 1, 3, 2]),
        mk("MatMul", ["q_t", "present_t"], ["scores"]),
        mk("Shape", ["scores"], ["scores_shape"]),
        mk("Slice", ["scores_shape", "i2", "big"], ["tail"]),
        mk("ConstantOfShape", ["tail"], ["ones"], value=oh.make_tensor("v", 1, [1], [1.0])),
        mk("Trilu", ["ones", ""], ["causal"], upper=0),
        mk("Expand", ["causal", "scores_shape"], ["mask"]),
        mk("Mul", ["scores", "mask"], ["masked"]),
        mk("Softmax", ["masked"], ["probs"], axis=-1),
        mk("Slice", ["masked", "im1", "big", "im1"], ["last"]),
        mk("Slice", ["present", "i1", "big", "i2"], ["dropped"]),
        mk("Gather", ["xs", "i1"], ["s"], axis=0),
        mk("Mul", ["s", "i2"], ["s2"]),
        mk("Concat", ["i0", "s2", "im1"], ["pair_shape"], axis=0),
        mk("Reshape", ["x", "pair_shape"], ["pairs"]),
        mk("Concat", ["i1", "i2", "i1"], ["repeats"], axis=0),
        mk("Tile", ["x", "repeats"], ["tiled"]),
    ]
    inputs = [
        oh.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", H]),
        oh.make_tensor_value_info("past", TensorProto.FLOAT, ["batch", HEADS, "past_seq", HD]),
    ]
    outputs = ["probs", "present", "last", "dropped", "pairs", "tiled"]
    return _model(nodes, inputs, outputs, inits)


def shapes(model: onnx.ModelProto) -> Shapes:
    out: Shapes = {}
    for vi in (*model.graph.value_info, *model.graph.output):
        t = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else d.dim_param for d in t.shape.dim]
        out[vi.name] = dims if t.HasField("shape") else None
    return out


def assert_same_up_to_renaming(ours: Shapes, theirs: Shapes) -> None:
    """Same values, same numbers, and one-to-one symbols (onnxruntime's tool names its fresh
    symbols and computed dims its own way; a rename is fine, a merge or a split is not)."""
    assert ours.keys() == theirs.keys()
    rename: dict[str, str] = {}
    for name, dims in theirs.items():
        mine = ours[name]
        assert (dims is None) == (mine is None), name
        assert dims is None or mine is None or len(dims) == len(mine), (name, mine, dims)
        for a, b in zip(mine or [], dims or [], strict=True):
            assert type(a) is type(b), (name, mine, dims)
            if isinstance(b, str):
                assert rename.setdefault(b, str(a)) == a, (name, mine, dims)
            else:
                assert a == b, (name, mine, dims)
    assert len(set(rename.values())) == len(rename), rename


@pytest.fixture(scope="module")
def ort_tool() -> Any:
    return pytest.importorskip("onnxruntime.tools.symbolic_shape_infer").SymbolicShapeInference


@pytest.mark.parametrize("build", [attention_block, contrib_block, decoder_step])
def test_shapes_match_onnxruntimes_tool(build: Any, ort_tool: Any) -> None:
    model = build()
    ours = SymbolicShapeInference.infer_shapes(model)
    assert ours is not None
    assert_same_up_to_renaming(shapes(ours), shapes(ort_tool.infer_shapes(model)))
    assert not model.graph.value_info  # the input model is not changed


def test_computed_dims_are_expressions_of_the_input_symbols() -> None:
    att = shapes(SymbolicShapeInference.infer_shapes(attention_block()))  # type: ignore[arg-type]
    dec = shapes(SymbolicShapeInference.infer_shapes(decoder_step()))  # type: ignore[arg-type]
    assert att["flat"] == ["batch*seq", H]
    assert att["both"] == ["batch", "2*seq", H]
    assert dec["present"] == ["batch", HEADS, "past_seq + seq", HD]
    assert dec["dropped"] == ["batch", HEADS, "past_seq + seq - 1", HD]
    assert dec["mask"] == ["batch", HEADS, "seq", "past_seq + seq"]


def _conflicting() -> onnx.ModelProto:
    nodes = [
        oh.make_node("Add", ["a", "b"], ["c"]),
        oh.make_node("Foo", ["c"], ["d"], domain="custom"),
        oh.make_node("Relu", ["d"], ["e"]),
    ]
    inputs = [
        oh.make_tensor_value_info("a", TensorProto.FLOAT, ["batch", "seq"]),
        oh.make_tensor_value_info("b", TensorProto.FLOAT, ["batch", "seq2"]),
    ]
    model = _model(nodes, inputs, ["e"], [])
    model.opset_import.append(oh.make_opsetid("custom", 1))
    return model


def test_auto_merge_and_guess_output_rank_as_onnxruntime(
    ort_tool: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # onnxruntime's tool writes sym_shape_infer_temp.onnx there
    model = _conflicting()
    for kwargs in ({"guess_output_rank": True}, {"auto_merge": True}):
        for tool in (ort_tool, SymbolicShapeInference):
            with pytest.raises(Exception, match="Incomplete symbolic shape inference"):
                tool.infer_shapes(model, **kwargs)
    both = {"auto_merge": True, "guess_output_rank": True}
    ours = shapes(SymbolicShapeInference.infer_shapes(model, **both))  # type: ignore[arg-type]
    assert_same_up_to_renaming(ours, shapes(ort_tool.infer_shapes(model, **both)))
    assert ours["c"] == ["batch", "seq"]  # seq2 merged into seq
    assert ours["e"] == ["Foo_1_o0__d0", "Foo_1_o0__d1"]


def test_opset_below_7_gives_none() -> None:
    model = _model([oh.make_node("Relu", ["a"], ["e"])], [], ["e"], [])
    model.opset_import[0].version = 6
    assert SymbolicShapeInference.infer_shapes(model) is None


def _python(code: str, *args: str) -> None:
    subprocess.run([sys.executable, code, *args], check=True, capture_output=True, text=True)


def test_command_line_and_drop_in(tmp_path: Path) -> None:
    onnx.save(decoder_step(), tmp_path / "in.onnx")
    cmd = ["--input", str(tmp_path / "in.onnx"), "--output", str(tmp_path / "out.onnx")]
    subprocess.run(
        [sys.executable, "-m", "turnout.tools.symbolic_shape_infer", *cmd, "--auto_merge"],
        check=True,
    )
    expected = shapes(SymbolicShapeInference.infer_shapes(decoder_step()))  # type: ignore[arg-type]
    assert shapes(onnx.load(tmp_path / "out.onnx")) == expected
    script = (
        "import sys, turnout, onnx; turnout.install_as_onnxruntime()\n"
        "from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference as S\n"
        "import onnxruntime.tools.symbolic_shape_infer as m\n"
        "assert m.__name__ == 'turnout.tools.symbolic_shape_infer', m.__name__\n"
        "out = S.infer_shapes(onnx.load(sys.argv[1]), auto_merge=True)\n"
        "onnx.save(out, sys.argv[2])\n"
    )
    (tmp_path / "script.py").write_text(script)
    _python(str(tmp_path / "script.py"), str(tmp_path / "in.onnx"), str(tmp_path / "drop.onnx"))
    assert shapes(onnx.load(tmp_path / "drop.onnx")) == expected
