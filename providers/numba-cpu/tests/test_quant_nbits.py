"""numba com.microsoft::MatMulNBits (4 bits, B kept packed): against onnxruntime (accuracy_level
0, float products) and turnout's numpy kernel on generated weights, with and without zero
points (packed and float), several block sizes, M = 1, 7, 64 and batch dims on A; what the node
keeps holds no float copy of B; what numba declines runs on the numpy kernel, saying why."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from turnout.tools.testing import cpu_session, provider_session

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle for MatMulNBits")


def _weight(
    rng: np.random.Generator, n: int, k: int, block: int, zp: str
) -> dict[str, np.ndarray | None]:
    """Random 4-bit codes packed as onnxruntime's quantizer writes them, scales, zero points."""
    blocks = -(-k // block)
    codes = rng.integers(0, 16, (n, blocks, block), dtype=np.uint8)
    b = (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)
    scales = rng.uniform(0.001, 0.02, (n * blocks,)).astype(np.float32)
    z: np.ndarray | None = None
    if zp == "packed":
        zc = rng.integers(0, 16, (n, blocks + blocks % 2), dtype=np.uint8)
        z = (zc[:, 0::2] | (zc[:, 1::2] << 4)).astype(np.uint8).reshape(-1)
    elif zp == "float":
        z = rng.uniform(0, 15, (n * blocks,)).astype(np.float32)
    return {"B": b, "scales": scales, "zp": z}


def _model(
    a_shape: tuple[int, ...], n: int, k: int, block: int, w: dict[str, Any], bias: Any = None,
    **attrs: Any,
) -> onnx.ModelProto:  # fmt: skip
    inits = {"B": w["B"], "scales": w["scales"], "zp": w["zp"], "g": None, "bias": bias}
    names = [n_ if v is not None else "" for n_, v in inits.items()]
    while names and not names[-1]:
        names.pop()
    node = helper.make_node(
        "MatMulNBits", ["A", *names], ["Y"], domain="com.microsoft", name="my_nbits",
        K=k, N=n, bits=attrs.pop("bits", 4), block_size=block, **attrs,
    )  # fmt: skip
    g = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("A", onnx.TensorProto.FLOAT, list(a_shape))],
        [helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, n_) for n_, v in inits.items() if v is not None],
    )  # fmt: skip
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(g, opset_imports=opsets)


def _numpy_session(model: onnx.ModelProto) -> Any:
    """turnout's numpy CPU kernels, checked to place nothing on numba."""
    sess = cpu_session(model)
    assert {x.provider for x in sess.partition_report().assignments} == {"CPUExecutionProvider"}
    return sess


def _runs(model: onnx.ModelProto, a: np.ndarray, threads: int = 1) -> dict[str, np.ndarray]:
    sess: Any = provider_session(model, "NumbaExecutionProvider", intra_op_num_threads=threads)
    assert [x.source for x in sess.partition_report().assignments] == ["numba"]
    oracle = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return {
        "numba": np.asarray(sess.run(None, {"A": a})[0]),
        "numpy": np.asarray(_numpy_session(model).run(None, {"A": a})[0]),
        "ort": np.asarray(oracle.run(None, {"A": a})[0]),
    }


def _close(got: np.ndarray, want: np.ndarray, k: int) -> None:
    """Within float32 rounding of a K-term sum: a few ulps of the sum of |terms|' scale."""
    assert got.shape == want.shape and got.dtype == np.float32
    tol = 4e-6 * np.sqrt(k) * max(float(np.abs(want).max()), 1.0)
    np.testing.assert_allclose(got, want, rtol=0, atol=tol)


CASES = [  # (A shape, N, K, block, zero points)
    ((1, 256), 64, 256, 32, "none"),
    ((7, 512), 96, 512, 16, "packed"),
    ((64, 384), 40, 384, 128, "float"),
    ((2, 3, 256), 33, 256, 256, "packed"),
    ((1, 7, 320), 48, 320, 64, "none"),
    ((5, 96), 17, 80, 32, "packed"),  # K not a multiple of the block; 3 blocks (odd)
    ((64, 1024), 128, 1024, 32, "packed"),
]


