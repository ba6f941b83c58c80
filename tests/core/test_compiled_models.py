"""Compiled models (`ModelCompiler`, `turnout compile`): the optimized graph plus each
provider's compiled blobs, handed back to the provider on load; a stale or damaged artifact is
a `Fail` that says why, never a silent recompile or a wrong run."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import turnout
from turnout.api.compiler import ARTIFACT_KEY, ModelCompiler, OrtCompileApiFlags
from turnout.graph.errors import Fail, InvalidArgument
from turnout.sdk.provider import CONTRACT_VERSION, ExecutionProvider, KernelNode, ProviderFactory
from turnout.sdk.provider_options import ProviderOption

BLOB = "BlobExecutionProvider"


class BlobProvider(ExecutionProvider):
    """Runs Relu; its "compiled code" is one named blob, recorded when imported."""

    name = BLOB
    imported: list[dict[str, bytes]] = []

    def __init__(self, options: Mapping[str, Any]) -> None:
        super().__init__(options)

        @self.kernels.register("Relu", since=1)
        def relu(kn: KernelNode) -> Any:
            return lambda x: (np.maximum(x, 0),)

    def compatibility_info(self) -> str:
        return f"blob-{self.options['version']}"

    def export_compiled(self) -> dict[str, bytes]:
        return {"relu.bin": b"relu machine code"}

    def import_compiled(self, blobs: Mapping[str, bytes]) -> None:
        BlobProvider.imported.append(dict(blobs))


class BlobFactory(ProviderFactory):
    name = BLOB
    contract_version = CONTRACT_VERSION
    options = (ProviderOption("version", (str,), "1", "what its compiled code depends on"),)

    def _create(self, options: dict[str, Any]) -> ExecutionProvider:
        return BlobProvider(options)


@pytest.fixture(autouse=True)
def blob_provider() -> Iterator[None]:
    turnout.register_provider(BlobFactory())
    BlobProvider.imported.clear()
    yield
    turnout.sdk.plugins.registry.unregister(BLOB)


def _model() -> bytes:
    nodes = [
        helper.make_node("Neg", ["x"], ["a"], name="neg"),
        helper.make_node("Relu", ["a"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    data: bytes = model.SerializeToString()
    return data


def _options(version: str = "1") -> turnout.SessionOptions:
    opts = turnout.SessionOptions()
    opts.add_provider(BLOB, {"version": version})
    return opts


X = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)


def _run(path_or_bytes: Any, version: str = "1") -> np.ndarray:
    sess = turnout.InferenceSession(path_or_bytes, _options(version))
    assert sess.optimization_report().level == 0  # the compiled graph is not optimized again
    return np.asarray(sess.run(None, {"x": X})[0])


def test_side_file_round_trip(tmp_path: Path) -> None:
    out = tmp_path / "m_ctx.onnx"
    ModelCompiler(_options(), _model()).compile_to_file(out)
    assert (tmp_path / f"m_ctx.onnx.{BLOB}.ctx").is_file()
    np.testing.assert_array_equal(_run(str(out)), np.maximum(-X, 0))
    assert BlobProvider.imported[-1] == {"relu.bin": b"relu machine code"}


def test_embedded_bytes_round_trip() -> None:
    data = ModelCompiler(_options(), _model()).compile_to_bytes()
    keys = {p.key for p in onnx.load_from_string(data).metadata_props}
    assert ARTIFACT_KEY in keys
    np.testing.assert_array_equal(_run(data), np.maximum(-X, 0))
    assert BlobProvider.imported[-1] == {"relu.bin": b"relu machine code"}


def test_stale_artifact_fails_naming_both_versions(tmp_path: Path) -> None:
    data = ModelCompiler(_options("1"), _model()).compile_to_bytes()
    with pytest.raises(Fail, match="compiled for 'blob-1', this session's provider is 'blob-2'"):
        _run(data, version="2")
    assert BlobProvider.imported == []


def test_damaged_or_missing_blobs_fail(tmp_path: Path) -> None:
    out = tmp_path / "m_ctx.onnx"
    ModelCompiler(_options(), _model()).compile_to_file(out)
    side = tmp_path / f"m_ctx.onnx.{BLOB}.ctx"
    with pytest.raises(Fail, match="cannot find"):
        _run(out.read_bytes())  # bytes have no folder for the side file
    side.write_bytes(side.read_bytes()[:-1] + b"!")
    with pytest.raises(Fail, match="corrupted"):
        _run(str(out))
    side.unlink()
    with pytest.raises(Fail, match="cannot read compiled data"):
        _run(str(out))


def test_unreadable_metadata_fails() -> None:
    model = onnx.load_from_string(_model())
    helper.set_model_props(model, {ARTIFACT_KEY: "{not json"})
    with pytest.raises(Fail, match="metadata cannot be read"):
        turnout.InferenceSession(model.SerializeToString(), _options())


def test_a_provider_the_session_lacks_is_a_warning() -> None:
    data = ModelCompiler(_options(), _model()).compile_to_bytes()
    with pytest.warns(UserWarning, match=f"compiled for {BLOB}, which this session does not use"):
        sess = turnout.InferenceSession(data, providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(sess.run(None, {"x": X})[0], np.maximum(-X, 0))


def test_flags(tmp_path: Path) -> None:
    out = tmp_path / "m_ctx.onnx"
    out.write_bytes(b"")
    with pytest.raises(Fail, match="already exists"):
        ModelCompiler(
            _options(), _model(), flags=OrtCompileApiFlags.ERROR_IF_OUTPUT_FILE_EXISTS
        ).compile_to_file(out)
    cpu_only = turnout.SessionOptions()
    cpu_only.add_session_config_entry("session.turnout.cpu_numpy_only", "1")
    with pytest.raises(Fail, match="no provider of the session compiled anything"):
        ModelCompiler(
            cpu_only, _model(), flags=OrtCompileApiFlags.ERROR_IF_NO_NODES_COMPILED
        ).compile_to_bytes()
    with pytest.raises(InvalidArgument, match="output path is needed"):
        ModelCompiler(_options(), _model()).compile_to_file()


def test_default_output_path_and_stream(tmp_path: Path) -> None:
    src = tmp_path / "net.onnx"
    src.write_bytes(_model())
    ModelCompiler(_options(), str(src), embed_compiled_data_into_model=True).compile_to_file()
    assert (tmp_path / "net_ctx.onnx").is_file()
    chunks: list[bytes] = []
    ModelCompiler(_options(), str(src)).compile_to_stream(chunks.append)
    np.testing.assert_array_equal(_run(b"".join(chunks)), np.maximum(-X, 0))
