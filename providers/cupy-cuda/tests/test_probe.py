"""The probe tells the truth: each reason the provider cannot run is named, in `turnout
providers` and in a session that asks for CUDA with fallback "error"; a machine that can run
lists its devices for `get_ep_devices()`.

The facts of machines this one is not (a GPU, an old driver, no device) are fed to
`probe.decide`; the facts of this machine are read for real.
"""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points

import pytest
from onnx import TensorProto, helper

import turnout
from turnout.engine.provider_creation import create_provider
from turnout.graph.errors import EPFail, FallbackError, InvalidArgument
from turnout.sdk.plugins import registry
from turnout_cupy import probe
from turnout_cupy.factory import CuPyProviderFactory
from turnout_cupy.probe import CudaFacts, DeviceFacts

from .conftest import gpu_reason

V = "0.1.0"
RUNTIME_13_2 = 13020
A100 = DeviceFacts("NVIDIA A100-SXM4-80GB", (8, 0), 80 << 30, "0000:07:00")


def test_no_cupy() -> None:
    facts = CudaFacts(
        import_error="ModuleNotFoundError: No module named 'cupy'", cupy_installed=False
    )
    reason = probe.decide(facts, V).reason
    assert reason is not None and reason.startswith("CuPy is not installed")
    assert "turnout-cupy[cuda13]" in reason


def test_cupy_that_fails_to_import_says_why() -> None:
    facts = CudaFacts(import_error="ModuleNotFoundError: No module named 'cuda.pathfinder'")
    reason = probe.decide(facts, V).reason
    assert (
        reason == "CuPy cannot be imported: ModuleNotFoundError: No module named 'cuda.pathfinder'"
    )


def test_no_driver() -> None:
    facts = CudaFacts(
        cupy_version="14.2.0",
        libcuda_error="libcuda.so.1: cannot open shared object file",
        runtime_version=RUNTIME_13_2,
        driver_version=0,
        count_error=(35, "cudaErrorInsufficientDriver: CUDA driver version is insufficient"),
    )
    avail = probe.decide(facts, V)
    assert not avail.ok and not avail.devices
    assert avail.reason is not None and avail.reason.startswith("no NVIDIA driver")
    assert "CUDA 13.2 runtime" in avail.reason


def test_driver_too_old_for_the_runtime() -> None:
    facts = CudaFacts(
        cupy_version="14.2.0",
        runtime_version=RUNTIME_13_2,
        driver_version=12040,
        count_error=(35, "cudaErrorInsufficientDriver: CUDA driver version is insufficient"),
    )
    reason = probe.decide(facts, V).reason
    assert reason is not None
    assert "supports CUDA up to 12.4, older than CuPy 14.2.0 with the CUDA 13.2 runtime" in reason
    assert "cudaErrorInsufficientDriver" in reason and "cupy-cuda12x" in reason


