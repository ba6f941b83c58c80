"""numba's compiled blobs in a compiled model: a fresh process with an empty cache loads the
model and compiles nothing; a model compiled with other options is refused as stale."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

_COMPILE = """
import sys, turnout
from turnout.api.compiler import ModelCompiler
opts = turnout.SessionOptions()
opts.add_provider("numba", {})
ModelCompiler(opts, sys.argv[1]).compile_to_file(sys.argv[2])
"""

_LOAD = """
import json, sys, numpy as np, turnout
import turnout_numba.cache as cache
providers = [("numba", json.loads(sys.argv[2]))]
try:
    sess = turnout.InferenceSession(sys.argv[1], providers=providers)
except turnout.Fail as e:
    print(json.dumps({"fail": str(e)}))
    raise SystemExit(0)
x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
y = sess.run(None, {"x": x})[0]
print(json.dumps({"compiles": cache.compile_count(), "y": y.tolist()}))
"""


def _model(path: Path) -> None:
    nodes = [
        helper.make_node("Mul", ["x", "x"], ["sq"], name="square"),
        helper.make_node("Add", ["sq", "x"], ["s"], name="add"),
        helper.make_node("Sigmoid", ["s"], ["y"], name="sigmoid"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def _python(code: str, cache: Path, *args: str) -> dict[str, object]:
    env = {**os.environ, "TURNOUT_CACHE_DIR": str(cache)}
    env.pop("TURNOUT_CPU_NUMPY_ONLY", None)
    out = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-2000:]
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    return json.loads(lines[-1]) if lines else {}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("artifacts")
    _model(root / "m.onnx")
    _python(_COMPILE, root / "cache-compile", str(root / "m.onnx"), str(root / "m_ctx.onnx"))
    return root


def test_loading_compiles_nothing_in_an_empty_cache(compiled: Path) -> None:
    got = _python(_LOAD, compiled / "cache-fresh", str(compiled / "m_ctx.onnx"), "{}")
    assert got["compiles"] == 0
    x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    want = 1 / (1 + np.exp(-(x * x + x)))
    np.testing.assert_allclose(np.asarray(got["y"], np.float32), want, rtol=1e-5)


def test_the_plain_model_compiles_in_an_empty_cache(compiled: Path) -> None:
    """The check above can fail: without the compiled data the same process compiles."""
    got = _python(_LOAD, compiled / "cache-plain", str(compiled / "m.onnx"), "{}")
    assert isinstance(got["compiles"], int) and got["compiles"] > 0


def test_other_options_make_the_artifact_stale(compiled: Path) -> None:
    got = _python(_LOAD, compiled / "cache-stale", str(compiled / "m_ctx.onnx"), '{"fuse": 0}')
    assert "stale" in str(got["fail"]) and "fuse=False" in str(got["fail"])


_COMPILE_FOR_CPU = """
import sys, turnout
from turnout.api.compiler import ModelCompiler
ModelCompiler(turnout.SessionOptions(), sys.argv[1]).compile_to_file(sys.argv[2])
"""

_LOAD_FOR_CPU = """
import json, sys, numpy as np, turnout
import turnout_numba.cache as cache
sess = turnout.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
tier = sess.partition_report().tier
x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
sess.run(None, {"x": x})
hosts = sorted({a.provider for a in sess.partition_report().assignments})
print(json.dumps({"compiles": cache.compile_count(), "tier": tier.to_dict(), "hosts": hosts}))
"""


@pytest.mark.cpu_means_host
def test_a_compiled_model_starts_on_the_compiled_tier(tmp_path: Path) -> None:
    """Tiered kernels (turnout.engine.tiers) do not apply to a compiled model: the host's
    kernels load from it at creation, nothing compiles, and the first run is theirs."""
    _model(tmp_path / "m.onnx")
    _python(_COMPILE_FOR_CPU, tmp_path / "c1", str(tmp_path / "m.onnx"), str(tmp_path / "c.onnx"))
    got = _python(_LOAD_FOR_CPU, tmp_path / "c2", str(tmp_path / "c.onnx"))
    assert got["compiles"] == 0
    assert got["hosts"] == ["NumbaExecutionProvider"]
    tier = got["tier"]
    assert isinstance(tier, dict)
    assert (tier["tier"], tier["since_run"], tier["building"]) == ("compiled", 0, False)


_COMPILE_EACH = """
import sys, turnout
from turnout.api.compiler import ModelCompiler
for src in sys.argv[1:]:
    opts = turnout.SessionOptions()
    opts.add_provider("numba", {})
    ModelCompiler(opts, src).compile_to_file(src.replace(".onnx", "_ctx.onnx"))
