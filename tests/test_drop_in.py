"""The one-line drop-in (`turnout.install_as_onnxruntime()`, `python -m turnout.as_onnxruntime`)
and the module-level onnxruntime names with behaviour: telemetry, seed, global thread pools,
shared allocators, logger callback, copy_tensors, datasets, backend.

What changes `sys.modules` runs in a subprocess; process-wide settings are restored per test.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import turnout
from turnout.api import environment
from turnout.api.capi import onnxruntime_inference_collection as ic
from turnout.api.capi import onnxruntime_pybind11_state as native
from turnout.graph import errors
from turnout.graph.errors import Fail, InvalidArgument
from turnout.sdk import seed


def _python(code: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-W", "error", *args] if not code else [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )


DROP_IN_CHECK = """
import turnout
turnout.install_as_onnxruntime()
import onnxruntime
import onnxruntime as ort
from onnxruntime.capi.onnxruntime_pybind11_state import Fail, RunOptions
from onnxruntime.capi._pybind_state import OrtValue
from onnxruntime.capi import _pybind_state as C
from onnxruntime import datasets
import onnxruntime.backend.backend as bb
import onnxruntime.backend
assert ort.__version__ == ort.version == turnout.ORT_API_VERSION, ort.__version__
assert turnout.__version__ != ort.__version__
assert ort.package_name == "onnxruntime" and turnout.package_name == "turnout"
assert ort.InferenceSession is turnout.InferenceSession
assert Fail is turnout.Fail and RunOptions is turnout.RunOptions and OrtValue is turnout.OrtValue
assert C.SessionOptions is turnout.SessionOptions
assert bb.OnnxRuntimeBackend is turnout.api.backend.TurnoutBackend
assert ort.capi.onnxruntime_validation.get_package_name_and_version_info()[0] == "onnxruntime"
ort.disable_telemetry_events()
import numpy as np
path = datasets.get_example("sigmoid.onnx")
sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
y = sess.run(None, {"x": np.zeros((3, 4, 5), np.float32)})[0]
assert np.allclose(y, 0.5)
try:
    import onnxruntime.no_such_module
except ModuleNotFoundError:
    pass
else:
    raise AssertionError("an unknown submodule imported")
