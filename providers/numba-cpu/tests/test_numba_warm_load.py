"""A warm process loads its kernels from the disk cache without numba's context refresh (the
import of every lowering and typing registry, ~200 ms a process); a kernel that is not cached
still compiles afterwards, and the loaded kernels give the right results, serial and parallel."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

_SCRIPT = """
import os, sys
import numpy as np, turnout
from onnx import helper, TensorProto as T
from turnout_numba import cache

def model(op, elem):
    n = [helper.make_node("Add", ["x", "x"], ["s"]), helper.make_node(op, ["s"], ["y"])]
    g = helper.make_graph(n, "g", [helper.make_tensor_value_info("x", elem, [64, 300])],
                          [helper.make_tensor_value_info("y", elem, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]).SerializeToString()

so = turnout.SessionOptions()
so.intra_op_num_threads = int(os.environ["THREADS"])
x = np.linspace(-1, 1, 64 * 300, dtype=np.float32).reshape(64, 300)
s = turnout.InferenceSession(model("Softmax", T.FLOAT), so, providers=["CPUExecutionProvider"])
y = s.run(None, {"x": x})[0]
e = np.exp(2 * x - (2 * x).max(axis=-1, keepdims=True))
assert np.allclose(y, e / e.sum(axis=-1, keepdims=True), atol=1e-6), y
if os.environ.get("WARM"):
    assert cache.compile_count() == 0, cache.compile_count()
    assert "numba.np.arraymath" not in sys.modules, "numba's registries were loaded"
    # not cached: compiles (the compiler refreshes numba's context itself)
    s2 = turnout.InferenceSession(model("Relu", T.DOUBLE), so, providers=["CPUExecutionProvider"])
    y2 = s2.run(None, {"x": x.astype(np.float64)})[0]
    assert np.array_equal(y2, np.maximum(2 * x.astype(np.float64), 0)), y2
    assert cache.compile_count() > 0
"""


def _run(cache: Path, threads: int, **extra: str) -> None:
    # the compiled tier at creation: the script counts what its sessions compiled
    wait = {"TURNOUT_WAIT_FOR_COMPILED_TIER": "1"}
    env = {**os.environ, "TURNOUT_CACHE_DIR": str(cache), "THREADS": str(threads), **wait, **extra}
    subprocess.run([sys.executable, "-c", _SCRIPT], env=env, check=True)


@pytest.mark.cpu_means_host
@pytest.mark.parametrize("threads", [1, 2])
def test_a_warm_process_loads_kernels_without_numba_registries(
    tmp_path: Path, threads: int
) -> None:
    _run(tmp_path, threads)
    _run(tmp_path, threads, WARM="1")


_KERNEL = """
def add_one(x, y):
    for i in range(x.shape[0]):
        y[i] = x[i] + 1
"""


def test_array_conversions_are_registered_at_creation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writable or strided array passed where a signature takes a read-only or 'A' array
    converts without numba typing the arguments in Python on the first call."""
    import numpy as np
    from numba import types

    from turnout_numba import cache

    (tmp_path / "warm_load_kernel.py").write_text(_KERNEL)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("TURNOUT_CACHE_DIR", str(tmp_path / "cache"))
    from warm_load_kernel import add_one

    sig = types.void(
        types.Array(types.float32, 1, "A", readonly=True), types.Array(types.float32, 1, "C")
    )
    disp = cache.jit(add_one, [sig])

    def refuse(*args: object) -> bool:
        raise AssertionError("numba searched conversions at call time")

    monkeypatch.setattr(disp, "_search_new_conversions", refuse)
    x = np.arange(6, dtype=np.float32)
    y = np.zeros(3, np.float32)
    disp(x[:3], y)  # writable, C-contiguous
    np.testing.assert_array_equal(y, [1, 2, 3])
    disp(x[::2], y)  # strided
    np.testing.assert_array_equal(y, [1, 3, 5])
    x.flags.writeable = False
    disp(x[1:4], y)  # read-only, as compiled
    np.testing.assert_array_equal(y, [2, 3, 4])
    with pytest.raises(AssertionError, match="searched"):  # not registered: another dtype
        disp(x[:3].astype(np.float64), y)


_TWO_KERNELS = """
def add_three(x, y):
    for i in range(x.shape[0]):
        y[i] = x[i] + 3


def add_four(x, y):
    for i in range(x.shape[0]):
        y[i] = x[i] + 4
"""


def test_a_note_naming_a_module_without_the_kernel_is_made_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A note written from a stale source (its file edited after import) names a module that
    lacks the kernel: the module is made again; a source that is not the kernel's definition
    fails naming the file, and leaves no note."""
    import inspect

    from turnout.graph.errors import EPFail
    from turnout_numba import cache

    (tmp_path / "warm_load_two.py").write_text(_TWO_KERNELS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("TURNOUT_CACHE_DIR", str(tmp_path / "cache"))
    from warm_load_two import add_four, add_three

    one = cache._variant_module(add_three, False)
    two = cache._variant_module(add_four, False)
    notes = sorted((cache.cache_dir() / "src").glob("note_*"))
    assert len(notes) == 2
    for note in notes:  # both notes name add_four's module
        note.write_text(two.__name__)
    assert cache._variant_module(add_three, False).add_three.__code__.co_code == (
        one.add_three.__code__.co_code
    )
    for note in notes:
        note.unlink()
    monkeypatch.setattr(inspect, "getsource", lambda obj: "x = 1\n")  # not a definition
    with pytest.raises(EPFail, match=r"warm_load_two\.py changed since it was imported"):
        cache._variant_module(add_four, True)
    assert not list((cache.cache_dir() / "src").glob("note_*"))