@pytest.mark.parametrize(
    "case", CASES, ids=[f"{c[0]}-n{c[1]}-k{c[2]}-b{c[3]}-{c[4]}" for c in CASES]
)
def test_matches_onnxruntime_and_numpy(case: Any) -> None:
    a_shape, n, k, block, zp = case
    rng = np.random.default_rng(k * 7 + n)
    w = _weight(rng, n, k, block, zp)
    a = rng.standard_normal((*a_shape[:-1], k)).astype(np.float32)
    got = _runs(_model(a.shape, n, k, block, w), a)
    assert got["numba"].shape == (*a_shape[:-1], n)
    _close(got["numba"], got["ort"], k)
    _close(got["numba"], got["numpy"], k)


@pytest.mark.parametrize("m", [3, 16, 40])  # each of the kernel's three paths
def test_bias_and_threads(m: int) -> None:
    rng = np.random.default_rng(3)
    n, k, block = 200, 512, 64
    w = _weight(rng, n, k, block, "packed")
    bias = rng.standard_normal(n).astype(np.float32)
    a = rng.standard_normal((m, k)).astype(np.float32)
    got = _runs(_model(a.shape, n, k, block, w, bias), a, threads=2)
    _close(got["numba"], got["ort"], k)


def test_keeps_no_float_copy_of_b() -> None:
    """What the node keeps is smaller than a [K, N] float32 matrix, array by array."""
    from turnout_numba.kernels.quant_nbits import NBitsWeight

    for block in (16, 32, 256):
        n, k = 512, 1024
        w = _weight(np.random.default_rng(block), n, k, block, "packed")
        kept = NBitsWeight("x", n, k, block, w["B"], w["scales"], w["zp"]).arrays()
        assert all(arr.nbytes < k * n * 4 for arr in kept)
        assert sum(arr.nbytes for arr in kept) <= k * n  # at most 8 bits a weight (block 16)


@pytest.mark.parametrize(
    ("attrs", "why"),
    [({"bits": 8}, "bits=8"), ({"block": 512}, "block_size=512"), ({"g_idx": True}, "g_idx")],
)
def test_declined_runs_on_numpy(
    attrs: dict[str, Any], why: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim check names what numba does not compile; the numpy kernel then runs it."""
    import dataclasses

    from turnout_numba.registry import TABLE

    reasons: list[str | None] = []
    key = ("com.microsoft", "MatMulNBits")
    (registered,) = TABLE._defs[key]  # the table's own entry, spied on below
    supports = registered.supports
    assert supports is not None

    def spy(kn: Any, ctx: Any) -> str | None:
        reasons.append(supports(kn, ctx))
        return reasons[-1]

    spied = dataclasses.replace(registered, supports=spy)
    monkeypatch.setitem(TABLE._defs, key, [spied])
    rng = np.random.default_rng(0)
    n, k = 16, 1024
    block = attrs.pop("block", 32)
    bits = attrs.pop("bits", 4)
    blocks = k // block
    w = _weight(rng, n, k, block, "none")
    if bits == 8:
        w["B"] = rng.integers(0, 256, (n, blocks, block), dtype=np.uint8)
    model = _model((2, k), n, k, block, w, bits=bits)
    if attrs.get("g_idx"):
        g_idx = numpy_helper.from_array((np.arange(k) // block).astype(np.int32), "g")
        model.graph.initializer.append(g_idx)
        node = model.graph.node[0]
        node.input[:] = ["A", "B", "scales", "", "g"]
    sess: Any = provider_session(model, "NumbaExecutionProvider")
    (assignment,) = sess.partition_report().assignments
    assert assignment.source == "numpy"
    assert reasons and why in str(reasons[-1])
    a = rng.standard_normal((2, k)).astype(np.float32)
    oracle = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    _close(np.asarray(sess.run(None, {"A": a})[0]), oracle.run(None, {"A": a})[0], k)
