"""Dynamic quantization bit for bit beside onnxruntime (issue 28, item 4).

- DynamicQuantizeLinear's codes, scale and zero point on the numpy and numba kernels, on inputs
  built to sit on rounding ties (x / scale = k + 0.5, and the float32 neighbours around it), one
  sign only, constant, with zeros; DynamicQuantizeMatMul (which rounds A by the same rule).
- onnxruntime.quantization.quantize_dynamic of small LSTM, GRU and CNN + BiLSTM models, run on
  both runtimes: every DynamicQuantizeLinear output and DynamicQuantizeLSTM's outputs bit-equal
  where their inputs are, the final outputs within 1e-3 of their range.
- turnout.tools.quantization.quantize_dynamic writing onnxruntime's weight codes.

DynamicQuantizeLSTM's sigmoid and tanh, and the float32 Sigmoid op's, are onnxruntime's MLAS
approximations as its x86-64 FMA3 kernels compute them; their bit-equality is checked where this
host's onnxruntime computes those (`turnout.tools.testing.onnxruntime_mlas_fma3`), and skipped with
the reason elsewhere (an ARM build has other kernels).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from turnout.api.options import SessionOptions
from turnout.api.session import InferenceSession
from turnout.engine.provider_selection import CPU_NUMPY_ONLY_KEY
from turnout.tools.quantization import QuantType
from turnout.tools.quantization import quantize_dynamic as turnout_quantize_dynamic
from turnout.tools.quantization.params import quantize_weight
from turnout.tools.testing import (
    cpu_session,
    one_node_model,
    onnxruntime_mlas_fma3,
    provider_session,
)
from turnout_testbed import apps

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle for the codes")
ort_quant = pytest.importorskip(
    "onnxruntime.quantization", reason="its quantize_dynamic writes the models compared"
)

F32 = np.float32
Array = np.ndarray[Any, Any]


# ---------------------------------------------------------------------------------- sessions
def _ort(model: onnx.ModelProto, threads: int = 1) -> Any:
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _turnout(model: onnx.ModelProto, threads: int = 1, numpy_only: bool = True) -> Any:
    """turnout's CPU path with `threads` intra-op threads: the numpy kernels, or the default
    (an installed host provider, numba, serving what it compiles)."""
    so = SessionOptions()
    so.intra_op_num_threads = threads
    if numpy_only:
        so.add_session_config_entry(CPU_NUMPY_ONLY_KEY, "1")
    return InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _run_both(
    model: onnx.ModelProto, feeds: dict[str, Array], threads: int = 1, numpy_only: bool = True
) -> tuple[dict[str, Array], dict[str, Array]]:
    theirs = _ort(model, threads)
    names = [o.name for o in theirs.get_outputs()]
    want = dict(zip(names, theirs.run(None, feeds)))
    got = dict(zip(names, _turnout(model, threads, numpy_only).run(names, feeds)))
    return want, got


def _needs_mlas_fma3() -> None:
    if not onnxruntime_mlas_fma3():
        pytest.skip(
            "onnxruntime on this host computes Sigmoid/Tanh otherwise than its x86-64 FMA3 "
            "kernels, which turnout's float32 Sigmoid/Tanh and DynamicQuantizeLSTM follow"
        )


def _bits(a: Any) -> bytes:
    return np.ascontiguousarray(a).tobytes()


# ---------------------------------------------------------------- DynamicQuantizeLinear
def _near_ties(rng: np.random.Generator, lo: float, hi: float, n: int) -> Array:
    """`n` values x with x / scale within 2 float32 steps of k + 0.5 for the scale of the range
    [lo, hi] (both included, so that the range is that one)."""
    scale = (F32(hi) - F32(lo)) / F32(255)
    k = rng.integers(int(np.ceil(F32(lo) / scale)), int(np.floor(F32(hi) / scale)), n)
    x = ((k + F32(0.5)) * scale).astype(F32)
    for _ in range(2):
        step = rng.integers(-1, 2, n)
        x = np.where(step > 0, np.nextafter(x, F32(np.inf)), x)
        x = np.where(step < 0, np.nextafter(x, F32(-np.inf)), x).astype(F32)
    return np.concatenate([[F32(lo), F32(hi)], np.clip(x, F32(lo), F32(hi))]).astype(F32)


def _dql_input(case: str) -> Array:
    rng = np.random.default_rng(sum(map(ord, case)))
    kind, _, arg = case.partition("-")
    if kind == "normal":
        return (rng.standard_normal(int(arg)) * 3 + 0.7).astype(F32)
    if kind == "ties":
        lo, hi = {"mixed": (-1.3, 2.1), "positive": (0.0, 3.7), "negative": (-2.9, 0.0)}[arg]
        return _near_ties(rng, lo, hi, 6000).reshape(2, -1)
    x = rng.standard_normal((5, 33)).astype(F32)
    made = {
        "negative": -np.abs(x) - F32(0.25),
        "positive": np.abs(x) + F32(0.25),
        "constant_positive": np.full((4, 9), 0.37, F32),
        "constant_negative": np.full((4, 9), -1.7, F32),
        "zeros": np.where(rng.random(x.shape) < 0.3, F32(0), x),
        "all_zero": np.zeros((3, 7), F32),
        "tiny": x * F32(1e-30),
        "huge": x * F32(1e30),
    }
    return made[kind].astype(F32)


DQL_CASES = [
    *(f"normal-{n}" for n in (1, 7, 16, 17, 100, 4099)),
    *(f"ties-{s}" for s in ("mixed", "positive", "negative")),
    "negative",
    "positive",
    "constant_positive",
    "constant_negative",
    "zeros",
    "all_zero",
    "tiny",
    "huge",
]


def _session_on(provider: str, model: onnx.ModelProto) -> Any:
    if provider == "numba":
        pytest.importorskip("turnout_numba", reason="the numba provider is not installed")
        return provider_session(model, "NumbaExecutionProvider")
    return cpu_session(model)


@pytest.mark.parametrize("provider", ["numpy", "numba"])
@pytest.mark.parametrize("case", DQL_CASES)
def test_dynamic_quantize_linear_bit_equal(case: str, provider: str) -> None:
    x = _dql_input(case)
    model = one_node_model(helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"]), [x])
    want = _ort(model).run(None, {"x": x})
    got = _session_on(provider, model).run(None, {"x": x})
    assert [g.dtype for g in got] == [np.uint8, np.float32, np.uint8]
    assert _bits(got[1]) == _bits(want[1]) and _bits(got[2]) == _bits(want[2])
    assert got[0].shape == want[0].shape and _bits(got[0]) == _bits(want[0])
    if case.startswith("ties"):
        # the inputs do tell a division from a multiplication by 1 / scale
        s = F32(want[1])
        assert (np.rint(x / s) != np.rint(x * (F32(1) / s))).any()


@pytest.mark.onnxruntime_exact_8bit
@pytest.mark.parametrize("provider", ["numpy", "numba"])
@pytest.mark.parametrize("case", ["ties-mixed", "ties-negative", "zeros"])
def test_dynamic_quantize_matmul_bit_equal(case: str, provider: str) -> None:
    """DynamicQuantizeMatMul rounds A by DynamicQuantizeLinear's rule, then scales the integer
    product as onnxruntime's output processor does."""
    rng = np.random.default_rng(7)
    a = _dql_input(case).reshape(-1)[:150].reshape(5, 30)
    b = rng.integers(-128, 128, (30, 12)).astype(np.int8)
    ins = [a, b, np.array(0.02, F32), np.array(3, np.int8), rng.standard_normal(12).astype(F32)]
    names = ["a", "b", "b_scale", "b_zp", "bias"]
    node = helper.make_node("DynamicQuantizeMatMul", names, ["y"], domain="com.microsoft")
    model = one_node_model(node, ins, {"": 17, "com.microsoft": 1})
    feeds = dict(zip(names, ins))
    assert _bits(_session_on(provider, model).run(None, feeds)[0]) == _bits(
        _ort(model).run(None, feeds)[0]
    )


