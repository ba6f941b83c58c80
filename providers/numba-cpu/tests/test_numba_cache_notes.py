"""A warm process finds each kernel's generated module through a note in the cache and reads
no kernel source (tokenizing one costs about 10 ms); a mangled note or module is made again."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

_SCRIPT = """
import inspect, os, sys
import numpy as np, turnout
from onnx import helper, TensorProto as T
if os.environ.get("NO_SOURCE"):
    def refuse(obj):
        raise AssertionError(f"source read for {obj}")
    inspect.getsource = refuse
n = [helper.make_node("Add", ["x", "x"], ["s"]), helper.make_node("Softmax", ["s"], ["y"])]
g = helper.make_graph(n, "g", [helper.make_tensor_value_info("x", T.FLOAT, [2, 3])],
                      [helper.make_tensor_value_info("y", T.FLOAT, None)])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
s = turnout.InferenceSession(m.SerializeToString(), providers=["numba"])
y = s.run(None, {"x": np.ones((2, 3), np.float32)})[0]
assert np.allclose(y, 1 / 3), y
"""


def _run(cache: Path, **extra: str) -> None:
    env = {**os.environ, "TURNOUT_CACHE_DIR": str(cache), **extra}
    subprocess.run([sys.executable, "-c", _SCRIPT], env=env, check=True)


def test_a_warm_process_reads_no_kernel_source(tmp_path: Path) -> None:
    _run(tmp_path)
    notes = list(tmp_path.rglob("note_*"))
    assert notes, "the first process leaves a note per kernel"
    _run(tmp_path, NO_SOURCE="1")


def test_a_mangled_note_or_module_is_made_again(tmp_path: Path) -> None:
    _run(tmp_path)
    for i, note in enumerate(sorted(tmp_path.rglob("note_*"))):
        if i % 2:
            note.write_text("turnout_numba_gen_k_missing")
        else:
            (note.parent / f"{note.read_text().strip()}.py").write_text("garbage = (")
    _run(tmp_path)
    _run(tmp_path, NO_SOURCE="1")