import importlib.util
assert importlib.util.find_spec("onnxruntime") is not None
print("ok")
"""


def test_install_as_onnxruntime_serves_the_imports_applications_use() -> None:
    r = _python(DROP_IN_CHECK)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_install_replaces_an_already_imported_onnxruntime() -> None:
    pytest.importorskip("onnxruntime", reason="needs the real onnxruntime installed to replace it")
    code = (
        "import onnxruntime, turnout; turnout.install_as_onnxruntime(); "
        "import onnxruntime as o; assert o.InferenceSession is turnout.InferenceSession; "
        "turnout.install_as_onnxruntime(); print('ok')"
    )
    r = _python(code)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


APP = """
import sys
import onnxruntime
import turnout
print(onnxruntime.__version__, onnxruntime.InferenceSession is turnout.InferenceSession, sys.argv)
sys.exit(int(sys.argv[-1]))
"""


def test_run_a_script_under_turnout(tmp_path: Path) -> None:
    script = tmp_path / "app.py"
    script.write_text(APP)
    r = _python("", "-m", "turnout.as_onnxruntime", str(script), "a", "0")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [turnout.ORT_API_VERSION, "True", f"['{script}',", "'a',", "'0']"]
    r = _python("", "-m", "turnout.as_onnxruntime", str(script), "3")
    assert r.returncode == 3, r.stderr  # the script's exit status comes through


def test_run_a_module_under_turnout(tmp_path: Path) -> None:
    (tmp_path / "ortapp.py").write_text(APP)
    r = _python("", "-m", "turnout.as_onnxruntime", "-m", "ortapp", "x", "0", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[:2] == [turnout.ORT_API_VERSION, "True"]
    assert r.stdout.split()[-2:] == ["'x',", "'0']"]


def test_usage_without_arguments() -> None:
    r = _python("", "-m", "turnout.as_onnxruntime")
    assert r.returncode == 2 and "usage" in r.stdout


# -- process-wide settings ---------------------------------------------------------------------


def test_telemetry_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(environment, "_telemetry", True)
    turnout.disable_telemetry_events()
    assert environment.telemetry_enabled() is False
    turnout.enable_telemetry_events()
    assert environment.telemetry_enabled() is True


def test_set_seed_makes_random_states_repeat(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(seed, "_seed", None)
    turnout.set_seed(7)
    assert environment.get_seed() == 7
    a, b = environment.random_state(), environment.random_state()
    assert np.array_equal(a.uniform(size=5), b.uniform(size=5))
    with pytest.raises(TypeError):
        turnout.set_seed("7")  # type: ignore[arg-type]


def _dropout_model() -> bytes:
    ratio = helper.make_tensor("r", TensorProto.FLOAT, [], [0.5])
    train = helper.make_tensor("t", TensorProto.BOOL, [], [True])
    node = helper.make_node("Dropout", ["x", "r", "t"], ["y", "mask"])
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [64]),
            helper.make_tensor_value_info("mask", TensorProto.BOOL, [64]),
        ],
        [ratio, train],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    return model.SerializeToString()


def test_set_seed_makes_dropout_repeat_across_sessions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(seed, "_seed", None)
    turnout.set_seed(3)
    x = {"x": np.ones(64, np.float32)}
    first = turnout.InferenceSession(_dropout_model()).run(["mask"], x)[0]
    second = turnout.InferenceSession(_dropout_model()).run(["mask"], x)[0]
    np.testing.assert_array_equal(first, second)


def test_global_thread_pools_are_sized_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(environment, "_pool_sizes", None)
    assert environment.global_thread_pool_sizes() is None
    turnout.set_global_thread_pool_sizes(intra_op_num_threads=2, inter_op_num_threads=1)
    assert environment.global_thread_pool_sizes() == (2, 1)
    with pytest.raises(Fail, match="already been created"):
        turnout.set_global_thread_pool_sizes(3, 1)


def test_shared_allocators_are_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(environment, "_allocators", {})
    cpu = turnout.OrtMemoryInfo("Cpu", turnout.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0)
    cfg = turnout.OrtArenaCfg({"max_mem": 1 << 20, "arena_extend_strategy": 1})
    turnout.create_and_register_allocator(cpu, cfg)
    (entry,) = environment.registered_allocators().values()
    assert entry.provider == "CPUExecutionProvider" and entry.arena_cfg is cfg
    turnout.create_and_register_allocator_v2("cpu", cpu, {"a": 1}, None)  # type: ignore[dict-item]
    (entry,) = environment.registered_allocators().values()  # the same device: replaced
    assert entry.provider_options == {"a": "1"} and entry.arena_cfg is None
    gpu = turnout.OrtMemoryInfo("Cuda", turnout.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0)
    with pytest.raises(InvalidArgument, match="create_and_register_allocator_v2"):
        turnout.create_and_register_allocator(gpu, cfg)
    with pytest.raises(errors.NotImplemented, match="NoSuchExecutionProvider"):
        turnout.create_and_register_allocator_v2("NoSuchExecutionProvider", cpu, {}, cfg)


def test_arena_cfg_forms() -> None:
    cfg = turnout.OrtArenaCfg(0, -1, -1, -1)
    assert (cfg.max_mem, cfg.arena_extend_strategy, cfg.initial_growth_chunk_size_bytes) == (
        0,
        -1,
        -1,
    )
    assert turnout.OrtArenaCfg({"initial_chunk_size_bytes": 256}).initial_chunk_size_bytes == 256
    with pytest.raises(InvalidArgument, match="bogus"):
        turnout.OrtArenaCfg({"bogus": 1})
    assert native.kSameAsRequested == turnout.ArenaExtendStrategy.kSameAsRequested == 1


def test_logger_callback_receives_records(monkeypatch: pytest.MonkeyPatch) -> None:
    from turnout.graph import logs

    monkeypatch.setattr(logs.logger, "level", logs.logger.level)
    got: list[tuple[int, str]] = []
    turnout.set_default_logger_callback(lambda sev, cat, logid, where, msg: got.append((sev, msg)))
    try:
        logs.logger.warning("hello %s", "there")
    finally:
        turnout.set_default_logger_callback(None)
    logs.logger.warning("not delivered")
    assert got == [(2, "hello there")]


def test_copy_tensors() -> None:
    src = [turnout.OrtValue.ortvalue_from_numpy(np.arange(3, dtype=np.float32))]
    dst = [turnout.OrtValue.ortvalue_from_numpy(np.zeros(3, np.float32))]
    turnout.copy_tensors(src, dst, None)
    np.testing.assert_array_equal(dst[0].numpy(), [0, 1, 2])
    with pytest.raises(InvalidArgument, match="pair 0"):
        bad = [turnout.OrtValue.ortvalue_from_numpy(np.zeros(4, np.float32))]
        turnout.copy_tensors(src, bad)
    with pytest.raises(InvalidArgument, match="pair up"):
        turnout.copy_tensors(src, [])


def test_module_facts_of_a_cpu_build() -> None:
    assert turnout.cuda_version == "" and turnout.has_collective_ops() is False
    assert turnout.get_device() == "CPU"
    turnout.preload_dlls()
    assert isinstance(native.get_default_session_options(), turnout.SessionOptions)
    relu = [k for k in native.get_all_opkernel_def() if k.op_name == "Relu" and k.domain == ""]
    assert relu and relu[-1].provider == "CPUExecutionProvider"
    assert any(s.name == "Relu" for s in native.get_all_operator_schema())
    assert ic.get_ort_device_type("cuda") == 1 and ic.get_vendor_id_for_device_type("cpu") is None


@pytest.mark.parametrize(
    "providers, options",
    [
        (["CPUExecutionProvider"], None),
        ([("CPUExecutionProvider", {"a": 1})], None),
        (["CPUExecutionProvider"], [{"a": "b"}]),
        (None, None),
        (["CPUExecutionProvider"], [{}, {}]),
        ([3], None),
    ],
)
def test_provider_args_normalize_as_onnxruntime(providers: Any, options: Any) -> None:
    ort_ic = pytest.importorskip(
        "onnxruntime.capi.onnxruntime_inference_collection", reason="onnxruntime is the oracle"
    )

    def outcome(f: Any) -> Any:
        try:
            return f(providers, options, ["CPUExecutionProvider"])
        except ValueError as e:
            return str(e)

    assert outcome(ic.check_and_normalize_provider_args) == outcome(
        ort_ic.check_and_normalize_provider_args
    )


# -- datasets and backend ----------------------------------------------------------------------

EXAMPLE_FEEDS = {
    "mul_1.onnx": {"X": np.arange(6, dtype=np.float32).reshape(3, 2)},
    "sigmoid.onnx": {"x": np.linspace(-4, 4, 60, dtype=np.float32).reshape(3, 4, 5)},
}


@pytest.mark.parametrize("name", sorted(EXAMPLE_FEEDS))
def test_datasets_examples_give_onnxruntimes_outputs(name: str) -> None:
    """turnout's example of a name onnxruntime ships gives what onnxruntime's own model of that
    name gives (not only the same model on both runtimes)."""
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime's examples are the oracle")
    import onnxruntime.datasets as ort_datasets

    feeds = EXAMPLE_FEEDS[name]
    ort_path = ort_datasets.get_example(name)
    want = ort.InferenceSession(ort_path, providers=["CPUExecutionProvider"]).run(None, feeds)
    got = turnout.InferenceSession(turnout.datasets.get_example(name)).run(None, feeds)
    assert len(got) == len(want)
    for w, g in zip(want, got):
        np.testing.assert_array_equal(g, w)


def test_datasets_every_example_is_checked_against_onnxruntime() -> None:
    from turnout.api import datasets

    assert sorted(datasets.BUILDERS) == sorted(EXAMPLE_FEEDS)


def test_datasets_logreg_iris_is_not_shipped() -> None:
    """onnxruntime's iris classifier has trained weights turnout does not ship: the name is
    absent rather than a different model under a name users know."""
    with pytest.raises(FileNotFoundError, match="logreg_iris"):
        turnout.datasets.get_example("logreg_iris.onnx")


def test_datasets_examples_are_small_and_rebuildable() -> None:
    from turnout.api import datasets

    for name, build in datasets.BUILDERS.items():
        path = Path(datasets.get_example(name))
        assert path.stat().st_size < 10_000
        assert path.read_bytes() == build().SerializeToString(), f"rerun python -m {__name__}"
    with pytest.raises(FileNotFoundError, match=r"nope\.onnx"):
        datasets.get_example("nope.onnx")


def test_backend_module_paths() -> None:
    import turnout.api.backend.backend as bb
    from turnout.api.backend import TurnoutBackend

    assert bb.OnnxRuntimeBackend is TurnoutBackend and bb.run == bb.run_model
    model = helper.make_model(
        helper.make_graph([], "g", [], []), opset_imports=[helper.make_opsetid("", 99)]
    )
    ok, why = TurnoutBackend.is_opset_supported(model)
    assert not ok and "99" in why
    del model.opset_import[:]
    model.opset_import.append(helper.make_opsetid("", 13))
    assert TurnoutBackend.is_opset_supported(model) == (True, "")


def _random_model(op: str) -> bytes:
    """One random op without a seed attribute, fed a (2, 8) float input where it takes one."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])
    inputs, attrs = (["x"], {}) if op in ("RandomNormalLike", "RandomUniformLike") else ([], {})
    if op == "RandomNormal" or op == "RandomUniform":
        attrs = {"shape": [2, 8]}
    if op in ("Bernoulli", "Multinomial"):
        inputs = ["p"]
    if op == "Multinomial":
        attrs = {"sample_size": 16}  # two runs drawing the same 32 samples: 8**-32
    node = helper.make_node(op, inputs, ["y"], **attrs)
    graph_inputs = [x] if inputs == ["x"] else []
    inits = []
    if op in ("Bernoulli", "Multinomial"):
        p = np.full((2, 8), 0.5 if op == "Bernoulli" else 0.0, np.float32)  # 8 equal classes
        inits = [numpy_helper.from_array(p, "p")]
    y = helper.make_empty_tensor_value_info("y")
    graph = helper.make_graph([node], "random", graph_inputs, [y], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    return model.SerializeToString()


@pytest.mark.parametrize(
    "op",
    [
        "RandomNormal",
        "RandomUniform",
        "RandomNormalLike",
        "RandomUniformLike",
        "Bernoulli",
        "Multinomial",
    ],
)
def test_set_seed_makes_onnx_reference_random_ops_repeat(
    op: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """They run on onnx.reference, which draws an unseeded op from OS entropy each run."""
    feeds = {"x": np.ones((2, 8), np.float32)} if op.endswith("Like") else {}

    def two_runs() -> tuple[np.ndarray, np.ndarray]:
        sess = turnout.InferenceSession(_random_model(op))
        return sess.run(None, feeds)[0], sess.run(None, feeds)[0]

    monkeypatch.setattr(seed, "_seed", None)
    turnout.set_seed(11)
    first = two_runs()
    turnout.set_seed(11)
    again = two_runs()
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(*first), "each run must still draw new numbers"