# ------------------------------------------------------------------------ quantized models
def _quantized_by_onnxruntime(
    model: onnx.ModelProto, tmp_path: Any, **options: Any
) -> onnx.ModelProto:
    src, dst = tmp_path / "float.onnx", tmp_path / "quantized.onnx"
    onnx.save(model, str(src))
    ort_quant.quantize_dynamic(str(src), str(dst), **options)
    return onnx.load(str(dst))


def _expose_dynamic_quantization(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    """Adds the first input and the outputs of every DynamicQuantizeLinear and
    DynamicQuantizeLSTM as graph outputs; returns those nodes."""
    nodes = [n for n in model.graph.node if "DynamicQuantize" in n.op_type]
    known = {o.name for o in model.graph.output}
    for n in nodes:
        for name in [n.input[0], *n.output]:
            if name and name not in known:
                model.graph.output.append(onnx.ValueInfoProto(name=name))
                known.add(name)
    return nodes


def _within_range(want: Array, got: Array, tol: float = 1e-3) -> float:
    """max |got - want| over want's range, asserted below `tol`."""
    span = float(want.max() - want.min()) or 1.0
    gap = float(np.abs(got.astype(np.float64) - want).max()) / span
    assert gap < tol, f"{gap:.2e} of the output range"
    return gap


def _check_quantized(
    model: onnx.ModelProto,
    feeds: dict[str, Array],
    threads: int = 1,
    exact: bool = True,
    numpy_only: bool = True,
) -> None:
    """The final outputs within 1e-3 of their range (the model as quantized, which both
    runtimes may fuse); then, with the intermediates exposed: each DynamicQuantizeLinear's
    codes, scale and zero point bit-equal to onnxruntime's for onnxruntime's own input, and
    end to end bit-equal (`exact`; else within one code: a float op upstream that is not
    onnxruntime's to the bit, a GRU cell say, may move an input across a rounding tie);
    DynamicQuantizeLSTM's outputs bit-equal where its input is."""
    finals = [o.name for o in model.graph.output]
    want, got = _run_both(model, feeds, threads, numpy_only)
    for name in finals:
        _within_range(want[name], got[name])
    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    nodes = _expose_dynamic_quantization(exposed)
    assert nodes, "onnxruntime quantized nothing at run time"
    want, got = _run_both(exposed, feeds, threads, numpy_only)
    dql = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])
    for n in nodes:
        if n.op_type == "DynamicQuantizeLSTM":
            if onnxruntime_mlas_fma3() and _bits(got[n.input[0]]) == _bits(want[n.input[0]]):
                for name in (o for o in n.output if o):
                    assert _bits(got[name]) == _bits(want[name]), name
            continue
        x = want[n.input[0]]
        ours = cpu_session(one_node_model(dql, [x])).run(None, {"x": x})
        for mine, name in zip(ours, n.output):
            assert _bits(mine) == _bits(want[name]), name
        if exact:
            for name in n.output:
                assert _bits(got[name]) == _bits(want[name]), f"{name}, end to end"
        codes = n.output[0]
        assert np.abs(got[codes].astype(int) - want[codes]).max(initial=0) <= 1, codes