"""

_LOAD_POOLED = """
import json, sys, numpy as np, turnout
import turnout_numba.cache as cache
sess = turnout.InferenceSession(sys.argv[1], providers=[("numba", {})])
x = np.linspace(-2, 2, 72, dtype=np.float32).reshape(1, 2, 6, 6)
y = sess.run(None, {"x": x})[0]
print(json.dumps({"compiles": cache.compile_count(), "y": y.tolist()}))
"""


def _pooled_model(path: Path, tail: list[onnx.NodeProto]) -> None:
    """x (1, 2, 6, 6) -> MaxPool 2x2 (a memoized kernel, shared by both models) -> `tail`."""
    pool = helper.make_node("MaxPool", ["x"], ["p"], name="pool", kernel_shape=[2, 2])
    graph = helper.make_graph(
        [pool, *tail],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 5, 5])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def _kernel_modules(compiled_model: Path) -> set[str]:
    """The generated kernel modules a compiled model's numba side file carries."""
    (side,) = compiled_model.parent.glob(f"{compiled_model.name}.*.ctx")
    with zipfile.ZipFile(side) as z:
        return {n for n in z.namelist() if n.startswith("src/")}


def test_an_artifact_carries_only_its_own_session_kernels(tmp_path: Path) -> None:
    """Compiling model A and then model B in one process: B's artifact holds the modules B's
    session uses (the same set as B compiled alone, the shared pool kernel included), none
    of A's own, and loads in an empty cache without compiling."""
    _pooled_model(tmp_path / "a.onnx", [helper.make_node("Softmax", ["p"], ["y"], name="sm")])
    b_tail = [
        helper.make_node("Mul", ["p", "p"], ["sq"], name="square"),
        helper.make_node("Add", ["sq", "p"], ["s"], name="add"),
        helper.make_node("Sigmoid", ["s"], ["y"], name="sigmoid"),
    ]
    _pooled_model(tmp_path / "b.onnx", b_tail)
    alone = tmp_path / "alone"
    alone.mkdir()
    _pooled_model(alone / "b.onnx", b_tail)
    _python(_COMPILE_EACH, tmp_path / "c1", str(tmp_path / "a.onnx"), str(tmp_path / "b.onnx"))
    # B alone in a fresh process, on the kernels the first process cached (compiling them
    # again would only repeat the first process's minutes of work)
    _python(_COMPILE_EACH, tmp_path / "c1", str(alone / "b.onnx"))
    a_mods = _kernel_modules(tmp_path / "a_ctx.onnx")
    b_mods = _kernel_modules(tmp_path / "b_ctx.onnx")
    assert a_mods - b_mods, "A's Softmax kernel should be A's own: the check below could not fail"
    assert b_mods == _kernel_modules(alone / "b_ctx.onnx")
    got = _python(_LOAD_POOLED, tmp_path / "c3", str(tmp_path / "b_ctx.onnx"))
    assert got["compiles"] == 0
    x = np.linspace(-2, 2, 72, dtype=np.float32).reshape(1, 2, 6, 6)
    p = np.maximum.reduce([x[..., i : i + 5, j : j + 5] for i in range(2) for j in range(2)])
    np.testing.assert_allclose(
        np.asarray(got["y"], np.float32), 1 / (1 + np.exp(-(p * p + p))), rtol=1e-5
    )


def test_import_takes_modules_whose_hint_has_underscores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Quantized kernels are named `turnout_numba_gen_qgemm_int_<hash>`: the import checks
    the hash and writes the module, as for a one-word hint."""
    import hashlib

    from turnout_numba import artifacts, cache

    monkeypatch.setenv("TURNOUT_CACHE_DIR", str(tmp_path))
    text = b"def _qgemm():\n    pass\n"
    name = f"turnout_numba_gen_qgemm_int_{hashlib.sha256(text).hexdigest()[:20]}"
    manifest = json.dumps({"mtime_ns": {name: 1_700_000_000_000_000_000}}).encode()
    artifacts.import_blobs({"manifest.json": manifest, f"src/{name}.py": text})
    assert (cache.cache_dir() / "src" / f"{name}.py").read_bytes() == text
