"""Loading: bytes, path or ModelProto in; a checked ModelProto with external data resolved out.

External data is read only from inside the model's own folder: a location that escapes it (an
absolute path, `..`, a symlink pointing out) is refused, because a model file is untrusted input.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import onnx
import onnx.inliner
from onnx import ModelProto, TensorProto
from onnx.external_data_helper import ExternalDataInfo

from .errors import InvalidArgument, InvalidGraph, InvalidProtobuf, NoModel, NoSuchFile

__all__ = ["ModelSource", "load_model", "model_label"]

ModelSource = str | os.PathLike[str] | bytes | ModelProto

_MAX_OPSET = {
    "": onnx.defs.onnx_opset_version(),
    "ai.onnx.ml": max(
        (
            s.since_version
            for s in onnx.defs.get_all_schemas_with_history()
            if s.domain == "ai.onnx.ml"
        ),
        default=5,
    ),
    "ai.onnx.preview.training": 1,
    "ai.onnx.preview": 1,
    "ai.turnout": 1,  # turnout's own fused ops, emitted by the graph optimizer
}


def model_label(source: Any) -> str:
    """How errors name a model: its path, or a description of the in-memory form."""
    if isinstance(source, (str, os.PathLike)):
        return str(source)
    if isinstance(source, (bytes, bytearray)):
        return f"<{len(source)} bytes>"
    if isinstance(source, ModelProto):
        return f"<ModelProto {source.graph.name!r}>"
    return f"<{type(source).__name__}>"


def load_model(source: ModelSource, custom_domains: frozenset[str] = frozenset()) -> ModelProto:
    """Parse, resolve external data, inline local functions, check opsets and the graph."""
    label = model_label(source)
    base_dir: Path | None = None
    if source is None:
        raise NoModel("no model given")
    if isinstance(source, ModelProto):
        model = ModelProto()
        model.CopyFrom(source)
    elif isinstance(source, (bytes, bytearray, memoryview)):
        model = _parse(bytes(source), label)
    elif isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if not path.is_file():
            raise NoSuchFile(f"model file not found: {path}")
        model = _parse(path.read_bytes(), label)
        base_dir = path.resolve().parent
    else:
        raise InvalidArgument(
            f"model must be a path, bytes or onnx.ModelProto, not {type(source).__name__}"
        )
    _load_external_data(model, base_dir, label)
    _check_opsets(model, label, custom_domains)
    if model.functions:
        try:
            model = onnx.inliner.inline_local_functions(model)
        except Exception as e:
            raise InvalidGraph(f"{label}: cannot expand model-local functions: {e}") from e
    _check_graph(model, label)
    return model


def _parse(data: bytes, label: str) -> ModelProto:
    model = ModelProto()
    try:
        model.ParseFromString(data)
    except Exception as e:
        raise InvalidProtobuf(f"{label}: not a valid ONNX ModelProto: {e}") from e
    if not model.HasField("graph"):
        raise InvalidProtobuf(f"{label}: protobuf parsed but holds no graph (not an ONNX model?)")
    return model


def _all_tensors(model: ModelProto) -> list[TensorProto]:
    from onnx.external_data_helper import _get_all_tensors

    return list(_get_all_tensors(model))


def _load_external_data(model: ModelProto, base_dir: Path | None, label: str) -> None:
    for tensor in _all_tensors(model):
        if tensor.data_location != TensorProto.EXTERNAL:
            continue
        info = ExternalDataInfo(tensor)
        if base_dir is None:
            raise InvalidArgument(
                f"{label}: tensor {tensor.name!r} has external data ({info.location!r}); "
                "load the model from its file path so the data can be found beside it"
            )
        target = _safe_location(base_dir, info.location, tensor.name, label)
        with open(target, "rb") as f:
            if info.offset:
                f.seek(int(info.offset))
            data = f.read(int(info.length)) if info.length else f.read()
        tensor.raw_data = data
        tensor.data_location = TensorProto.DEFAULT
        del tensor.external_data[:]


def _safe_location(base_dir: Path, location: str, tensor: str, label: str) -> Path:
    if not location or os.path.isabs(location):
        raise InvalidGraph(
            f"{label}: external data of {tensor!r} at {location!r} escapes the model's folder"
        )
    target = (base_dir / location).resolve()
    if os.path.commonpath([str(target), str(base_dir)]) != str(base_dir):
        raise InvalidGraph(
            f"{label}: external data of {tensor!r} at {location!r} escapes the model's folder"
        )
    if not target.is_file():
        raise NoSuchFile(f"{label}: external data file of {tensor!r} not found: {location}")
    return target


def _check_opsets(model: ModelProto, label: str, custom_domains: frozenset[str]) -> None:
    local = {f.domain for f in model.functions}
    for op in model.opset_import:
        domain = "" if op.domain == "ai.onnx" else op.domain
        if domain in _MAX_OPSET:
            top = _MAX_OPSET[domain]
            if not 1 <= op.version <= top:
                raise InvalidGraph(
                    f"{label}: opset {op.version} of domain {domain or 'ai.onnx'!r} is not "
                    f"supported (supported: 1..{top})"
                )
        elif domain not in local and domain not in custom_domains:
            used = [n for n in model.graph.node if n.domain == op.domain]
            if used:
                raise InvalidGraph(
                    f"{label}: unknown operator domain {domain!r} used by node "
                    f"{used[0].name or used[0].op_type!r} ({used[0].op_type}); no installed "
                    "provider or plugin defines it"
                )


def _check_graph(model: ModelProto, label: str) -> None:
    """onnx.checker, except that untyped graph outputs are accepted (as onnxruntime does).

    Hand-built and old (IR 3) models often declare outputs without a type or shape; the full
    checker refuses them, so such models get the per-node check instead.
    """
    try:
        onnx.checker.check_model(model)
        return
    except onnx.checker.ValidationError as e:
        message = str(e)
        if not any(m in message for m in _UNTYPED_VALUE_INFO):
            raise InvalidGraph(f"{label}: invalid graph: {_first_line(message)}") from e
    except ValueError as e:  # models over 2 GB: the checker refuses them, run without it
        if "2GB" in str(e):
            return
        raise InvalidGraph(f"{label}: invalid graph: {e}") from e
    ctx = onnx.checker.C.CheckerContext()
    ctx.ir_version = model.ir_version
    ctx.opset_imports = {o.domain: o.version for o in model.opset_import}
    for node in model.graph.node:
        try:
            onnx.checker.check_node(node, ctx)
        except onnx.checker.ValidationError as e:
            where = node.name or node.op_type
            raise InvalidGraph(f"{label}: invalid node {where!r}: {_first_line(str(e))}") from e


_UNTYPED_VALUE_INFO = (
    "Field 'type' of 'value_info' is required",
    "Field 'shape' of 'type' is required",
    "Field 'elem_type' of 'type' is required",
)


def _first_line(message: str) -> str:
    return message.strip().splitlines()[0] if message.strip() else "unknown reason"


def infer_shapes(model: ModelProto) -> ModelProto:
    """Shape/type inference where onnx can do it; a model it cannot infer still runs."""
    try:
        return onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception:
        return model
