"""Loading: bytes, path or ModelProto in; a checked ModelProto with external data resolved out.

External data is read only from inside the model's own folder: a location that escapes it (an
absolute path, `..`, a symlink pointing out) is refused, because a model file is untrusted input.
"""

from __future__ import annotations

import math
import mmap
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx.inliner
from onnx import ModelProto, TensorProto
from onnx.external_data_helper import ExternalDataInfo

from turnout.graph import contrib
from turnout.graph.dtypes import np_dtype
from turnout.graph.errors import (
    Fail,
    InvalidArgument,
    InvalidGraph,
    InvalidProtobuf,
    NoModel,
    NoSuchFile,
)
from turnout.graph.light_copy import copy_fields, light_copy
from turnout.graph.shape_inference import SHAPE_DATA_MAX_ELEMENTS, infer_with_bounded_data_prop
from turnout.graph.structure import check_structure, normalize, suffix_repeated_names
from turnout.graph.tensors import (
    FIXED_WIDTH_TYPES,
    TYPED_FIELDS,
    all_tensors,
    check_tensor,
    from_array,
    native_raw,
    raw_array,
)
from turnout.graph.validate import check_types

__all__ = [
    "ALLOW_UNKNOWN_DOMAINS_KEY",
    "ModelSource",
    "SuppliedData",
    "allow_unknown_domains",
    "infer_shapes",
    "known_domain",
    "light_copy",
    "load_model",
    "model_label",
    "read_model",
    "validate_model",
    "without_decoded_data",
]

ModelSource = str | os.PathLike[str] | bytes | ModelProto

_MAX_OPSET = {
    "": onnx.defs.onnx_opset_version(),
    # onnx's registry knows its domains' opset ranges (walking every schema to find the
    # newest ai.onnx.ml one cost 20-70 ms of each process's first session)
    "ai.onnx.ml": onnx.defs.onnx_ml_opset_version(),
    "ai.onnx.preview.training": 1,
    "ai.onnx.preview": 1,
    "ai.turnout": 1,  # turnout's own fused ops, emitted by the graph optimizer
    contrib.DOMAIN: contrib.OPSET,  # onnxruntime's contrib ops (turnout.graph.contrib)
    "com.microsoft.nchwc": 1,  # onnxruntime's blocked-layout ops (contrib/ops/nchwc.py)
}

ALLOW_UNKNOWN_DOMAINS_KEY = "session.turnout.allow_unknown_domains"
"""Session config entry: "1" loads a model that uses an operator domain nobody defines; such a
node then fails when it runs (not at load), naming itself."""


def allow_unknown_domains(config: Mapping[str, str]) -> bool:
    """The value of `ALLOW_UNKNOWN_DOMAINS_KEY` in a session's config entries (default off)."""
    raw = config.get(ALLOW_UNKNOWN_DOMAINS_KEY, "0")
    if raw not in ("0", "1"):
        raise InvalidArgument(
            f"session config entry {ALLOW_UNKNOWN_DOMAINS_KEY} must be 0 or 1, not {raw!r}"
        )
    return raw == "1"


def known_domain(domain: str) -> bool:
    """Whether turnout defines the operator domain (ai.onnx, ai.onnx.ml, com.microsoft, ...)."""
    return ("" if domain == "ai.onnx" else domain) in _MAX_OPSET


def model_label(source: Any) -> str:
    """How errors name a model: its path, or a description of the in-memory form."""
    if isinstance(source, (str, os.PathLike)):
        return str(source)
    if isinstance(source, (bytes, bytearray)):
        return f"<{len(source)} bytes>"
    if isinstance(source, ModelProto):
        return f"<ModelProto {source.graph.name!r}>"
    return f"<{type(source).__name__}>"


@dataclass(frozen=True)
class SuppliedData:
    """External data the caller hands over instead of files (onnxruntime's
    `add_external_initializers` and `add_external_initializers_from_files_in_memory`): whole
    external initializers by name, and in-memory files by the location tensors name."""

    initializers: Mapping[str, np.ndarray] = field(default_factory=dict)
    files: Mapping[str, bytes | memoryview] = field(default_factory=dict)


def load_model(
    source: ModelSource,
    custom_domains: frozenset[str] = frozenset(),
    supplied: SuppliedData | None = None,
    allow_unknown: bool = False,
) -> ModelProto:
    """`read_model`, then `validate_model`: a model a session can optimize."""
    model = read_model(source, custom_domains, supplied, allow_unknown)
    validate_model(model, model_label(source))
    return model