def _lstm(
    steps: int = 12,
    batch: int = 5,
    isz: int = 10,
    hs: int = 8,
    direction: str = "bidirectional",
    seq: bool = False,
    init: bool = False,
    peep: bool = False,
    y_out: bool = True,
    head: bool = True,
    seed: int = 0,
    **attrs: Any,
) -> tuple[onnx.ModelProto, dict[str, Array]]:
    """A float LSTM (constant W, R, B, P) and its feeds; a MatMul head over Y when `head`."""
    rng = np.random.default_rng(seed)
    nd = 2 if direction == "bidirectional" else 1
    consts = {
        "W": rng.standard_normal((nd, 4 * hs, isz)) * 0.4,
        "R": rng.standard_normal((nd, 4 * hs, hs)) * 0.4,
        "B": rng.standard_normal((nd, 8 * hs)) * 0.2,
    }
    if peep:
        consts["P"] = rng.standard_normal((nd, 3 * hs)) * 0.3
    feeds = {"x": rng.standard_normal((steps, batch, isz)).astype(F32)}
    if seq:
        feeds["lens"] = rng.integers(0, steps + 1, batch).astype(np.int32)
    if init:
        for k in ("h0", "c0"):
            feeds[k] = (rng.standard_normal((nd, batch, hs)) * 0.5).astype(F32)
    ins = ["x", "W", "R", "B", "lens" * seq, "h0" * init, "c0" * init, "P" * peep]
    outs = ["y" * y_out, "y_h", "y_c"]
    nodes = [helper.make_node("LSTM", ins, outs, hidden_size=hs, direction=direction, **attrs)]
    shapes = {
        "y_h": [nd, batch, hs],
        "y_c": [nd, batch, hs],
        "y": [steps, nd, batch, hs],
        "logits": [steps, batch, 6],
    }
    results = ["y_h", "y_c"] + ["y"] * (y_out and not head)
    if y_out and head:
        consts["fc"] = rng.standard_normal((nd * hs, 6)) * 0.3
        nodes += [
            helper.make_node("Transpose", ["y"], ["yt"], perm=[0, 2, 1, 3]),
            helper.make_node("Reshape", ["yt", "shape"], ["yr"]),
            helper.make_node("MatMul", ["yr", "fc"], ["logits"]),
        ]
        results.append("logits")
    inits = [numpy_helper.from_array(np.asarray(v, F32), k) for k, v in consts.items()]
    inits.append(numpy_helper.from_array(np.array([0, 0, -1], np.int64), "shape"))
    elem = helper.np_dtype_to_tensor_dtype
    graph = helper.make_graph(
        nodes,
        "lstm",
        [helper.make_tensor_value_info(k, elem(v.dtype), list(v.shape)) for k, v in feeds.items()],
        [helper.make_tensor_value_info(r, TensorProto.FLOAT, shapes[r]) for r in results],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), feeds


