"""Dispatch cost: per-node time on a chain of tiny ops, turnout vs onnxruntime, same run.

    python benchmarks/dispatch.py [--nodes 200] [--repeat 2000]

Per-node cost = (median run time of the N-node chain - median of a 1-node model) / (N - 1),
so feed checking and output handling are not counted as dispatch. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper


def chain_model(n: int) -> onnx.ModelProto:
    """n tiny elementwise ops on a 4-element tensor (Relu, Neg, Abs, Add-with-constant)."""
    nodes = []
    prev = "x"
    one = onnx.numpy_helper.from_array(np.ones(4, np.float32), "one")
    for i in range(n):
        kind = i % 4
        out = f"t{i}"
        if kind == 3:
            nodes.append(helper.make_node("Add", [prev, "one"], [out]))
        else:
            nodes.append(helper.make_node(("Relu", "Neg", "Abs")[kind], [prev], [out]))
        prev = out
    g = helper.make_graph(
        nodes,
        f"chain{n}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [4])],
        [one],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def median_time(fn: Callable[[], Any], repeat: int) -> float:
    for _ in range(min(50, repeat)):
        fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter_ns()
        fn()
        times.append(time.perf_counter_ns() - t)
    return statistics.median(times) / 1e9


def per_node(make_session: Callable[[bytes], Any], n: int, repeat: int) -> float:
    x = {"x": np.ones(4, np.float32)}
    big = make_session(chain_model(n).SerializeToString())
    small = make_session(chain_model(1).SerializeToString())
    t_big = median_time(lambda: big.run(None, x), repeat)
    t_small = median_time(lambda: small.run(None, x), repeat)
    return (t_big - t_small) / (n - 1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=2000)
    args = ap.parse_args()
    import turnout

    rows = [
        ("turnout (CPU)", per_node(lambda b: turnout.InferenceSession(b), args.nodes, args.repeat))
    ]
    try:
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        rows.append(
            (
                "onnxruntime (CPU, 1 thread)",
                per_node(
                    lambda b: ort.InferenceSession(b, so, providers=["CPUExecutionProvider"]),
                    args.nodes,
                    args.repeat,
                ),
            )
        )
    except ImportError:
        rows.append(("onnxruntime", float("nan")))
    base = rows[-1][1]
    print(f"| runtime | per-node cost ({args.nodes}-node chain) | ratio to onnxruntime |")
    print("| --- | --- | --- |")
    for name, t in rows:
        print(f"| {name} | {t * 1e6:.3f} µs | {t / base:.2f} |")


if __name__ == "__main__":
    main()