def read_model(
    source: ModelSource,
    custom_domains: frozenset[str] = frozenset(),
    supplied: SuppliedData | None = None,
    allow_unknown: bool = False,
    mapped: dict[str, np.ndarray] | None = None,
) -> ModelProto:
    """Parse, resolve external data, check tensors, structure and opsets, inline local
    functions: the model as one graph of known operators (`validate_model` checks it).

    `allow_unknown`: accept operator domains nobody defines (`ALLOW_UNKNOWN_DOMAINS_KEY`).
    `mapped`, given, receives the big top-level initializers whose external file holds them
    as they are, as read-only arrays over the memory-mapped file, by name; their tensors keep
    no bytes (pass it to `validate_model` as `decoded`, and on to the optimizer).
    """
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
    if supplied is not None:
        _replace_initializers(model, supplied.initializers)
    if mapped is not None and base_dir is not None and not (supplied and supplied.files):
        _map_external_data(model, base_dir, label, mapped)
    _load_external_data(model, base_dir, label, supplied.files if supplied else {})
    for tensor in all_tensors(model):
        if mapped and tensor.name in mapped and not _holds_values(tensor):
            continue  # mapped: checked as it was mapped
        check_tensor(tensor, label)
    normalize(model)
    check_structure(model, label)
    suffix_repeated_names(model)
    _check_opsets(model, label, custom_domains, allow_unknown)
    if model.functions:
        try:
            model = onnx.inliner.inline_local_functions(model)
        except Exception as e:
            raise InvalidGraph(f"{label}: cannot expand model-local functions: {e}") from e
    return model


def validate_model(
    model: ModelProto, label: str, decoded: dict[str, np.ndarray] | None = None
) -> None:
    """The graph is valid ONNX (onnx.checker, as onnxruntime applies it) and its value types
    agree with every node's schema.

    `decoded`, given, receives the big raw top-level initializers as arrays (`to_array`'s),
    by name: the checks read their bytes once anyway, and the optimizer starts from these.
    """
    _check_graph(model, label, decoded)
    check_types(model, label)


def _parse(data: bytes, label: str) -> ModelProto:
    model = ModelProto()
    try:
        model.ParseFromString(data)
    except Exception as e:
        raise InvalidProtobuf(f"{label}: not a valid ONNX ModelProto: {e}") from e
    if not model.HasField("graph"):
        raise InvalidProtobuf(f"{label}: protobuf parsed but holds no graph (not an ONNX model?)")
    return model


def _replace_initializers(model: ModelProto, by_name: Mapping[str, np.ndarray]) -> None:
    """Each named external initializer takes the caller's array instead of its file's bytes."""
    inits = {t.name: t for t in model.graph.initializer}
    for name, value in by_name.items():
        tensor = inits.get(name)
        if tensor is None:
            raise Fail(f"Failed to find existing initializer with name {name}.")
        if tensor.data_location != TensorProto.EXTERNAL:
            raise Fail(f"Trying to replace non-external initializer {name!r} with external data")
        tensor.CopyFrom(from_array(np.ascontiguousarray(value), name))


def _load_external_data(
    model: ModelProto,
    base_dir: Path | None,
    label: str,
    files: Mapping[str, bytes | memoryview],
) -> None:
    """Read every external tensor (sparse values and indices too) from `files`, the caller's
    in-memory files, when given, else from inside `base_dir`."""
    for tensor in all_tensors(model):
        if tensor.data_location != TensorProto.EXTERNAL:
            continue
        try:
            info = ExternalDataInfo(tensor)
        except ValueError as e:  # offset/length not a non-negative integer
            raise InvalidGraph(f"{label}: external data of {tensor.name!r}: {e}") from None
        if files:
            data = files.get(info.location)
            if data is None:
                raise Fail(
                    f"External file: {info.location} not found from the table user provided."
                )
            offset, length = _byte_range(info, len(data), tensor.name)
            tensor.raw_data = bytes(data[offset : offset + length])
        elif base_dir is None:
            raise InvalidArgument(
                f"{label}: tensor {tensor.name!r} has external data ({info.location!r}); "
                "load the model from its file path so the data can be found beside it"
            )
        else:
            target = _safe_location(base_dir, info.location, tensor.name, label)
            offset, length = _byte_range(info, target.stat().st_size, tensor.name)
            with open(target, "rb") as f:
                f.seek(offset)
                tensor.raw_data = f.read(length)
        tensor.data_location = TensorProto.DEFAULT
        del tensor.external_data[:]


