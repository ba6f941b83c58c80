"""onnxruntime 1.32's compile-API and device names, used as onnxruntime's tests and docs use
them, on turnout's compiled models: compatibility info read from a compiled model and judged
against EP devices, hardware devices and a provider's incompatibility details, registered
kernel defs, C.ModelRequiresCompilation, EPContext data callbacks, initializer locations, and
model packages of compiled variants."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import turnout as onnxrt
import turnout.api.capi._pybind_state as C
from turnout.api.capi.onnxruntime_inference_collection import (
    make_get_initializer_location_func_wrapper,
)
from turnout.sdk.ep import ExecutionProvider, KernelNode, KernelTable, ProviderFactory
from turnout.sdk.provider_options import ProviderOption

EP = "StampExecutionProvider"
STAMP_KERNELS = KernelTable(EP)


@STAMP_KERNELS.register("Neg", since=13)
def _neg(kn: KernelNode) -> Any:
    return lambda x: (-x,)


class StampProvider(ExecutionProvider):
    """Runs Neg; compiles "code" stamped with its `target` option."""

    name = EP
    kernels = STAMP_KERNELS
    loaded: list[dict[str, bytes]] = []

    def compatibility_info(self) -> str:
        return f"stamp;target={self.options['target']}"

    def export_compiled(self) -> dict[str, bytes]:
        return {"neg.o": b"\x7fELF neg for " + str(self.options["target"]).encode()}

    def import_compiled(self, blobs: Mapping[str, bytes]) -> None:
        StampProvider.loaded.append(dict(blobs))


TARGET = ProviderOption("target", (str,), "a", "the code's target")


class StampFactory(ProviderFactory):
    name, vendor, options = EP, "tests", (TARGET,)

    def _create(self, options: dict[str, Any]) -> ExecutionProvider:
        return StampProvider(options)


@pytest.fixture(autouse=True)
def stamp() -> Iterator[None]:
    StampProvider.loaded.clear()
    onnxrt.register_provider(StampFactory())
    try:
        yield
    finally:
        onnxrt.sdk.plugins.registry.unregister(EP)


def _model(path: Path | None = None) -> bytes:
    w = numpy_helper.from_array(np.arange(64, dtype=np.float32).reshape(2, 32), "w")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["s"]), helper.make_node("Neg", ["s"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 32])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    data: bytes = model.SerializeToString()
    if path is not None:
        path.write_bytes(data)
    return data


X = np.ones((2, 32), np.float32)
WANT = -(X + np.arange(64, dtype=np.float32).reshape(2, 32))


def _options(target: str = "a") -> onnxrt.SessionOptions:
    so = onnxrt.SessionOptions()
    so.add_provider(EP, {"target": target})
    return so


def _stamp_devices() -> list[Any]:
    return [d for d in onnxrt.get_ep_devices() if d.ep_name == EP]


# ---------------------------------------------------------------- compatibility info
def test_compatibility_info_from_compiled_model_file_and_bytes(tmp_path: Path) -> None:
    out = tmp_path / "m_ctx.onnx"
    onnxrt.ModelCompiler(_options(), _model()).compile_to_file(str(out))
    assert C.get_compatibility_info_from_model(str(out), EP) == "stamp;target=a"
    assert C.get_compatibility_info_from_model_bytes(out.read_bytes(), EP) == "stamp;target=a"
    assert C.get_compatibility_info_from_model_bytes(bytearray(out.read_bytes()), "OtherEP") is None
    assert C.get_compatibility_info_from_model_bytes(_model(), EP) is None  # a plain model


def test_compatibility_info_reads_onnxruntime_key_and_refuses_bad_input(tmp_path: Path) -> None:
    model = onnx.load_from_string(_model())
    helper.set_model_props(model, {"ep_compatibility_info.TestCompatEP": "v1.0_driver_123"})
    assert C.get_compatibility_info_from_model_bytes(model.SerializeToString(), "TestCompatEP") == (
        "v1.0_driver_123"
    )
    for bad in [(b"this is not a valid ONNX model", "TestEP"), (b"", "TestEP"), (b"data", "")]:
        with pytest.raises(RuntimeError):
            C.get_compatibility_info_from_model_bytes(*bad)
    for path, ep in [("nonexistent_model_path.onnx", "TestEP"), ("", "TestEP")]:
        with pytest.raises(RuntimeError):
            C.get_compatibility_info_from_model(path, ep)


def test_model_compatibility_for_ep_devices(tmp_path: Path) -> None:
    data = onnxrt.ModelCompiler(_options("a"), _model()).compile_to_bytes()
    info = C.get_compatibility_info_from_model_bytes(data, EP)
    devices = _stamp_devices()
    assert C.get_model_compatibility_for_ep_devices(devices, info) == (
        C.OrtCompiledModelCompatibility.EP_SUPPORTED_OPTIMAL
    )
    # the same model compiled for another target: a session would refuse it
    other = C.get_compatibility_info_from_model_bytes(
        onnxrt.ModelCompiler(_options("b"), _model()).compile_to_bytes(), EP
    )
    assert C.get_model_compatibility_for_ep_devices(devices, other) == (
        C.OrtCompiledModelCompatibility.EP_UNSUPPORTED
    )
    cpu = [d for d in onnxrt.get_ep_devices() if d.ep_name == "CPUExecutionProvider"]
    assert C.get_model_compatibility_for_ep_devices(cpu, "arbitrary-compat-string") == (
        C.OrtCompiledModelCompatibility.EP_NOT_APPLICABLE
    )
    with pytest.raises(RuntimeError):
        C.get_model_compatibility_for_ep_devices([], "info")
    with pytest.raises(TypeError):
        C.get_model_compatibility_for_ep_devices(devices, None)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="one execution provider"):
        C.get_model_compatibility_for_ep_devices([*devices, *cpu], info)


# ---------------------------------------------------------------- hardware devices
def test_hardware_devices_and_incompatibility_details() -> None:
    devices = C.get_hardware_devices()
    assert devices and all(d.type.value in (0, 1, 2) and d.vendor is not None for d in devices)
    cpu = next(d for d in devices if d.type.value == 0)
    details = C.get_hardware_device_ep_incompatibility_details("CPUExecutionProvider", cpu)
    assert details == {"reasons_bitmask": 0, "notes": None, "error_code": 0}
    with pytest.raises(RuntimeError):
        C.get_hardware_device_ep_incompatibility_details("", cpu)
    with pytest.raises(RuntimeError, match="No valid factory"):
        C.get_hardware_device_ep_incompatibility_details("NoSuchEP", cpu)
    elsewhere = onnxrt.OrtHardwareDevice(onnxrt.OrtHardwareDeviceType.NPU, 0x1234, "Acme", 7)
    got = C.get_hardware_device_ep_incompatibility_details(EP, elsewhere)
    assert got["reasons_bitmask"] == C.OrtDeviceEpIncompatibilityReason.DEVICE_INCOMPATIBLE
    assert EP in got["notes"]
    assert C.OrtDeviceEpIncompatibilityReason.MISSING_DEPENDENCY.value == 4
    assert C.OrtDeviceEpIncompatibilityReason.UNKNOWN.value == -2147483648


def test_missing_dependency_is_the_probe_reason() -> None:
    class AbsentFactory(StampFactory):
        name = "AbsentExecutionProvider"

        def _probe(self) -> Any:
            from turnout.sdk.ep import Availability

            return Availability(False, reason="no libacme.so")

    onnxrt.register_provider(AbsentFactory())
    try:
        got = C.get_hardware_device_ep_incompatibility_details(
            "AbsentExecutionProvider", C.get_hardware_devices()[0]
        )
    finally:
        onnxrt.sdk.plugins.registry.unregister("AbsentExecutionProvider")
    assert got == {"reasons_bitmask": 4, "notes": "no libacme.so", "error_code": 0}


# ---------------------------------------------------------------- kernel defs
def test_registered_ep_kernel_defs_come_from_the_kernel_table() -> None:
    defs = C.get_registered_ep_kernel_defs(EP)
    assert [(d.op_name, d.domain, d.version_range, d.provider) for d in defs] == [
        ("Neg", "", (13, 2**31 - 1), EP)
    ]
    cpu = C.get_registered_ep_kernel_defs("CPUExecutionProvider")
    assert {d.op_name for d in cpu} >= {"Add", "Conv", "Relu"}
    with pytest.raises(RuntimeError):
        C.get_registered_ep_kernel_defs("NoSuchEP")


# ---------------------------------------------------------------- C.ModelRequiresCompilation
def test_model_requires_compilation_then_compile_and_load(tmp_path: Path) -> None:
    src = tmp_path / "m.onnx"
    _model(src)
    so = _options()
    so.add_session_config_entry("session.disable_model_compile", "1")
    with pytest.raises(C.ModelRequiresCompilation, match="needs to compile"):
        onnxrt.InferenceSession(str(src), sess_options=so)
    compiled = tmp_path / "m_ctx.onnx"
    onnxrt.ModelCompiler(so, str(src), embed_compiled_data_into_model=True).compile_to_file(
        str(compiled)
    )
    sess = onnxrt.InferenceSession(str(compiled), sess_options=so)
    np.testing.assert_array_equal(sess.run(None, {"x": X})[0], WANT)
    # a CPU session compiles nothing that needs a compiled model
    cpu = onnxrt.SessionOptions()
    cpu.add_session_config_entry("session.disable_model_compile", "1")
    onnxrt.InferenceSession(str(src), cpu, providers=["CPUExecutionProvider"])


# ---------------------------------------------------------------- EPContext data callbacks
def test_ep_context_data_write_and_read_callbacks(tmp_path: Path) -> None:
    store: dict[str, bytes] = {}

    def write(name: str, data: onnxrt.OrtEpContextData) -> None:
        chunks = [data.read(i, min(4, data.size - i)) for i in range(0, data.size, 4)]
        store[name] = b"".join(chunks)

    out = tmp_path / "m_ctx.onnx"
    compiler = onnxrt.ModelCompiler(_options(), _model())
    compiler.set_ep_context_data_write_func(write)
    compiler.compile_to_file(str(out))
    assert list(store) == [f"m_ctx.onnx.{EP}.ctx"]
    assert not (tmp_path / f"m_ctx.onnx.{EP}.ctx").exists()  # the application keeps it

    asked: list[str] = []

    def read(name: str, buffer: onnxrt.OrtEpContextDataBuffer) -> None:
        asked.append(name)
        data = store[name]
        buffer.allocate(len(data))
        for i in range(0, len(data), 5):
            buffer.write(data[i : i + 5], i)

    so = _options()
    so.set_ep_context_data_read_func(read, 1 << 20)
    # from bytes: no folder to find side files in, the callback supplies them
    sess = onnxrt.InferenceSession(out.read_bytes(), sess_options=so)
    np.testing.assert_array_equal(sess.run(None, {"x": X})[0], WANT)
    assert asked == [f"m_ctx.onnx.{EP}.ctx"]
    assert StampProvider.loaded[-1] == {"neg.o": b"\x7fELF neg for a"}

    small = _options()
    small.set_ep_context_data_read_func(read, 8)  # the blob is larger than allowed
    with pytest.raises(RuntimeError, match="max_data_size"):
        onnxrt.InferenceSession(str(out), sess_options=small)
    small.clear_ep_context_data_read_func()
    with pytest.raises(RuntimeError, match="cannot read compiled data"):  # no side file
        onnxrt.InferenceSession(str(out), sess_options=small)


def test_ep_context_views_live_only_during_their_callback() -> None:
    view = onnxrt.OrtEpContextData(b"abc")
    assert (view.size, view.read(1), view.read(0, 2)) == (3, b"bc", b"ab")
    view._close()
    with pytest.raises(RuntimeError, match="only during"):
        view.read()
    buffer = onnxrt.OrtEpContextDataBuffer(4)
    assert (buffer.max_size, buffer.is_allocated, buffer.size) == (4, False, 0)
    buffer.allocate(3)
    with pytest.raises(RuntimeError, match="once"):
        buffer.allocate(3)
    with pytest.raises(RuntimeError, match="do not fit"):
        buffer.write(b"abcd")


# ---------------------------------------------------------------- initializer locations
def test_initializer_location_func_writes_weights_where_the_application_says(
    tmp_path: Path,
) -> None:
    weights = tmp_path / "weights.bin"
    seen: dict[str, Any] = {}

    with open(weights, "wb") as f:

        def locate(
            name: str,
            value: onnxrt.OrtValue,
            external_info: onnxrt.OrtExternalInitializerInfo | None,
        ) -> onnxrt.OrtExternalInitializerInfo | None:
            seen[name] = external_info
            size = value.tensor_size_in_bytes()
            if size < 64:
                return None
            offset = f.tell()
            f.write(value.numpy().tobytes())
            return onnxrt.OrtExternalInitializerInfo("weights.bin", offset, size)

        out = tmp_path / "m_ctx.onnx"
        onnxrt.ModelCompiler(
            _options(), _model(), get_initializer_location_func=locate
        ).compile_to_file(str(out))
    assert seen == {"w": None}
    (w,) = onnx.load(str(out), load_external_data=False).graph.initializer
    assert w.data_location == TensorProto.EXTERNAL
    assert {e.key: e.value for e in w.external_data}["location"] == "weights.bin"
    sess = onnxrt.InferenceSession(str(out), sess_options=_options())
    np.testing.assert_array_equal(sess.run(None, {"x": X})[0], WANT)
    with pytest.raises(ValueError, match="both"):
        onnxrt.ModelCompiler(
            _options(),
            _model(),
            external_initializers_file_path="x.bin",
            get_initializer_location_func=locate,
        )


def test_initializer_location_wrapper_passes_the_input_models_location(tmp_path: Path) -> None:
    src = tmp_path / "m.onnx"
    onnx.save(
        onnx.load_from_string(_model()),
        src,
        save_as_external_data=True,
        location="m.bin",
        size_threshold=0,
    )
    got: dict[str, Any] = {}

    def keep(name: str, value: onnxrt.OrtValue, info: Any) -> Any:
        got[name] = info
        return info  # leave it where the input model had it

    wrapped = make_get_initializer_location_func_wrapper(keep)
    assert wrapped("w", np.zeros(2, np.float32), None) is None
    out = tmp_path / "m_ctx.onnx"
    onnxrt.ModelCompiler(_options(), str(src), get_initializer_location_func=keep).compile_to_file(
        str(out)
    )
    assert got["w"] == onnxrt.OrtExternalInitializerInfo("m.bin", 0, 256)
    sess = onnxrt.InferenceSession(str(out), sess_options=_options())
    np.testing.assert_array_equal(sess.run(None, {"x": X})[0], WANT)


# ---------------------------------------------------------------- model packages
def _package(tmp_path: Path) -> Path:
    """A package with one component, `neg`, in three variants: the CPU model, and the model
    compiled for the stamp provider with targets a and b."""
    root = tmp_path / "pkg"
    for name in ("cpu", "stamp_a", "stamp_b"):
        (root / "neg" / name).mkdir(parents=True)
    _model(root / "neg" / "cpu" / "model.onnx")
    for target in ("a", "b"):
        out = root / "neg" / f"stamp_{target}" / "model.onnx"
        onnxrt.ModelCompiler(_options(target), _model()).compile_to_file(str(out))
    (root / "manifest.json").write_text(json.dumps({"schema_version": "1.0", "components": {}}))
    package = onnxrt.ModelPackage.open(str(root))
    package.set_metadata("neg", "1.0", "Neg, compiled per target")

    def variant(folder: str, ep: str) -> dict[str, Any]:
        ort = {"model_file": "model.onnx", "session_options": {"session.turnout.tag": folder}}
        return {"variant_directory": f"neg/{folder}", "ep": ep, "device": "cpu",
                "executor_info": {"ort": ort}}  # fmt: skip

    package.set_component_inline(
        "neg", json.dumps({"variants": {"cpu": variant("cpu", "CPUExecutionProvider")}})
    )
    package.set_variant("neg", "stamp_b", json.dumps(variant("stamp_b", EP)))
    package.set_variant("neg", "stamp_a", json.dumps(variant("stamp_a", EP)))
    package.commit()
    package.close()
    return root


def test_model_package_selects_the_compiled_variant_that_suits(tmp_path: Path) -> None:
    root = _package(tmp_path)
    ctx = onnxrt.ModelPackageContext(str(root))
    assert (ctx.get_schema_version(), ctx.get_component_count()) == (1, 1)
    assert ctx.get_component_names() == ["neg"]
    assert ctx.get_variant_names("neg") == ["cpu", "stamp_b", "stamp_a"]
    assert ctx.get_variant_ep_name("neg", "stamp_a") == EP
    # the stamp provider with target a: stamp_b was compiled for b, refused as a session would
    selected = ctx.select_component("neg", onnxrt.ModelPackageOptions(_options("a")))
    assert selected.get_selected_variant_name() == "stamp_a"
    assert selected.get_selected_variant_folder_path() == str(root / "neg" / "stamp_a")
    sess = selected.create_session()
    np.testing.assert_array_equal(sess.run(None, {"x": X})[0], WANT)
    assert StampProvider.loaded[-1] == {"neg.o": b"\x7fELF neg for a"}
    assert sess.get_providers()[0] == EP
    assert sess._sess_options.get_session_config_entry("session.turnout.tag") == "stamp_a"
    b = ctx.select_component("neg", onnxrt.ModelPackageOptions(_options("b")))
    assert b.get_selected_variant_name() == "stamp_b"
    # no provider asked for: the CPU request, served by the plain model
    cpu = ctx.select_component("neg", onnxrt.ModelPackageOptions(onnxrt.SessionOptions()))
    assert cpu.get_selected_variant_name() == "cpu"
    np.testing.assert_array_equal(cpu.create_session().run(None, {"x": X})[0], WANT)


def test_model_package_authoring(tmp_path: Path) -> None:
    root = _package(tmp_path)
    package = onnxrt.ModelPackage.open(str(root))
    info = package.get_info()
    assert (info["package_name"], info["schema_version_major"], info["layout"]) == (
        "neg", 1, "portable"
    )  # fmt: skip
    assert [v["name"] for v in info["components"][0]["variants"]] == ["cpu", "stamp_b", "stamp_a"]
    assert json.loads(package.get_variant_json("neg", "stamp_a"))["ep"] == EP
    assert package.resolve_string_ref("neg/cpu/model.onnx", must_exist=True) == str(
        root / "neg" / "cpu" / "model.onnx"
    )
    with pytest.raises(RuntimeError, match="missing required 'variants'"):
        package.set_component_inline("bad", "{}")
    with pytest.raises(FileNotFoundError):
        package.set_variant("neg", "gone", json.dumps({"variant_directory": "neg/nowhere"}))
    package.remove_variant("neg", "stamp_b")
    package.set_additional_metadata_json("package", json='{"producer": "tests"}')
    copy = tmp_path / "copy"
    package.commit(str(copy), onnxrt.ModelPackageWriteMode.DENSE)
    with pytest.raises(RuntimeError, match="not empty"):
        package.commit(str(copy))
    ctx = onnxrt.ModelPackageContext(str(copy))
    assert ctx.get_variant_names("neg") == ["cpu", "stamp_a"]
    h = onnxrt.ModelPackage.compute_directory_hash(str(copy / "neg" / "cpu"))
    assert h == onnxrt.ModelPackage.compute_directory_hash(str(root / "neg" / "cpu"))
    assert h.startswith("sha256:")
    with pytest.raises(RuntimeError, match="No suitable model variant"):
        only = onnxrt.ModelPackage.open(str(copy))
        only.remove_variant("neg", "cpu")
        only.remove_variant("neg", "stamp_a")
        only.commit()
        onnxrt.ModelPackageContext(str(copy)).select_component(
            "neg", onnxrt.ModelPackageOptions(onnxrt.SessionOptions())
        )
