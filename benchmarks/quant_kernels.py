"""The numba provider's 8-bit kernels beside onnxruntime, one node at a time.

    python -m benchmarks.quant_kernels [--only matmul,conv] [--threads 1] [--json FILE]

Shapes of real quantized models: MatMulInteger and QLinearMatMul with M in {1, 8, 64, 128}
and (K, N) from BERT-base's layers (uint8 activations, int8 weights, constant), QLinearConv of
ResNet layers (3x3 and 1x1 at 56x56 and 28x28, 64-256 channels, per-channel int8 weights,
int32 bias). Each row is one single-node model run on onnxruntime and on a turnout session
with the numba provider, interleaved (one run of each, repeated), and gives both medians, their
ratio (turnout / onnxruntime: below 1 is faster) and whether the outputs are bit-equal.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MATMUL_M = (1, 8, 64, 128)
MATMUL_KN = ((256, 256), (768, 768), (768, 3072), (3072, 768))
CONVS = (  # (C in, C out, H = W, kernel, stride)
    (64, 64, 56, 3, 1),
    (64, 64, 56, 1, 1),
    (64, 256, 56, 1, 1),
    (256, 64, 56, 1, 1),
    (128, 128, 28, 3, 1),
    (128, 128, 56, 3, 2),
    (256, 256, 28, 1, 1),
)


def _ints(rng: np.random.Generator, dt: Any, shape: Any) -> np.ndarray:
    info = np.iinfo(dt)
    return np.asarray(rng.integers(info.min, info.max, shape, endpoint=True), dtype=dt)


def _model(
    node: onnx.NodeProto, x: str, x_shape: list[int], out: int, inits: dict[str, Any]
) -> Any:
    g = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(x, TensorProto.UINT8, x_shape)],
        [helper.make_tensor_value_info(node.output[0], out, None)],
        [numpy_helper.from_array(np.asarray(v), n) for n, v in inits.items()],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def matmul_case(op: str, m: int, k: int, n: int, rng: np.random.Generator) -> tuple[Any, Any]:
    b = _ints(rng, np.int8, (k, n))
    if op == "MatMulInteger":
        inits: dict[str, Any] = {"b": b, "az": np.uint8(128), "bz": np.int8(0)}
        node = helper.make_node(op, ["a", "b", "az", "bz"], ["y"])
        out = TensorProto.INT32
    else:
        inits = {
            "as": np.float32(0.02), "az": np.uint8(128), "b": b, "bs": np.float32(0.003),
            "bz": np.int8(0), "ys": np.float32(0.05 * np.sqrt(k)), "yz": np.uint8(120),
        }  # fmt: skip
        node = helper.make_node(op, ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])
        out = TensorProto.UINT8
    return _model(node, "a", [m, k], out, inits), {"a": _ints(rng, np.uint8, (m, k))}


def conv_case(c: int, m: int, hw: int, k: int, s: int, rng: np.random.Generator) -> tuple[Any, Any]:
    inits = {
        "xs": np.float32(0.02), "xz": np.uint8(128), "w": _ints(rng, np.int8, (m, c, k, k)),
        "ws": rng.uniform(0.001, 0.003, m).astype(np.float32), "wz": np.zeros(m, np.int8),
        "ys": np.float32(0.05 * np.sqrt(c * k * k)), "yz": np.uint8(120),
        "B": rng.integers(-999, 999, m).astype(np.int32),
    }  # fmt: skip
    node = helper.make_node("QLinearConv", ["x", *inits], ["y"], pads=[k // 2] * 4, strides=[s, s])
    x = _ints(rng, np.uint8, (1, c, hw, hw))
    return _model(node, "x", [1, c, hw, hw], TensorProto.UINT8, inits), {"x": x}


def measure(
    model: Any, feeds: dict[str, Any], threads: int, seconds: float = 0.4
) -> dict[str, Any]:
    """Interleaved medians (us) of onnxruntime and turnout-numba, and bit-equality."""
    import onnxruntime as ort

    from turnout.tools.testing import provider_session

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    o = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    t = provider_session(model, "NumbaExecutionProvider", intra_op_num_threads=threads)
    equal = bool(np.array_equal(o.run(None, feeds)[0], t.run(None, feeds)[0]))
    t0 = time.perf_counter()
    o.run(None, feeds)
    reps = max(5, min(200, int(seconds / max(time.perf_counter() - t0, 1e-6))))
    times: dict[str, list[float]] = {"ort": [], "numba": []}
    for _ in range(reps):
        a = time.perf_counter()
        o.run(None, feeds)
        b = time.perf_counter()
        t.run(None, feeds)
        times["ort"].append(b - a)
        times["numba"].append(time.perf_counter() - b)
    ort_us, numba_us = (float(np.median(v)) * 1e6 for v in times.values())
    return {"ort_us": ort_us, "numba_us": numba_us, "ratio": numba_us / ort_us, "equal": equal}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="matmul,conv", help="matmul, conv (comma-separated)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", default="", help="write the rows as JSON")
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    cases: list[tuple[str, Any]] = []
    if "matmul" in args.only:
        for op in ("MatMulInteger", "QLinearMatMul"):
            for m in MATMUL_M:
                for k, n in MATMUL_KN:
                    cases.append((f"{op} M{m} K{k} N{n}", matmul_case(op, m, k, n, rng)))
    if "conv" in args.only:
        for c, m, hw, k, s in CONVS:
            cases.append(
                (f"QLinearConv {c}->{m} {hw}x{hw} k{k} s{s}", conv_case(c, m, hw, k, s, rng))
            )
    rows = []
    for name, (model, feeds) in cases:
        r = {"case": name, **measure(model, feeds, args.threads)}
        rows.append(r)
        print(
            f"{name:36s} ort {r['ort_us']:9.1f} us  numba {r['numba_us']:9.1f} us  "
            f"x{r['ratio']:5.2f}  {'bit-equal' if r['equal'] else 'DIFFERS'}",
            flush=True,
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