_MAX_MAPPED_FILES = 64
"""External files mapped per model: each map holds a file descriptor, and an exporter may write
one file per tensor (thousands); the tensors of further files are read into their arrays."""


def _map_external_data(
    model: ModelProto, base_dir: Path, label: str, mapped: dict[str, np.ndarray]
) -> None:
    """Each big top-level initializer stored in a file inside `base_dir` as its raw bytes,
    aligned for its type, becomes a read-only array over the file mapped into memory (one
    map per file, up to `_MAX_MAPPED_FILES`) in `mapped`; its tensor is left without data.
    Reading it into the proto and decoding it from there would hold it twice until the
    proto goes; mapped, its pages are the page cache's. The others are left to
    `_load_external_data`, which also reports what is wrong with them."""
    inits = model.graph.initializer
    if len({t.name for t in inits}) != len(inits):
        return  # names that repeat: the checks refuse the model with the bytes read
    files: dict[Path, mmap.mmap] = {}
    for t in inits:
        if t.data_location != TensorProto.EXTERNAL or not native_raw(t):
            continue
        if t.HasField("segment") or any(d <= 0 for d in t.dims):
            continue
        itemsize = np_dtype(t.data_type).itemsize
        expected = math.prod(t.dims) * itemsize
        try:
            info = ExternalDataInfo(t)
        except ValueError:
            continue  # _load_external_data says what is wrong
        target = _safe_location(base_dir, info.location, t.name, label)
        offset, length = _byte_range(info, target.stat().st_size, t.name)
        if expected <= _BIG_BYTES or length != expected or offset % itemsize:
            continue
        if target not in files and len(files) < _MAX_MAPPED_FILES:
            with open(target, "rb") as f:
                files[target] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        dtype, count = np_dtype(t.data_type), math.prod(t.dims)
        if target in files:
            values = np.frombuffer(files[target], dtype, count, offset)
        else:  # read straight into its array (a map holds a file descriptor)
            values = np.fromfile(target, dtype, count, offset=offset)
            values.flags.writeable = False  # as the decoded and the mapped ones
        mapped[t.name] = values.reshape(tuple(t.dims))
        t.data_location = TensorProto.DEFAULT
        del t.external_data[:]


def _holds_values(t: TensorProto) -> bool:
    return t.HasField("raw_data") or any(len(getattr(t, f)) for f in TYPED_FIELDS)


def _byte_range(info: ExternalDataInfo, size: int, tensor: str) -> tuple[int, int]:
    """(offset, length) of a tensor's bytes in a file or buffer of `size` bytes, checked before
    anything is read, so a huge or negative range is an error naming the tensor, never a huge
    read (onnxruntime's class and words)."""
    offset = int(info.offset or 0)
    length = int(info.length) if info.length else size - offset
    if offset < 0 or length < 0 or offset + length > size:
        raise Fail(
            f"External initializer: {tensor} offset: {offset} size to read: {length} given "
            f"file_length: {size} are out of bounds or can not be read in full."
        )
    return offset, length


def _safe_location(base_dir: Path, location: str, tensor: str, label: str) -> Path:
    escapes = InvalidGraph(
        f"{label}: external data of {tensor!r} at {location!r} escapes the model's folder"
    )
    if not location or os.path.isabs(location):
        raise escapes
    if "\0" in location:
        raise InvalidGraph(f"{label}: external data of {tensor!r}: location holds a NUL byte")
    target = (base_dir / location).resolve()
    if os.path.commonpath([str(target), str(base_dir)]) != str(base_dir):
        raise escapes
    if not target.is_file():
        raise NoSuchFile(f"{label}: external data file of {tensor!r} not found: {location}")
    return target


def _check_opsets(
    model: ModelProto, label: str, custom_domains: frozenset[str], allow_unknown: bool
) -> None:
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
        elif domain not in local and domain not in custom_domains and not allow_unknown:
            used = [n for n in model.graph.node if n.domain == op.domain]
            if used:  # onnxruntime: FAIL, "... is not a registered function/op"
                raise Fail(
                    f"{label}: unknown operator domain {domain!r} used by node "
                    f"{used[0].name or used[0].op_type!r} ({used[0].op_type}); no installed "
                    "provider or plugin defines it (session config entry "
                    f"{ALLOW_UNKNOWN_DOMAINS_KEY}=1 loads it anyway)"
                )
    nodes = _all_nodes(model.graph)
    ops = dict.fromkeys((n.domain, n.op_type) for n in nodes)  # in graph order
    in_functions = ((n.domain, n.op_type) for f in model.functions for n in f.node)
    onnx_opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    contrib.register_for_ops([*ops, *in_functions], onnx_opset)  # where the model uses them
    for domain, op_type in ops:
        unknown_contrib = (
            domain == contrib.DOMAIN
            and op_type not in contrib.DOCUMENTED_OPS
            and contrib.spec_of(domain, op_type) is None
        )
        if unknown_contrib:  # onnxruntime: FAIL, "not a registered function/op"
            node = next(n for n in nodes if (n.domain, n.op_type) == (domain, op_type))
            raise Fail(
                f"{label}: node {node.name or node.op_type!r}: "
                f"{contrib.unsupported_reason(domain, op_type)}"
            )


