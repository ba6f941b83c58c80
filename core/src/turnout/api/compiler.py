"""Compiled artifacts: a model saved with what its providers compiled, so loading it compiles
nothing (onnxruntime's `ModelCompiler` and EPContext models, in turnout's form).

A compiled model is the optimized graph (for the providers it was compiled for) with, in its
metadata, one entry per provider: its name, its compatibility string (provider version,
device, the options that shape its code) and its compiled blobs, embedded (base64) or in a
side file next to the model (`<model>.<provider>.ctx`, a zip). A session that loads it checks
each compatibility string against the provider it created: any difference is a `Fail` that
names the provider and both strings, so a stale artifact never runs wrong. It then hands the
blobs to the provider (`ExecutionProvider.import_compiled`) and skips the graph optimizer (the
graph already is the optimized one).
"""

from __future__ import annotations

import base64
import enum
import hashlib
import io
import json
import os
import warnings
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx

from turnout._version import __version__
from turnout.graph.errors import Fail, InvalidArgument
from turnout.sdk.provider import ExecutionProvider

__all__ = [
    "ARTIFACT_KEY",
    "CompiledArtifact",
    "ModelCompiler",
    "OrtCompileApiFlags",
    "read_artifact",
]

ARTIFACT_KEY = "turnout.compiled"
_BLOB_KEY = "turnout.compiled.blobs."  # + provider name: base64 zip, when embedded
_FORMAT = 1


class OrtCompileApiFlags(enum.IntFlag):
    NONE = 0
    ERROR_IF_NO_NODES_COMPILED = 1
    ERROR_IF_OUTPUT_FILE_EXISTS = 2


@dataclass(frozen=True)
class CompiledEntry:
    """One provider's part of an artifact."""

    provider: str
    compatibility: str
    digest: str  # sha256 of the blob archive
    side_file: str | None  # relative to the model, when not embedded


@dataclass(frozen=True)
class CompiledArtifact:
    """What a compiled model's metadata says, and where its blobs are."""

    entries: tuple[CompiledEntry, ...]
    turnout_version: str
    model: onnx.ModelProto
    base_dir: Path | None

    def install(self, providers: Sequence[ExecutionProvider], label: str) -> None:
        """Check every entry against the session's providers and hand each its blobs. A
        provider whose compatibility string changed is a `Fail` saying what to do; one the
        session does not use gets a warning (the optimized graph runs on the others)."""
        by_name = {p.name: p for p in providers}
        used = [e for e in self.entries if e.provider in by_name]
        for entry in self.entries:
            if entry.provider not in by_name:  # the graph still runs; its blobs are unused
                warnings.warn(
                    f"{label}: compiled for {entry.provider}, which this session does not use "
                    f"(its providers: {', '.join(by_name)}); its compiled data is ignored",
                    UserWarning,
                    stacklevel=4,
                )
        for entry in used:
            now = by_name[entry.provider].compatibility_info()
            if now != entry.compatibility:
                raise Fail(
                    f"{label}: the compiled data of {entry.provider} is stale: it was compiled "
                    f"for {entry.compatibility!r}, this session's provider is {now!r}; compile "
                    "the model again (turnout compile)"
                )
        for entry in used:
            by_name[entry.provider].import_compiled(self._blobs(entry, label))

    def _blobs(self, entry: CompiledEntry, label: str) -> dict[str, bytes]:
        if entry.side_file is None:
            raw = _embedded(self.model, entry.provider)
            if raw is None:
                raise Fail(f"{label}: the embedded compiled data of {entry.provider} is missing")
        else:
            if self.base_dir is None:
                raise Fail(
                    f"{label}: the compiled data of {entry.provider} is in a side file "
                    f"({entry.side_file}), which a model loaded from bytes cannot find; "
                    "compile with embed_compiled_data_into_model=True"
                )
            path = (self.base_dir / entry.side_file).resolve()
            if path.parent != self.base_dir.resolve():
                raise Fail(f"{label}: side file {entry.side_file!r} escapes the model's folder")
            try:
                raw = path.read_bytes()
            except OSError as e:
                raise Fail(f"{label}: cannot read compiled data {path}: {e}") from None
        if hashlib.sha256(raw).hexdigest() != entry.digest:
            raise Fail(f"{label}: the compiled data of {entry.provider} is corrupted (checksum)")
        return _unzip(raw)


