"""Node counts and latency per optimization level for the BERT-like encoder and light_resnet50.

    python benchmarks/optimizer_levels.py [--runs N]

Latency is the median of N runs after one warm-up, measured on this machine (not asserted).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
from onnx.backend.test.loader import DATA_DIR

from turnout.api.options import GraphOptimizationLevel, SessionOptions
from turnout.api.session import InferenceSession
from turnout_testbed import zoo

LEVELS = {
    "disable": GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": GraphOptimizationLevel.ORT_ENABLE_ALL,
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    models: dict[str, tuple[bytes | str, dict[str, np.ndarray]]] = {
        "bert_like(4 layers, seq 128)": (
            zoo.bert_like().SerializeToString(),
            {
                "x": rng.standard_normal((1, 128, 768)).astype(np.float32),
                "attention_mask": np.ones((1, 128), np.int64),
            },
        ),
        "light_resnet50": (
            os.path.join(DATA_DIR, "light", "light_resnet50.onnx"),
            {"gpu_0/data_0": np.zeros((1, 3, 224, 224), np.float32)},
        ),
    }
    print(f"{'model':30s} {'level':9s} {'nodes':>11s} {'median ms':>10s} {'speedup':>8s}")
    for name, (src, feeds) in models.items():
        base = None
        for level, value in LEVELS.items():
            opts = SessionOptions()
            opts.graph_optimization_level = value
            sess = InferenceSession(src, opts, providers=["CPUExecutionProvider"])
            rep = sess.optimization_report()
            sess.run(None, feeds)
            times = []
            for _ in range(args.runs):
                t = time.perf_counter()
                sess.run(None, feeds)
                times.append(time.perf_counter() - t)
            ms = statistics.median(times) * 1e3
            base = base or ms
            nodes = f"{rep.nodes_before}->{rep.nodes_after}"
            print(f"{name:30s} {level:9s} {nodes:>11s} {ms:10.2f} {base / ms:7.2f}x", flush=True)


if __name__ == "__main__":
    main()
