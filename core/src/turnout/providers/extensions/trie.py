"""TrieTokenizer and TrieDetokenizer: RWKV's "world" tokenizer, the greedy longest match of the
text's UTF-8 bytes against a vocabulary of byte strings. Plain Python."""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any

import numpy as np

from turnout.graph.contrib import Arg, Attr, NodeTypes, TensorType
from turnout.graph.errors import RuntimeException
from turnout.providers.extensions._registry import INT64, STRING, attr_bytes, op, strings
from turnout.sdk.provider import KernelNode

__all__ = ["encode", "read_vocab"]

_MAX_TOKEN = 128


def read_vocab(text: str) -> dict[int, bytes]:
    """RWKV's vocabulary file: one token a line, `ID LITERAL LENGTH`, where LITERAL is a Python
    str or bytes literal and LENGTH its length in bytes.

    :raises ValueError: a line is not of that form, an id is 0, or a length is wrong.
    """
    tokens: dict[int, bytes] = {}
    for line in text.split("\n"):
        first, last = line.find(" "), line.rfind(" ")
        if first < 0 or first == last:
            raise ValueError(f"bad vocab line: {line!r}")
        digits = line[:first]
        idx = int(digits) if digits.isdigit() else 0
        if idx == 0:
            raise ValueError(f"bad index in vocab line: {line!r}")
        try:
            value = ast.literal_eval(line[first + 1 : last])
            size = int(line[last + 1 :])
        except (ValueError, SyntaxError):
            raise ValueError(f"bad token in vocab line: {line!r}") from None
        raw = value.encode("utf-8") if isinstance(value, str) else value
        if not isinstance(raw, bytes) or len(raw) != size:
            raise ValueError(f"bad len in vocab line: {line!r}")
        tokens[idx] = raw
    return tokens


def encode(data: bytes, ids: dict[bytes, int]) -> list[int]:
    """The ids of the longest vocabulary entries that match `data` one after another.

    :raises ValueError: no entry matches at some byte.
    """
    out: list[int] = []
    at = 0
    while at < len(data):
        for end in range(min(len(data), at + _MAX_TOKEN), at, -1):
            found = ids.get(data[at:end])
            if found is not None:
                out.append(found)
                at = end
                break
        else:
            raise ValueError(f"no vocabulary entry matches byte {data[at]:#04x} at {at}")
    return out


def _vocab(kn: KernelNode) -> dict[int, bytes]:
    text = attr_bytes(kn, "vocab").decode("utf-8", "replace").rstrip("\n")
    try:
        return read_vocab(text)
    except ValueError as e:
        raise RuntimeException(f"node {kn.name!r} ({kn.domain}::{kn.op_type}): {e}") from None


def _ids_shape(types: NodeTypes) -> list[TensorType | None]:
    x = types.input(0)
    return [TensorType(INT64, None if x is None or x.shape is None else (*x.shape, None))]


@op(
    "TrieTokenizer",
    [Arg("str", "tensor(string)")],
    [Arg("ids", "tensor(int64)")],
    _ids_shape,
    attrs=[Attr("vocab", "string")],
)
def trie_tokenizer(kn: KernelNode) -> Callable[..., tuple[Any]]:
    """Each string's ids, rows padded with 0 to the longest: [*shape, longest]."""
    ids = {token: idx for idx, token in sorted(_vocab(kn).items())}

    def run(text: Any) -> tuple[Any]:
        arr = strings(text)
        try:
            rows = [encode(s.encode("utf-8"), ids) for s in arr.reshape(-1)]
        except ValueError as e:
            raise RuntimeException(f"node {kn.name!r} ({kn.domain}::TrieTokenizer): {e}") from None
        width = max((len(r) for r in rows), default=0)
        out = np.zeros((len(rows), width), dtype=np.int64)
        for i, r in enumerate(rows):
            out[i, : len(r)] = r
        return (out.reshape(*arr.shape, width),)

    return run


@op(
    "TrieDetokenizer",
    [Arg("ids", "tensor(int64)")],
    [Arg("str", "tensor(string)")],
    lambda types: [TensorType(STRING)],
    attrs=[Attr("vocab", "string")],
)
def trie_detokenizer(kn: KernelNode) -> Callable[..., tuple[Any]]:
    """Rows of ids ([N, L]; [L] is one row) to their text ([N]; unknown ids and 0 are empty);
    a row whose bytes are not UTF-8 fails the run."""
    vocab = _vocab(kn)

    def run(ids: Any) -> tuple[Any]:
        arr = np.asarray(ids, dtype=np.int64)
        rows = arr.reshape(1, -1) if arr.ndim < 2 else arr.reshape(-1, arr.shape[-1])
        out = np.empty(len(rows), dtype=object)
        for i, row in enumerate(rows.tolist()):
            try:
                out[i] = b"".join(vocab.get(t, b"") for t in row).decode("utf-8")
            except UnicodeDecodeError:
                raise RuntimeException(
                    f"node {kn.name!r} ({kn.domain}::TrieDetokenizer): the ids of row {i} are "
                    "not valid UTF-8 text"
                ) from None
        return (out.reshape(arr.shape[:-1] if arr.ndim > 1 else (1,)),)

    return run