def read_artifact(model: onnx.ModelProto, base_dir: Path | None) -> CompiledArtifact | None:
    """The artifact a compiled model describes, or None for a plain model."""
    raw = next((p.value for p in model.metadata_props if p.key == ARTIFACT_KEY), None)
    if raw is None:
        return None
    try:
        meta = json.loads(raw)
        if meta.get("format") != _FORMAT:
            raise ValueError(f"format {meta.get('format')!r}, this turnout reads {_FORMAT}")
        entries = tuple(
            CompiledEntry(e["provider"], e["compatibility"], e["digest"], e.get("side_file"))
            for e in meta["providers"]
        )
    except (ValueError, KeyError, TypeError) as e:
        raise Fail(f"the model's {ARTIFACT_KEY} metadata cannot be read: {e}") from None
    return CompiledArtifact(entries, str(meta.get("turnout", "")), model, base_dir)


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
        if get_initializer_location_func is not None:
            raise InvalidArgument(
                "ModelCompiler: get_initializer_location_func is not supported by turnout; "
                "use external_initializers_file_path"
            )
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
        _describe(model, blobs, compat, embed=self._embed, stem=path.name)
        for provider, archive in side.items():
            (path.parent / _side_name(path.name, provider)).write_bytes(archive)
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
        _describe(model, blobs, compat, embed=True, stem="")
        data: bytes = model.SerializeToString()
        return data

    def compile_to_stream(self, write_function: Callable[[bytes], Any]) -> None:
        write_function(self.compile_to_bytes())

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

        opts = self._options if self._options is not None else SessionOptions()
        if self._level is not None:
            opts.graph_optimization_level = GraphOptimizationLevel(int(self._level))
        source = self._source if isinstance(self._source, bytes) else os.fspath(self._source)
        session = InferenceSession(source, opts)
        blobs: dict[str, bytes] = {}
        for provider in session._providers:
            exported = provider.export_compiled()
            if exported:
                blobs[provider.name] = _zip(exported)
        if not blobs and self._flags & OrtCompileApiFlags.ERROR_IF_NO_NODES_COMPILED:
            raise Fail(
                "ModelCompiler: no provider of the session compiled anything "
                f"(providers: {', '.join(p.name for p in session._providers)})"
            )
        model = onnx.ModelProto()
        model.CopyFrom(session._model)
        compat = {p.name: p.compatibility_info() for p in session._providers}
        return model, blobs, compat


def _describe(
    model: onnx.ModelProto,
    blobs: Mapping[str, bytes],
    compat: Mapping[str, str],
    *,
    embed: bool,
    stem: str,
) -> None:
    """Write the artifact's metadata (and embedded blobs) into the model."""
    entries = []
    for provider, archive in blobs.items():
        entries.append(
            {
                "provider": provider,
                "compatibility": compat.get(provider, ""),
                "digest": hashlib.sha256(archive).hexdigest(),
                "side_file": None if embed else _side_name(stem, provider),
            }
        )
    kept = {p.key: p.value for p in model.metadata_props if not p.key.startswith(ARTIFACT_KEY)}
    meta = {"format": _FORMAT, "turnout": __version__, "providers": entries}
    kept[ARTIFACT_KEY] = json.dumps(meta, sort_keys=True)
    if embed:
        for provider, archive in blobs.items():
            kept[_BLOB_KEY + provider] = base64.b64encode(archive).decode("ascii")
    onnx.helper.set_model_props(model, kept)


def _side_name(model_name: str, provider: str) -> str:
    return f"{model_name}.{provider}.ctx"


def _embedded(model: onnx.ModelProto, provider: str) -> bytes | None:
    for p in model.metadata_props:
        if p.key == _BLOB_KEY + provider:
            return base64.b64decode(p.value)
    return None


def _zip(files: Mapping[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            z.writestr(info, files[name], compress_type=zipfile.ZIP_DEFLATED)
    return buf.getvalue()


def _unzip(raw: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(raw)) as z:
        return {name: z.read(name) for name in z.namelist()}
