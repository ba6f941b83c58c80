"""The op set's registration: one decorator gives an op its schema and its kernel factory, and
checks at session creation that the Python library the kernel runs on is installed."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from onnx import TensorProto

from turnout.graph.contrib import Arg, Attr, NodeTypes, OpSpec, TensorType
from turnout.graph.errors import NotImplemented as OrtNotImplemented
from turnout.sdk.provider import KernelNode, KernelRegistry

__all__ = [
    "DOMAIN",
    "KERNELS",
    "VISION_DOMAIN",
    "SPECS",
    "MissingExtensionsLibrary",
    "attr_bytes",
    "attr_int",
    "attr_text",
    "latin_lower",
    "op",
    "padded_rows",
    "strings",
    "token_rows_infer",
    "typed",
]

DOMAIN = "ai.onnx.contrib"
VISION_DOMAIN = "com.microsoft.extensions"
"""The image codecs' domain (DecodeImage, EncodeImage): the same native library brings it."""
KERNELS = KernelRegistry("onnxruntime-extensions ops")
SPECS: list[OpSpec] = []
LIBRARIES: dict[str, str] = {}
"""op type -> the Python package (import name) its kernel runs on; absent: numpy/stdlib."""

_PIP_NAMES = {"PIL": "Pillow"}
"""import name -> pip name, where they differ."""

Factory = Callable[[KernelNode], Callable[..., tuple[Any, ...]]]


class MissingExtensionsLibrary(OrtNotImplemented):
    """An onnxruntime-extensions node whose kernel runs on a Python package that is not installed;
    raised at session creation, naming the node and the pip command."""


def op(
    name: str,
    inputs: Sequence[Arg],
    outputs: Sequence[Arg],
    infer: Callable[[NodeTypes], Sequence[TensorType | None]],
    *,
    types: Mapping[str, tuple[str, ...]] | None = None,
    attrs: Sequence[Attr] = (),
    library: str | None = None,
    domain: str = DOMAIN,
) -> Callable[[Factory], Factory]:
    """Register op `name` of `domain`: its schema and the decorated kernel factory, which runs
    on `library` (a package to import) when one is named."""

    def deco(factory: Factory) -> Factory:
        SPECS.append(
            OpSpec(name, tuple(inputs), tuple(outputs), types or {}, infer, tuple(attrs), domain)
        )
        if library is not None:
            LIBRARIES[name] = library

        def checked(kn: KernelNode) -> Callable[..., tuple[Any, ...]]:
            if library is not None:
                _require(kn, library)
            return factory(kn)

        checked.__name__ = checked.__qualname__ = factory.__name__
        checked.__doc__ = factory.__doc__
        KERNELS.register(name, since=1, domain=domain)(checked)
        return factory

    return deco


def _require(kn: KernelNode, library: str) -> None:
    try:
        importlib.import_module(library)
    except ImportError:
        pip = _PIP_NAMES.get(library, library)
        raise MissingExtensionsLibrary(
            f"node {kn.name!r} ({kn.domain}::{kn.op_type}) runs on the Python package {pip!r}, "
            f"which is not installed: pip install 'turnout[extensions]' (or pip install {pip})"
        ) from None


def typed(*elem_types: int) -> Callable[[NodeTypes], list[TensorType | None]]:
    """Inference of an op whose outputs have these element types and shapes known only when
    it runs."""

    def infer(types: NodeTypes) -> list[TensorType | None]:
        return [TensorType(t) for t in elem_types]

    return infer


STRING = TensorProto.STRING
INT64 = TensorProto.INT64
FLOAT = TensorProto.FLOAT
UINT8 = TensorProto.UINT8


def attr_bytes(kn: KernelNode, name: str, default: bytes = b"") -> bytes:
    """A string attribute's raw bytes (a serialized model, a vocabulary file's content)."""
    for a in kn.node.proto.attribute:
        if a.name == name:
            return bytes(a.s)
    return default


def attr_text(kn: KernelNode, name: str, default: str = "") -> str:
    value = kn.attrs.get(name)
    if value is None:
        return default
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def attr_int(kn: KernelNode, name: str, default: int) -> int:
    value = kn.attrs.get(name)
    return default if value is None else int(value)


def latin_lower(s: str) -> str:
    """Lower case as onnxruntime-extensions' StringLower and BERT tokenizers give it: ASCII and
    Latin-1 letters only ("É" -> "é"; Greek, Cyrillic and "ǅ" stay)."""
    if s.isascii():
        return s.lower()
    return "".join(c.lower() if ord(c) < 0x100 and len(c.lower()) == 1 else c for c in s)


def strings(x: Any) -> np.ndarray:
    """A string tensor as a numpy array of `str` (bytes elements decoded as UTF-8)."""
    arr = np.asarray(x, dtype=object)
    out = np.empty(arr.shape, dtype=object)
    flat = out.reshape(-1)
    for i, s in enumerate(arr.reshape(-1)):
        flat[i] = s.decode("utf-8", "replace") if isinstance(s, bytes) else str(s)
    return out


def string_array(values: Sequence[str], shape: Sequence[int] | None = None) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    for i, s in enumerate(values):
        out[i] = s
    return out if shape is None else out.reshape(tuple(shape))


def token_rows_infer(types: NodeTypes) -> list[TensorType | None]:
    """Inference of a tokenizer with outputs ids, attention_mask and offset_mapping: a row of
    ids per string, [*shape, L], and [*shape, L, 2] offsets."""
    x = types.input(0)
    shape = None if x is None or x.shape is None else (*x.shape, None)
    offsets = None if shape is None else (*shape, 2)
    return [TensorType(INT64, shape), TensorType(INT64, shape), TensorType(INT64, offsets)]


def padded_rows(
    rows: Sequence[Sequence[int]], pad: int, shape: Sequence[int], width: int = -1
) -> tuple[np.ndarray, np.ndarray]:
    """Rows of ids as one [*shape, width] tensor, padded with `pad` or cut to `width` (-1: the
    longest row), and its attention mask (1 where a row has an id)."""
    if width < 0:
        width = max((len(r) for r in rows), default=0)
    ids = np.full((len(rows), width), pad, dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for i, r in enumerate(rows):
        n = min(len(r), width)
        ids[i, :n] = r[:n]
        mask[i, :n] = 1
    return ids.reshape(*shape, width), mask.reshape(*shape, width)