LSTM_CASES: dict[str, dict[str, Any]] = {
    "bidirectional": {},
    "forward": {"direction": "forward"},
    "reverse": {"direction": "reverse", "seq": True},
    "sequence_lens": {"seq": True},
    "sequence_lens_no_y": {"seq": True, "y_out": False},
    "initial_state": {"init": True},
    "peepholes_clip": {"peep": True, "clip": 0.9},
    "input_forget": {"input_forget": 1},
    "activations": {"activations": ["HardSigmoid", "Relu", "Softsign"] * 2},
    "activations_per_direction": {
        "activations": ["Sigmoid", "Tanh", "Relu", "Tanh", "Sigmoid", "Tanh"]
    },
    "per_channel": {"per_channel": True, "seq": True, "init": True, "peep": True},
}


@pytest.mark.onnxruntime_exact_8bit
@pytest.mark.parametrize("case", list(LSTM_CASES))
def test_quantized_lstm_bit_equal(case: str, tmp_path: Any) -> None:
    _needs_mlas_fma3()
    kw = dict(LSTM_CASES[case])
    per_channel = bool(kw.pop("per_channel", False))
    model, feeds = _lstm(**kw)
    quant = _quantized_by_onnxruntime(model, tmp_path, per_channel=per_channel)
    assert any(n.op_type == "DynamicQuantizeLSTM" for n in quant.graph.node)
    _check_quantized(quant, feeds)


@pytest.mark.onnxruntime_exact_8bit
@pytest.mark.parametrize("batch", [3, 7])
def test_quantized_lstm_splits_the_batch_as_onnxruntime_threads(batch: int, tmp_path: Any) -> None:
    """Each of onnxruntime's threads rounds the hidden state of its rows on their own range;
    with intra_op_num_threads alike, turnout groups the rows the same way."""
    _needs_mlas_fma3()
    model, feeds = _lstm(steps=20, batch=batch, seed=batch)
    _check_quantized(_quantized_by_onnxruntime(model, tmp_path), feeds, threads=2)


