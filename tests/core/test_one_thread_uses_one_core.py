"""`intra_op_num_threads=1` means one core with the README's install: BLAS's products included.

numpy's OpenBLAS starts a thread per core. Before threadpoolctl was a dependency of turnout and
turnout-numba, `pip install './core[numba]' ./providers/numba-cpu` left it out, BLAS kept its
threads, and ResNet-50 at one thread used 187 ms of CPU per 94 ms run: servers that run one
single-threaded session per core oversubscribed the machine. Measured in a fresh process, with
BLAS's thread variables removed from its environment, as a user's process has none: the CPU
time of the runs against their wall time (a ratio, not a time).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib import metadata

import pytest

CHILD = r"""
import json, sys, time
import numpy as np
from onnx import TensorProto, helper, numpy_helper
import turnout

host = sys.argv[1] == "host"
rng = np.random.default_rng(0)
n = 640  # 262 M multiply-adds per product: BLAS splits it over all its threads
weights = [numpy_helper.from_array(rng.standard_normal((n, n)).astype(np.float32) / 20, f"w{i}")
           for i in range(4)]
nodes = [helper.make_node("MatMul", ["x" if i == 0 else f"h{i}", f"w{i}"],
                          [f"h{i + 1}" if i < 3 else "y"]) for i in range(4)]
graph = helper.make_graph(nodes, "products",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, n])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, n])], weights)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
so = turnout.SessionOptions()
so.intra_op_num_threads = 1
so.add_session_config_entry("session.turnout.cpu_numpy_only", "0" if host else "1")
so.add_session_config_entry("session.turnout.wait_for_compiled_tier", "1")
sess = turnout.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
x = rng.standard_normal((n, n)).astype(np.float32)
for _ in range(3):
    sess.run(None, {"x": x})
cpu0, wall0 = time.process_time(), time.perf_counter()
for _ in range(20):
    sess.run(None, {"x": x})
cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
print(json.dumps({"cpu_per_wall": cpu / wall}))
"""


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def test_the_install_brings_what_finds_blas() -> None:
    """turnout and turnout-numba require threadpoolctl (not an extra)."""
    for dist in ("turnout", "turnout-numba"):
        try:
            reqs = metadata.requires(dist) or []
        except metadata.PackageNotFoundError:
            if dist == "turnout":
                raise
            continue
        plain = [re.split(r"[^\w.-]", r, maxsplit=1)[0] for r in reqs if "extra ==" not in r]
        assert "threadpoolctl" in plain, f"{dist} requires {plain}"


@pytest.mark.parametrize("path", ["numpy", "host"])
def test_a_one_thread_session_runs_its_products_on_one_core(path: str) -> None:
    if _cores() < 2:
        pytest.skip("one core: a second BLAS thread could not show in the CPU time")
    env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    env.pop("TURNOUT_CPU_NUMPY_ONLY", None)
    out = subprocess.run(
        [sys.executable, "-c", CHILD, path],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    ratio = json.loads(out.stdout.strip().splitlines()[-1])["cpu_per_wall"]
    assert ratio <= 1.1, f"{path} path: {ratio:.2f} s of CPU per second of runs at one thread"
