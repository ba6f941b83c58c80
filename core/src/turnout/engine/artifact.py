"""The compiled-model format: a model saved with what its providers compiled.

A compiled model is the optimized graph (for the providers it was compiled for) with, in its
metadata, one entry per provider: its name, its compatibility string (provider version,
device, the options that shape its code) and its compiled blobs, embedded (base64) or in a
side file next to the model (`<model>.<provider>.ctx`, a zip). The compatibility strings are
also written under onnxruntime's keys (`ep_compatibility_info.<provider>`), where its
`get_compatibility_info_from_model` looks for them. A session that loads it checks
each compatibility string against the provider it created: any difference is a `Fail` that
names the provider and both strings, so a stale artifact never runs wrong. It then hands the
blobs to the provider (`ExecutionProvider.import_compiled`) and skips the graph optimizer (the
graph already is the optimized one). `turnout.api.compiler.ModelCompiler` writes them.
"""

from __future__ import annotations

import base64
import io
import json
import warnings
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import onnx

from turnout._version import __version__
from turnout.graph.errors import Fail
from turnout.sdk.provider import ExecutionProvider

__all__ = [
    "ARTIFACT_KEY",
    "BLOB_KEY",
    "EP_COMPAT_KEY",
    "FORMAT",
    "CompiledArtifact",
    "CompiledEntry",
    "describe_artifact",
    "read_artifact",
    "side_file_name",
    "zip_files",
]

ARTIFACT_KEY = "turnout.compiled"
BLOB_KEY = "turnout.compiled.blobs."  # + provider name: base64 zip, when embedded
EP_COMPAT_KEY = "ep_compatibility_info."  # + provider name: onnxruntime's key
FORMAT = 1


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
    read_data: Callable[[str], bytes] | None = None
    """Where side files come from when given (the application's EPContext data read
    callback, called with the side file's name) instead of the model's folder."""

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
        elif self.read_data is not None:
            raw = self.read_data(entry.side_file)
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
        import hashlib  # here: OpenSSL's load (2-3 ms) is for compiled models only

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
        if meta.get("format") != FORMAT:
            raise ValueError(f"format {meta.get('format')!r}, this turnout reads {FORMAT}")
        entries = tuple(
            CompiledEntry(e["provider"], e["compatibility"], e["digest"], e.get("side_file"))
            for e in meta["providers"]
        )
    except (ValueError, KeyError, TypeError) as e:
        raise Fail(f"the model's {ARTIFACT_KEY} metadata cannot be read: {e}") from None
    return CompiledArtifact(entries, str(meta.get("turnout", "")), model, base_dir)


def describe_artifact(
    model: onnx.ModelProto,
    blobs: Mapping[str, bytes],
    compat: Mapping[str, str],
    *,
    embed: bool,
    stem: str,
) -> None:
    """Write the artifact's metadata (and embedded blobs) into the model."""
    import hashlib

    entries = []
    for provider, archive in blobs.items():
        entries.append(
            {
                "provider": provider,
                "compatibility": compat.get(provider, ""),
                "digest": hashlib.sha256(archive).hexdigest(),
                "side_file": None if embed else side_file_name(stem, provider),
            }
        )
    ours = (ARTIFACT_KEY, EP_COMPAT_KEY)
    kept = {p.key: p.value for p in model.metadata_props if not p.key.startswith(ours)}
    meta = {"format": FORMAT, "turnout": __version__, "providers": entries}
    kept[ARTIFACT_KEY] = json.dumps(meta, sort_keys=True)
    for provider, info in compat.items():
        if info:
            kept[EP_COMPAT_KEY + provider] = info
    if embed:
        for provider, archive in blobs.items():
            kept[BLOB_KEY + provider] = base64.b64encode(archive).decode("ascii")
    onnx.helper.set_model_props(model, kept)


def side_file_name(model_name: str, provider: str) -> str:
    return f"{model_name}.{provider}.ctx"


def _embedded(model: onnx.ModelProto, provider: str) -> bytes | None:
    for p in model.metadata_props:
        if p.key == BLOB_KEY + provider:
            return base64.b64decode(p.value)
    return None


def zip_files(files: Mapping[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            z.writestr(info, files[name], compress_type=zipfile.ZIP_DEFLATED)
    return buf.getvalue()


def _unzip(raw: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(raw)) as z:
        return {name: z.read(name) for name in z.namelist()}