def _all_nodes(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """The nodes of `graph` and of the graphs nested in its nodes' attributes."""
    out: list[onnx.NodeProto] = []
    for node in graph.node:
        out.append(node)
        for a in node.attribute:
            for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                out.extend(_all_nodes(sub))
    return out


def _check_graph(
    model: ModelProto, label: str, decoded: dict[str, np.ndarray] | None = None
) -> None:
    """onnx.checker, except that untyped graph outputs are accepted (as onnxruntime does).

    Hand-built and old (IR 3) models often declare outputs without a type or shape; the full
    checker refuses them, so it checks such models again with placeholder types in its copy
    (types are checked against the op schemas later, by `check_types`). The checker sees a
    light copy (`_check_copy`): it looks at a raw tensor's presence, never at its bytes.
    """
    if not model.HasField("ir_version"):
        raise Fail(f"{label}: the model has no ir_version")  # onnxruntime: Fail, too
    contrib.register_for(model)
    checked = _check_copy(model, decoded)
    # IR 0-3 required every initializer to be a graph input, and onnxruntime runs old models
    # that break that rule: they are checked as IR 4, which dropped it
    checked.ir_version = max(model.ir_version, 4)
    checked.graph.name = checked.graph.name or "graph"  # onnxruntime loads unnamed graphs
    try:
        onnx.checker.check_model(checked)
        return
    except onnx.checker.ValidationError as e:
        if not any(m in str(e) for m in _UNTYPED_VALUE_INFO):
            raise InvalidGraph(f"{label}: invalid graph: {_first_line(str(e))}") from e
    except ValueError as e:  # models over 2 GB: the checker refuses them, run without it
        if "2GB" in str(e):
            return
        raise InvalidGraph(f"{label}: invalid graph: {e}") from e
    # The whole model again, its untyped declarations given a placeholder type in the copy: a
    # node-by-node check would see nested graphs without the outer names they read.
    _placeholder_types(checked.graph)
    try:
        onnx.checker.check_model(checked)
    except onnx.checker.ValidationError as e:
        raise InvalidGraph(f"{label}: invalid graph: {_first_line(str(e))}") from e


def _placeholder_types(graph: onnx.GraphProto) -> None:
    """Give every value declaration without a (tensor) type or shape one, here and in nested
    graphs; the checker (without shape inference) only requires the fields to be present."""
    for vi in [*graph.input, *graph.output, *graph.value_info]:
        tp = vi.type
        if tp.WhichOneof("value") is None:
            tp.tensor_type.elem_type = TensorProto.FLOAT
        if tp.WhichOneof("value") == "tensor_type":
            if tp.tensor_type.elem_type == TensorProto.UNDEFINED:
                tp.tensor_type.elem_type = TensorProto.FLOAT
            if not tp.tensor_type.HasField("shape"):
                tp.tensor_type.shape.dim.add()
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("g"):
                _placeholder_types(attr.g)
            for sub in attr.graphs:
                _placeholder_types(sub)


_UNTYPED_VALUE_INFO = (
    "Unrecognized type value case",  # `type {}`: onnxruntime loads it
    "Field 'type' of 'value_info' is required",
    "Field 'shape' of 'type' is required",
    "Field 'elem_type' of 'type' is required",
)


def _first_line(message: str) -> str:
    return message.strip().splitlines()[0] if message.strip() else "unknown reason"


# The checker and shape inference get copies of the model without the bytes of its big
# initializers (serializing a 100 MB model for each of them took most of a second).
_BIG_BYTES = 1 << 16  # the checker's copy stubs raw tensors above this size
_SMALL_ELEMENTS = 4096  # shape inference keeps initializers up to this size as values


def _plain_raw(t: TensorProto) -> bool:
    """Whether raw_data is `t`'s only value field (stored inline)."""
    return (
        t.HasField("raw_data")
        and t.data_location != TensorProto.EXTERNAL
        and not any(len(getattr(t, f)) for f in TYPED_FIELDS)
    )


def _check_copy(model: ModelProto, decoded: dict[str, np.ndarray] | None = None) -> ModelProto:
    """The model as the checker should see it, without the bytes of big raw initializers.

    For a plain numeric type the checker asks of raw_data only that it is there and holds at
    least dims x itemsize bytes: that is checked here, and a tensor that passes is replaced by
    a one-element stand-in with the same name and type. Anything else is left as it is.

    Reading raw_data copies it (upb has no length without a copy: alexnet's 233 MB took
    0.1-0.7 s): with `decoded` given, a tensor of exactly its size is kept there as its array.
    """

    def stub(t: TensorProto) -> TensorProto:
        if t.data_type not in FIXED_WIDTH_TYPES or any(d <= 0 for d in t.dims):
            return t
        itemsize = np_dtype(t.data_type).itemsize
        if decoded is not None and t.name in decoded and not _holds_values(t):
            return _stand_in(t, itemsize)  # mapped at load (`_map_external_data`)
        expected = math.prod(t.dims) * itemsize
        if expected <= _BIG_BYTES or not _plain_raw(t):
            return t
        raw = t.raw_data  # a copy, still cheaper than serializing
        if len(raw) < expected:
            return t  # too short: the checker says so
        if (
            decoded is not None
            and len(raw) == expected
            and native_raw(t)
            and not t.HasField("segment")
        ):
            decoded.setdefault(t.name, raw_array(t, raw))
        return _stand_in(t, itemsize)

    return light_copy(model, stub)


def _stand_in(t: TensorProto, itemsize: int) -> TensorProto:
    """A one-element tensor with `t`'s name and type, for the checker."""
    out = TensorProto()
    copy_fields(t, out, "raw_data")
    del out.dims[:]
    out.dims.append(1)
    out.raw_data = bytes(itemsize)
    return out


def without_decoded_data(model: ModelProto, decoded: Mapping[str, np.ndarray]) -> ModelProto:
    """A copy of `model` whose top-level initializers held as arrays in `decoded` (what
    `validate_model` filled) keep their name, type and dims but not their bytes.

    Clearing a field of the parsed proto frees nothing (its bytes live in the message's arena
    until the whole message goes): the copy is what lets the parsed bytes go, so that a
    session holds its weights once. Whoever reads the copy takes those values from `decoded`
    (the optimizer's cache); an initializer that a nested graph reads keeps its bytes, since
    a body is optimized on protos alone.
    """
    if not decoded:
        return model
    nested = _nested_reads(model.graph)

    def strip(t: TensorProto) -> TensorProto:
        if t.name not in decoded or t.name in nested:
            return t
        out = TensorProto()
        copy_fields(t, out, "raw_data")
        return out

    return light_copy(model, strip)


def _nested_reads(graph: onnx.GraphProto) -> set[str]:
    """Every name a node of a graph nested in `graph`'s nodes reads (at any depth)."""
    out: set[str] = set()
    for node in _all_nodes(graph):
        for a in node.attribute:
            for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                out.update(x for n in _all_nodes(sub) for x in n.input)
    return out


def infer_shapes(
    model: ModelProto, shape_data_max_elements: int = SHAPE_DATA_MAX_ELEMENTS
) -> ModelProto:
    """Shape/type inference where onnx can do it; a model it cannot infer still runs.

    Inference runs on a light copy: initializers over `_SMALL_ELEMENTS` elements become typed
    graph inputs (data propagation reads only small ones: shapes, axes, scalars), so the
    weights are never serialized. The inferred types are written into `model` (value_info,
    graph outputs, nested graphs' value_info), which is returned.
    """
    inputs = {i.name for i in model.graph.input}
    big: list[onnx.ValueInfoProto] = []

    def keep_small(t: TensorProto) -> TensorProto | None:
        if t.name in inputs or math.prod(t.dims) <= _SMALL_ELEMENTS or t.HasField("segment"):
            return t
        big.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
        return None

    light = light_copy(model, keep_small)
    light.graph.input.extend(big)
    try:
        inferred = infer_with_bounded_data_prop(light, shape_data_max_elements)
    except Exception:
        return model
    g, ig = model.graph, inferred.graph
    del g.value_info[:]
    g.value_info.extend(ig.value_info)
    del g.output[:]
    g.output.extend(ig.output)
    if any(a.type in _GRAPH_ATTRS for n in g.node for a in n.attribute):
        del g.node[:]  # nested graphs carry their own inferred value_info
        g.node.extend(ig.node)
    return model


_GRAPH_ATTRS = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