@pytest.mark.parametrize(
    "count_error", [(100, "cudaErrorNoDevice: no CUDA-capable device is detected"), None]
)
def test_no_device(count_error: tuple[int, str] | None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    facts = CudaFacts(
        cupy_version="14.2.0",
        runtime_version=RUNTIME_13_2,
        driver_version=13020,
        count_error=count_error,
        device_count=0,
    )
    reason = probe.decide(facts, V).reason
    assert reason is not None and reason.startswith("no CUDA device")
    assert "CUDA_VISIBLE_DEVICES=''" in reason


def test_other_cuda_errors_are_reported_as_they_are() -> None:
    facts = CudaFacts(
        cupy_version="14.2.0",
        runtime_version=RUNTIME_13_2,
        driver_version=13020,
        count_error=(999, "cudaErrorUnknown: unknown error"),
    )
    assert (
        probe.decide(facts, V).reason
        == "CUDA error asking for devices: cudaErrorUnknown: unknown error"
    )


def test_a_gpu_is_a_device_entry_with_its_facts() -> None:
    facts = CudaFacts(
        cupy_version="14.2.0",
        runtime_version=RUNTIME_13_2,
        driver_version=13020,
        device_count=2,
        devices=(A100, A100),
    )
    avail = probe.decide(facts, V)
    assert avail.ok and len(avail.devices) == 2
    entry = avail.devices[1]
    assert str(entry.device) == "cuda:1" and entry.default_options == {"device_id": 1}
    assert entry.hardware_type == "gpu" and entry.vendor_id == 0x10DE
    assert entry.metadata["compute_capability"] == "8.0"
    assert avail.version == "0.1.0 (CuPy 14.2.0, CuPy 14.2.0 with the CUDA 13.2 runtime)"


def test_gather_never_raises_without_cupy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy -> ImportError
    facts = probe.gather()
    assert facts.import_error is not None and not facts.cupy_installed
    assert probe.decide(facts, V).reason.startswith("CuPy is not installed")  # type: ignore[union-attr]


# -- this machine, for real ----------------------------------------------------------------------


def _this_machine() -> CudaFacts:
    facts = probe.gather()
    if facts.import_error is None and facts.libcuda_error is None:
        pytest.skip("this machine has an NVIDIA driver: the no-driver path cannot be seen here")
    return facts


def test_the_real_probe_on_a_machine_without_a_driver() -> None:
    facts = _this_machine()
    reason = probe.decide(facts, V).reason
    assert reason is not None
    if facts.import_error is not None:
        assert reason.startswith(("CuPy is not installed", "CuPy cannot be imported"))
        return
    # CuPy imports; its runtime finds no driver: version 0 and cudaErrorInsufficientDriver
    assert facts.driver_version == 0
    assert facts.count_error is not None
    assert facts.count_error[0] == probe.CUDA_ERROR_INSUFFICIENT_DRIVER
    assert reason.startswith("no NVIDIA driver") and "cudaErrorInsufficientDriver" in reason


def test_registered_under_both_names_through_the_entry_point() -> None:
    eps = {ep.name: ep.value for ep in entry_points(group="turnout")}
    assert eps.get("cupy") == "turnout_cupy.plugin"
    for name in ("cupy", "CUDAExecutionProvider", "CuPyExecutionProvider"):
        factory = registry.find(name)
        assert isinstance(factory, CuPyProviderFactory), name
    assert "CuPyExecutionProvider" in turnout.get_all_providers()


def _model() -> bytes:
    node = helper.make_node("Relu", ["x"], ["y"])
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.mark.skipif(gpu_reason() is None, reason="a GPU is usable here: nothing is unavailable")
def test_unavailable_here_everywhere_it_is_asked() -> None:
    reason = gpu_reason()
    assert reason
    listing = subprocess.run(
        [sys.executable, "-m", "turnout", "providers"], capture_output=True, text=True, check=True
    ).stdout
    line = next(x for x in listing.splitlines() if x.startswith("CuPyExecutionProvider"))
    assert f"unavailable: {reason}" in line
    assert all(d.ep_name != "CuPyExecutionProvider" for d in turnout.get_ep_devices())
    so = turnout.SessionOptions()
    so.fallback = "error"
    with pytest.raises(FallbackError) as err:
        turnout.InferenceSession(_model(), so, providers=["CUDAExecutionProvider"])
    assert str(err.value) == (
        f"CUDAExecutionProvider is not available here: {reason} (fallback policy 'error')"
    )
    with pytest.raises(EPFail, match="cannot run here: " + reason[:30]):
        create_provider(CuPyProviderFactory())


def test_unavailable_provider_with_default_fallback_warns_with_the_reason() -> None:
    reason = gpu_reason()
    if reason is None:
        pytest.skip("a GPU is usable here: nothing is unavailable")
    with pytest.warns(UserWarning, match="CUDAExecutionProvider is not available here: "):
        sess = turnout.InferenceSession(_model(), providers=["CUDAExecutionProvider"])
    assert sess.get_providers() == ["CPUExecutionProvider"]


def test_options_are_typed() -> None:
    f = CuPyProviderFactory()
    assert f.default_options() == {"device_id": 0, "stream": 0, "fuse": True}
    assert f.option("device_id").parse(f.name, "1") == 1  # type: ignore[union-attr]
    assert f.option("fuse").parse(f.name, "0") is False  # type: ignore[union-attr]
    with pytest.raises(InvalidArgument, match="option 'device_id' must be int >= 0, not -1"):
        f.option("device_id").parse(f.name, -1)  # type: ignore[union-attr]
    with pytest.raises(InvalidArgument, match="unknown provider option"):
        create_provider(f, {"gpu_mem_limit": 1})