def _gru(seed: int = 0) -> tuple[onnx.ModelProto, dict[str, Array]]:
    rng = np.random.default_rng(seed)
    steps, batch, isz, hs = 12, 3, 10, 8
    consts = {
        "W": rng.standard_normal((2, 3 * hs, isz)) * 0.4,
        "R": rng.standard_normal((2, 3 * hs, hs)) * 0.4,
        "B": rng.standard_normal((2, 6 * hs)) * 0.2,
        "fc": rng.standard_normal((2 * hs, 6)) * 0.3,
    }
    nodes = [
        helper.make_node("MatMul", ["x", "proj"], ["xp"]),
        helper.make_node("GRU", ["xp", "W", "R", "B"], ["y"], hidden_size=hs,
                         direction="bidirectional", linear_before_reset=1),
        helper.make_node("Transpose", ["y"], ["yt"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["yt", "shape"], ["yr"]),
        helper.make_node("MatMul", ["yr", "fc"], ["logits"]),
    ]  # fmt: skip
    consts["proj"] = rng.standard_normal((isz, isz)) * 0.5
    inits = [numpy_helper.from_array(np.asarray(v, F32), k) for k, v in consts.items()]
    inits.append(numpy_helper.from_array(np.array([0, 0, -1], np.int64), "shape"))
    graph = helper.make_graph(
        nodes,
        "gru",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [steps, batch, isz])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [steps, batch, 6])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model, {"x": rng.standard_normal((steps, batch, isz)).astype(F32)}


def test_quantized_gru(tmp_path: Any) -> None:
    """onnxruntime's quantize_dynamic leaves a GRU float (its two MatMuls around it become
    integer products): the GRU itself is turnout's float kernel, within a few float32 steps of
    onnxruntime's approximated one, so the head's codes are held to onnxruntime's input."""
    model, feeds = _gru()
    quant = _quantized_by_onnxruntime(model, tmp_path)
    assert any(n.op_type == "GRU" for n in quant.graph.node)
    _check_quantized(quant, feeds, exact=False)


@pytest.mark.onnxruntime_exact_8bit
@pytest.mark.parametrize("path", ["numpy", "default"])
def test_quantized_cnn_bilstm_ocr(path: str, tmp_path: Any) -> None:
    """The CRNN text-line recognizer (depthwise-separable convolutions with BatchNormalization,
    a bidirectional LSTM, a CTC head): 17 ConvInteger, one DynamicQuantizeLSTM and a
    MatMulInteger, every code bit-equal end to end. (Image 6 flipped 4 codes while
    BatchNormalization computed scale / sqrt(var + eps), not onnxruntime's
    (1 / sqrt(var + eps)) * scale.)"""
    model = apps.crnn_ocr_like(width=64, hidden=32)
    quant = _quantized_by_onnxruntime(model, tmp_path)
    ops = [n.op_type for n in quant.graph.node]
    assert "DynamicQuantizeLSTM" in ops and "ConvInteger" in ops
    for seed in (0, 6):
        feeds = apps.crnn_ocr_feeds(64, seed=seed)
        _check_quantized(quant, feeds, exact=onnxruntime_mlas_fma3(), numpy_only=path == "numpy")


def _crnn_with_sigmoid() -> onnx.ModelProto:
    """The CRNN with Sigmoid where it has HardSwish (after each depthwise convolution's
    BatchNormalization): the next convolution's DynamicQuantizeLinear rounds Sigmoid's outputs
    to uint8."""
    model = apps.crnn_ocr_like(width=64, hidden=32)
    for n in model.graph.node:
        if n.op_type == "HardSwish":
            n.op_type = "Sigmoid"
    return model


