"""Compiling a model: onnxruntime's `ModelCompiler` (EPContext models, in turnout's form).

It builds a session for the chosen providers and writes the optimized graph with what they
compiled, in the format of `turnout.engine.artifact` (which sessions read back, compiling
nothing).
"""

from __future__ import annotations

import copy
import enum
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import onnx
from onnx import numpy_helper
from onnx.external_data_helper import set_external_data

from turnout.api.ep_context import (
    DISABLE_MODEL_COMPILE_KEY,
    OrtEpContextData,
    OrtExternalInitializerInfo,
    make_get_initializer_location_func_wrapper,
    write_with,
)
from turnout.engine.artifact import (
    ARTIFACT_KEY,
    CompiledArtifact,
    describe_artifact,
    read_artifact,
    side_file_name,
    zip_files,
)
from turnout.graph.errors import Fail, InvalidArgument

__all__ = [
    "ARTIFACT_KEY",
    "CompiledArtifact",
    "ModelCompiler",
    "OrtCompileApiFlags",
    "read_artifact",
]


class OrtCompileApiFlags(enum.IntFlag):
    NONE = 0
    ERROR_IF_NO_NODES_COMPILED = 1
    ERROR_IF_OUTPUT_FILE_EXISTS = 2


class ModelCompiler:
    """onnxruntime's `ModelCompiler`: compile a model for the providers in `sess_options`
    (`add_provider`, `add_provider_for_devices` or a selection policy; the CPU request
    otherwise) and write the compiled model."""

    def __init__(
        self,
        sess_options: Any,
        input_model_path_or_bytes: str | os.PathLike[str] | bytes,
        embed_compiled_data_into_model: bool = False,
        external_initializers_file_path: str | os.PathLike[str] | None = None,
        external_initializers_size_threshold: int = 1024,
        flags: int = OrtCompileApiFlags.NONE,
        graph_optimization_level: Any = None,
        get_initializer_location_func: Callable[..., Any] | None = None,
    ) -> None:
        if get_initializer_location_func is not None and external_initializers_file_path:
            raise ValueError(
                "Cannot initialize ModelCompiler with both `external_initializers_file_path` "
                "and `get_initializer_location_func`"
            )
        self._locate = (
            None
            if get_initializer_location_func is None
            else make_get_initializer_location_func_wrapper(get_initializer_location_func)
        )
        self._write_data: Callable[[str, bytes], None] | None = None
        self._options = sess_options
        self._source = input_model_path_or_bytes
        self._embed = bool(embed_compiled_data_into_model)
        self._external = external_initializers_file_path
        self._threshold = int(external_initializers_size_threshold)
        self._flags = OrtCompileApiFlags(int(flags))
        self._level = graph_optimization_level

    def compile_to_file(self, output_model_path: str | os.PathLike[str] | None = None) -> None:
        """Write the compiled model (default: the input path with `_ctx.onnx`); blobs go into
        side files next to it unless embedding was asked for."""
        path = Path(output_model_path) if output_model_path else self._default_output()
        if self._flags & OrtCompileApiFlags.ERROR_IF_OUTPUT_FILE_EXISTS and path.exists():
            raise Fail(f"ModelCompiler: output file {path} already exists")
        model, blobs, compat = self._compile()
        side = {} if self._embed else blobs
        describe_artifact(model, blobs, compat, embed=self._embed, stem=path.name)
        for provider, archive in side.items():
            name = side_file_name(path.name, provider)
            if self._write_data is not None:
                self._write_data(name, archive)
            else:
                (path.parent / name).write_bytes(archive)
        if self._external:
            onnx.save(
                model,
                path,
                save_as_external_data=True,
                all_tensors_to_one_file=True,
                location=os.fspath(self._external),
                size_threshold=self._threshold,
            )
        else:
            onnx.save(model, path)

    def compile_to_bytes(self) -> bytes:
        """The compiled model as bytes, its blobs embedded (bytes have no folder for side
        files)."""
        model, blobs, compat = self._compile()
        describe_artifact(model, blobs, compat, embed=True, stem="")
        data: bytes = model.SerializeToString()
        return data

    def compile_to_stream(self, write_function: Callable[[bytes], Any]) -> None:
        write_function(self.compile_to_bytes())

    def set_ep_context_data_write_func(
        self, write_func: Callable[[str, OrtEpContextData], Any]
    ) -> None:
        """Hand each side file to `write_func(name, data)` instead of writing it next to the
        model (`turnout.api.ep_context`); a session reads them back through
        `SessionOptions.set_ep_context_data_read_func`."""
        if not callable(write_func):
            raise InvalidArgument("set_ep_context_data_write_func: write_func must be callable")
        self._write_data = write_with(write_func)

    def clear_ep_context_data_write_func(self) -> None:
        self._write_data = None

    def _default_output(self) -> Path:
        if isinstance(self._source, (bytes, bytearray)):
            raise InvalidArgument(
                "ModelCompiler: an output path is needed when the input model is bytes"
            )
        src = Path(self._source)
        return src.with_name(src.stem + "_ctx.onnx")

    def _compile(self) -> tuple[onnx.ModelProto, dict[str, bytes], dict[str, str]]:
        """Create a session (that compiles), then take its optimized model and each
        provider's compiled blobs."""
        from turnout.api.options import GraphOptimizationLevel, SessionOptions
        from turnout.api.session import InferenceSession

        opts = copy.copy(self._options) if self._options is not None else SessionOptions()
        # compiling is what the compiler is for, whatever the options say about sessions
        opts._config = {k: v for k, v in opts._config.items() if k != DISABLE_MODEL_COMPILE_KEY}
        if self._level is not None:
            opts.graph_optimization_level = GraphOptimizationLevel(int(self._level))
        source = self._source if isinstance(self._source, bytes) else os.fspath(self._source)
        session = InferenceSession(source, opts)
        session._engine.adopt_compiled_tier()  # the host providers' kernels are what it exports
        blobs: dict[str, bytes] = {}
        for provider in session._engine.providers:
            exported = provider.export_compiled()
            if exported:
                blobs[provider.name] = zip_files(exported)
        if not blobs and self._flags & OrtCompileApiFlags.ERROR_IF_NO_NODES_COMPILED:
            raise Fail(
                "ModelCompiler: no provider of the session compiled anything "
                f"(providers: {', '.join(p.name for p in session._engine.providers)})"
            )
        model = session._engine.full_model()  # a copy, with the weights
        compat = {p.name: p.compatibility_info() for p in session._engine.providers}
        if self._locate is not None:
            self._place_initializers(model)
        return model, blobs, compat

    def _place_initializers(self, model: onnx.ModelProto) -> None:
        """Ask the application's location function about each initializer: None keeps it in
        the model; an `OrtExternalInitializerInfo` makes the model refer to that file range
        (the application wrote the data there). `external_info` is where the input model kept
        it, for a model read from a file with external data."""
        assert self._locate is not None
        before = self._external_locations()
        for tensor in model.graph.initializer:
            value = numpy_helper.to_array(tensor)
            where = self._locate(tensor.name, value, before.get(tensor.name))
            if where is None:
                continue
            tensor.CopyFrom(numpy_helper.from_array(value, tensor.name))
            set_external_data(tensor, where.filepath, where.file_offset, where.byte_size)
            tensor.ClearField("raw_data")
            tensor.data_location = onnx.TensorProto.EXTERNAL

    def _external_locations(self) -> dict[str, OrtExternalInitializerInfo]:
        if isinstance(self._source, (bytes, bytearray)):
            return {}
        source = onnx.load(os.fspath(self._source), load_external_data=False)
        out = {}
        for tensor in source.graph.initializer:
            if tensor.data_location == onnx.TensorProto.EXTERNAL:
                info = {e.key: e.value for e in tensor.external_data}
                out[tensor.name] = OrtExternalInitializerInfo(
                    info.get("location", ""),
                    int(info.get("offset", 0)),
                    int(info.get("length", 0)),
                )
        return out
