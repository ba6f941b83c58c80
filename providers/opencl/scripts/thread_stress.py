"""Many threads running ONE OpenCL session: every output must equal the single-thread result.

    python providers/opencl/scripts/thread_stress.py --threads 8 --runs 1000
    python providers/opencl/scripts/thread_stress.py --runs 200 --switch-interval 1e-5

Prints runs, mismatches, errors and wall time as one JSON line; exits 1 on any mismatch or
error. A crash (segfault, abort) in the device runtime ends the process with that signal, so
a caller running this in a subprocess sees it as a failure rather than losing its own process.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto
from onnx import helper as h

from turnout.testing import provider_session

EP = "OpenCLExecutionProvider"


def chain_model(width: int = 32) -> onnx.ModelProto:
    """MatMul -> Add -> Relu -> MatMul -> Softmax: kernels of several families, temporaries
    from the buffer pool, and an elementwise group the provider fuses."""
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((width, width)).astype(np.float32)
    b1 = rng.standard_normal(width).astype(np.float32)
    w2 = rng.standard_normal((width, width)).astype(np.float32)
    nodes = [
        h.make_node("MatMul", ["x", "w1"], ["m1"]),
        h.make_node("Add", ["m1", "b1"], ["a1"]),
        h.make_node("Relu", ["a1"], ["r1"]),
        h.make_node("MatMul", ["r1", "w2"], ["m2"]),
        h.make_node("Softmax", ["m2"], ["y"], axis=-1),
    ]
    g = h.make_graph(
        nodes,
        "chain",
        [h.make_tensor_value_info("x", TensorProto.FLOAT, ["n", width])],
        [h.make_tensor_value_info("y", TensorProto.FLOAT, ["n", width])],
        [
            onnx.numpy_helper.from_array(w1, "w1"),
            onnx.numpy_helper.from_array(b1, "b1"),
            onnx.numpy_helper.from_array(w2, "w2"),
        ],
    )
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    m.ir_version = 9
    return m


def stress(threads: int, runs: int, width: int = 32) -> dict[str, Any]:
    """Run `threads` x `runs` on one session; count outputs differing from a 1-thread run."""
    sess = provider_session(chain_model(width), EP)
    rng = np.random.default_rng(1)
    # a distinct input per thread (and rows that vary in number) so a mixed-up run shows
    feeds = [
        rng.standard_normal((1 + t % 4, width)).astype(np.float32) * (t + 1) for t in range(threads)
    ]
    expected = [sess.run(None, {"x": x})[0] for x in feeds]
    mismatches = [0] * threads
    errors: list[str] = []
    start = threading.Barrier(threads)

    def work(t: int) -> None:
        start.wait()
        for _ in range(runs):
            try:
                (y,) = sess.run(None, {"x": feeds[t]})
            except Exception as e:  # counted, not raised: one bad run must not hide the rest
                errors.append(f"{type(e).__name__}: {e}")
                continue
            if y.shape != expected[t].shape or not np.array_equal(y, expected[t], equal_nan=True):
                mismatches[t] += 1

    pool = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    t0 = time.perf_counter()
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    wall = time.perf_counter() - t0
    return {
        "threads": threads,
        "runs_per_thread": runs,
        "runs": threads * runs,
        "mismatches": sum(mismatches),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "wall_s": round(wall, 2),
        "runs_per_s": round(threads * runs / wall, 1),
        "providers": sess.get_providers(),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--width", type=int, default=32)
    ap.add_argument(
        "--switch-interval",
        type=float,
        default=None,
        help="sys.setswitchinterval: a small value (1e-5) switches threads often, which "
        "turns a rare race into a frequent one",
    )
    args = ap.parse_args(argv)
    if args.switch_interval is not None:
        sys.setswitchinterval(args.switch_interval)
    res = stress(args.threads, args.runs, args.width)
    print(json.dumps(res))
    return 1 if res["mismatches"] or res["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