@pytest.mark.onnxruntime_exact_8bit
@pytest.mark.parametrize("path", ["numpy", "default"])
def test_quantized_cnn_with_sigmoid_bit_equal(path: str, tmp_path: Any) -> None:
    """The float32 Sigmoid op is onnxruntime's MLAS sigmoid to the bit, so every code of the
    CRNN-with-Sigmoid is onnxruntime's. (While turnout computed Sigmoid exactly, last-bit
    differences flipped 1,022 codes over these 8 images on the numpy path and 1,447 on the
    numba path, and the output was 5.4e-3 of its range away.)"""
    _needs_mlas_fma3()
    quant = _quantized_by_onnxruntime(_crnn_with_sigmoid(), tmp_path)
    ops = [n.op_type for n in quant.graph.node]
    assert ops.count("Sigmoid") == 9 and "DynamicQuantizeLSTM" in ops
    exposed = onnx.ModelProto()
    exposed.CopyFrom(quant)
    dql = [n for n in _expose_dynamic_quantization(exposed) if n.op_type == "DynamicQuantizeLinear"]
    theirs = _ort(exposed)
    names = [o.name for o in theirs.get_outputs()]
    ours = _turnout(exposed, numpy_only=path == "numpy")
    for seed in range(8):
        feeds = apps.crnn_ocr_feeds(64, seed=seed)
        want = dict(zip(names, theirs.run(None, feeds)))
        got = dict(zip(names, ours.run(names, feeds)))
        for n in dql:
            assert _bits(got[n.output[0]]) == _bits(want[n.output[0]]), (seed, n.output[0])
        _within_range(want["probs"], got["probs"], tol=1e-5)


@pytest.mark.onnxruntime_exact_8bit
def test_lstm_on_onnxruntime_input_bit_equal(tmp_path: Any) -> None:
    """The CRNN's DynamicQuantizeLSTM alone, fed onnxruntime's own sequence: bit-equal."""
    _needs_mlas_fma3()
    quant = _quantized_by_onnxruntime(apps.crnn_ocr_like(width=64, hidden=32), tmp_path)
    lstm = next(n for n in quant.graph.node if n.op_type == "DynamicQuantizeLSTM")
    exposed = onnx.ModelProto()
    exposed.CopyFrom(quant)
    exposed.graph.output.append(onnx.ValueInfoProto(name=lstm.input[0]))
    seq = _ort(exposed).run([lstm.input[0]], apps.crnn_ocr_feeds(64, seed=0))[0]
    inits = {i.name: i for i in quant.graph.initializer}
    graph = helper.make_graph(
        [lstm],
        "lstm",
        [helper.make_tensor_value_info(lstm.input[0], TensorProto.FLOAT, list(seq.shape))],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in lstm.output if o],
        [inits[i] for i in lstm.input[1:] if i in inits],
    )
    single = helper.make_model(graph, opset_imports=list(quant.opset_import))
    want, got = _run_both(single, {lstm.input[0]: seq})
    for name in want:
        assert _bits(got[name]) == _bits(want[name]), name


# ------------------------------------------------------------------------- weight codes
@pytest.mark.parametrize("make", [_lstm, _gru], ids=["lstm", "gru"])
def test_turnout_quantize_dynamic_gives_onnxruntimes_weight_codes(make: Any, tmp_path: Any) -> None:
    """Both tools quantize the MatMul weights alike (int8, symmetric, per tensor): the same
    codes, scales and zero points. turnout's tool leaves the LSTM/GRU float; onnxruntime's
    int8 codes of the LSTM's W and R (one scale per direction, symmetric) are what turnout's
    weight rule gives for them."""
    model, _ = make()
    theirs = _quantized_by_onnxruntime(model, tmp_path)
    ours = turnout_quantize_dynamic(model, None)
    t_init = {i.name: numpy_helper.to_array(i) for i in theirs.graph.initializer}
    o_init = {i.name: numpy_helper.to_array(i) for i in ours.graph.initializer}
    recurrent = [n.op_type for n in ours.graph.node if n.op_type in ("LSTM", "GRU")]
    assert recurrent, "turnout's quantize_dynamic keeps recurrent ops float"
    shared = [k for k in t_init if k.endswith("_quantized") and k in o_init]
    assert shared
    for k in shared:
        assert _bits(o_init[k]) == _bits(t_init[k]), k
        assert t_init[k].dtype == o_init[k].dtype == np.int8
    if "W_quantized" in t_init:  # the LSTM onnxruntime quantized: [dirs, input, 4 * hidden]
        floats = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
        for w in ("W", "R"):
            for d in range(floats[w].shape[0]):
                q, params = quantize_weight(floats[w][d], QuantType.QInt8, symmetric=True)
                assert _bits(q.T) == _bits(np.ascontiguousarray(t_init[f"{w}_quantized"][d]))
                assert _bits(params.scale) == _bits(t_init[f"{w}_scale"][d])
