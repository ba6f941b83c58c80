"""String ops of onnxruntime-extensions: case, length, strip, concat, equal, split, join, regex
replace and split, mapping, masked fill and string <-> vector lookups (numpy and `re`)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
from onnx import TensorProto

from turnout.graph.contrib import Arg, Attr, NodeTypes, TensorType, same_as
from turnout.graph.errors import InvalidArgument
from turnout.providers.extensions._registry import (
    INT64,
    STRING,
    attr_int,
    attr_text,
    latin_lower,
    op,
    string_array,
    strings,
    typed,
)
from turnout.sdk.provider import KernelNode

__all__: list[str] = []

_TEXT = Arg("input", "tensor(string)")
_C_SPACE = " \t\n\v\f\r"  # what the C library's isspace() calls space


def _scalar(x: Any) -> Any:
    return np.asarray(x).reshape(-1)[0]


def _ascii_upper(s: str) -> str:
    """Upper case of ASCII letters only, as onnxruntime-extensions' StringUpper ("é" stays)."""
    return s.upper() if s.isascii() else "".join(c.upper() if c.isascii() else c for c in s)


def _strip(s: str) -> str:
    """C-locale spaces stripped from both ends; a string of spaces only stays as it is."""
    return s.strip(_C_SPACE) or s


def _elementwise(fn: Callable[[str], Any], dtype: Any) -> Callable[[Any], tuple[Any]]:
    vec = np.frompyfunc(fn, 1, 1)

    def run(x: Any) -> tuple[Any]:
        arr = strings(x)
        return (np.asarray(vec(arr), dtype=dtype).reshape(arr.shape),)

    return run


@op("StringLower", [_TEXT], [Arg("output", "tensor(string)")], same_as(0))
def string_lower(kn: KernelNode) -> Callable[..., tuple[Any]]:
    return _elementwise(latin_lower, object)


@op("StringUpper", [_TEXT], [Arg("output", "tensor(string)")], same_as(0))
def string_upper(kn: KernelNode) -> Callable[..., tuple[Any]]:
    return _elementwise(_ascii_upper, object)


def _same_shape(elem_type: int) -> Callable[[NodeTypes], list[TensorType | None]]:
    def infer(types: NodeTypes) -> list[TensorType | None]:
        x = types.input(0)
        return [TensorType(elem_type, x.shape if x is not None else None)]

    return infer


@op("StringLength", [_TEXT], [Arg("output", "tensor(int64)")], _same_shape(INT64))
def string_length(kn: KernelNode) -> Callable[..., tuple[Any]]:
    return _elementwise(len, np.int64)


@op("StringStrip", [_TEXT], [Arg("output", "tensor(string)")], same_as(0))
def string_strip(kn: KernelNode) -> Callable[..., tuple[Any]]:
    return _elementwise(_strip, object)


@op(
    "StringConcat",
    [Arg("left", "tensor(string)"), Arg("right", "tensor(string)")],
    [Arg("output", "tensor(string)")],
    same_as(0),
)
def string_concat(kn: KernelNode) -> Callable[..., tuple[Any]]:
    def run(left: Any, right: Any) -> tuple[Any]:
        a, b = strings(left), strings(right)
        if a.shape != b.shape:
            raise InvalidArgument(f"{kn.name}: StringConcat's two inputs must have one shape")
        return (np.asarray(a + b, dtype=object),)

    return run


@op(
    "StringEqual",
    [Arg("x", "tensor(string)"), Arg("y", "tensor(string)")],
    [Arg("z", "tensor(bool)")],
    _same_shape(TensorProto.BOOL),
)
def string_equal(kn: KernelNode) -> Callable[..., tuple[Any]]:
    def run(x: Any, y: Any) -> tuple[Any]:
        return (np.asarray(strings(x) == strings(y), dtype=bool),)

    return run


@op(
    "StringSplit",
    [_TEXT, Arg("sep", "tensor(string)"), Arg("skip_empty", "tensor(bool)")],
    [
        Arg("indices", "tensor(int64)"),
        Arg("values", "tensor(string)"),
        Arg("shape", "tensor(int64)"),
    ],
    typed(INT64, STRING, INT64),
)
def string_split(kn: KernelNode) -> Callable[..., tuple[Any, Any, Any]]:
    """Each string split at any character of `sep` (every character when `sep` is empty), as
    a sparse [rows, longest] tensor; an empty string has no pieces."""

    def run(text: Any, sep: Any, skip_empty: Any) -> tuple[Any, Any, Any]:
        rows = strings(text).reshape(-1)
        chars = str(strings(sep).reshape(-1)[0])
        skip = bool(_scalar(skip_empty))
        pattern = re.compile("[" + re.escape(chars) + "]") if chars else None
        indices: list[tuple[int, int]] = []
        values: list[str] = []
        longest = 0
        for r, s in enumerate(rows):
            if not s:
                continue
            pieces = list(s) if pattern is None else pattern.split(s)
            if skip:
                pieces = [p for p in pieces if p]
            indices.extend((r, c) for c in range(len(pieces)))
            values.extend(pieces)
            longest = max(longest, len(pieces))
        idx = np.asarray(indices, dtype=np.int64).reshape(-1, 2)
        shape = np.asarray([len(rows), longest], dtype=np.int64)
        return idx, string_array(values), shape

    return run


def _join_infer(types: NodeTypes) -> list[TensorType | None]:
    return [TensorType(STRING)]


@op(
    "StringJoin",
    [_TEXT, Arg("sep", "tensor(string)"), Arg("axis", "tensor(int64)")],
    [Arg("output", "tensor(string)")],
    _join_infer,
)
def string_join(kn: KernelNode) -> Callable[..., tuple[Any]]:
    """Strings joined with `sep` along `axis`; a 1-D input gives one string of shape [1]."""

    def run(text: Any, sep: Any, axis: Any) -> tuple[Any]:
        arr = strings(text)
        glue = str(strings(sep).reshape(-1)[0])
        if arr.ndim == 0:
            return (arr,)
        ax = int(_scalar(axis))
        if not 0 <= ax < arr.ndim:  # onnxruntime-extensions takes no negative axis either
            raise InvalidArgument(f"{kn.name}: StringJoin axis {ax} is not in [0, {arr.ndim})")
        moved = np.moveaxis(arr, ax, -1)
        flat = moved.reshape(-1, moved.shape[-1])
        joined = string_array([glue.join(row) for row in flat])
        shape = moved.shape[:-1] if arr.ndim > 1 else (1,)
        return (joined.reshape(shape),)

    return run


_RE2_REWRITE = re.compile(r"\\(\d|\\)")
_ECMA_REWRITE = re.compile(r"\$(\d{1,2}|&|\$|`|')")


def _re2_rewrite(rewrite: str) -> Callable[[re.Match[str]], str]:
    """RE2's rewrite string (`\\1`, `\\0`, `\\\\`) as a replacement function."""

    def repl(m: re.Match[str]) -> str:
        return _RE2_REWRITE.sub(lambda r: "\\" if r[1] == "\\" else m[int(r[1])] or "", rewrite)

    return repl


def _ecma_rewrite(rewrite: str) -> Callable[[re.Match[str]], str]:
    """ECMAScript's replacement string (`$1`, `$&`, `$$`, `` $` ``, `$'`) as a function."""

    def repl(m: re.Match[str]) -> str:
        def one(r: re.Match[str]) -> str:
            token = r[1]
            if token == "$":
                return "$"
            if token == "&":
                return m[0]
            if token == "`":
                return m.string[: m.start()]
            if token == "'":
                return m.string[m.end() :]
            group = int(token)
            if group > (m.re.groups or 0):
                return r[0]
            return m[group] or ""

        return _ECMA_REWRITE.sub(one, rewrite)

    return repl


def _replace_kernel(
    kn: KernelNode, rewriter: Callable[[str], Callable[[re.Match[str]], str]], flags: int
) -> Callable[..., tuple[Any]]:
    count = 0 if attr_int(kn, "global_replace", 1) else 1

    def run(text: Any, pattern: Any, rewrite: Any) -> tuple[Any]:
        arr = strings(text)
        regex = re.compile(str(strings(pattern).reshape(-1)[0]), flags)
        repl = rewriter(str(strings(rewrite).reshape(-1)[0]))
        out = [regex.sub(repl, s, count=count) for s in arr.reshape(-1)]
        return (string_array(out, arr.shape),)

    return run


_REPLACE_ARGS = [_TEXT, Arg("pattern", "tensor(string)"), Arg("rewrite", "tensor(string)")]


@op(
    "StringRegexReplace",
    _REPLACE_ARGS,
    [Arg("output", "tensor(string)")],
    same_as(0),
    attrs=[Attr("global_replace", "int", 1)],
)
def string_regex_replace(kn: KernelNode) -> Callable[..., tuple[Any]]:
    return _replace_kernel(kn, _re2_rewrite, 0)


@op(
    "StringECMARegexReplace",
    _REPLACE_ARGS,
    [Arg("output", "tensor(string)")],
    same_as(0),
    attrs=[Attr("global_replace", "int", 1), Attr("ignore_case", "int", 0)],
)
def string_ecma_regex_replace(kn: KernelNode) -> Callable[..., tuple[Any]]:
    flags = re.IGNORECASE if attr_int(kn, "ignore_case", 0) else 0
    return _replace_kernel(kn, _ecma_rewrite, flags)


def _split_kernel(flags: int, needs_group: bool) -> Callable[..., tuple[Any, Any, Any, Any]]:
    """Pieces between the matches of `pattern`, with each match kept as a piece when
    `keep_pattern` matches it whole; begin and end offsets in UTF-8 bytes; row splits.
    `needs_group`: a pattern without a capturing group splits nothing (RE2's variant)."""

    def run(text: Any, pattern: Any, keep_pattern: Any) -> tuple[Any, Any, Any, Any]:
        regex = re.compile(str(strings(pattern).reshape(-1)[0]), flags)
        if needs_group and not regex.groups:
            regex = re.compile(r"(?!)")
        keep_src = str(strings(keep_pattern).reshape(-1)[0]) if np.size(keep_pattern) else ""
        keep = re.compile(keep_src, flags) if keep_src else None
        tokens: list[str] = []
        begins: list[int] = []
        ends: list[int] = []
        splits = [0]
        for s in strings(text).reshape(-1):
            pos = 0
            for m in regex.finditer(s):
                if m.start() == m.end():
                    continue
                if m.start() > pos:
                    _piece(s, pos, m.start(), tokens, begins, ends)
                if keep is not None and keep.fullmatch(m[0]):
                    _piece(s, m.start(), m.end(), tokens, begins, ends)
                pos = m.end()
            if pos < len(s):
                _piece(s, pos, len(s), tokens, begins, ends)
            splits.append(len(tokens))
        i64 = np.int64
        return (
            string_array(tokens),
            np.asarray(begins, dtype=i64),
            np.asarray(ends, dtype=i64),
            np.asarray(splits, dtype=i64),
        )

    return run


def _piece(
    s: str, start: int, end: int, tokens: list[str], begins: list[int], ends: list[int]
) -> None:
    tokens.append(s[start:end])
    begin = len(s[:start].encode())
    begins.append(begin)
    ends.append(begin + len(s[start:end].encode()))


_SPLIT_ARGS = [_TEXT, Arg("pattern", "tensor(string)"), Arg("keep_pattern", "tensor(string)")]
_SPLIT_OUTS = [
    Arg("output", "tensor(string)"),
    Arg("begin", "tensor(int64)"),
    Arg("end", "tensor(int64)"),
    Arg("row_indices", "tensor(int64)"),
]


@op("StringRegexSplitWithOffsets", _SPLIT_ARGS, _SPLIT_OUTS, typed(STRING, INT64, INT64, INT64))
def string_regex_split(kn: KernelNode) -> Callable[..., tuple[Any, ...]]:
    return _split_kernel(0, needs_group=True)


@op(
    "StringECMARegexSplitWithOffsets",
    _SPLIT_ARGS,
    _SPLIT_OUTS,
    typed(STRING, INT64, INT64, INT64),
    attrs=[Attr("ignore_case", "int", 0)],
)
def string_ecma_regex_split(kn: KernelNode) -> Callable[..., tuple[Any, ...]]:
    return _split_kernel(re.IGNORECASE if attr_int(kn, "ignore_case", 0) else 0, False)


def _tab_map(kn: KernelNode) -> list[tuple[str, str]]:
    """The `map` attribute's lines, `key<TAB>value` each."""
    pairs = []
    for line in attr_text(kn, "map").splitlines():
        if "\t" in line:
            key, value = line.split("\t", 1)
            pairs.append((key, value))
    return pairs


@op(
    "StringMapping",
    [_TEXT],
    [Arg("output", "tensor(string)")],
    same_as(0),
    attrs=[Attr("map", "string")],
)
def string_mapping(kn: KernelNode) -> Callable[..., tuple[Any]]:
    table = dict(_tab_map(kn))
    return _elementwise(lambda s: table.get(s, s), object)


@op(
    "MaskedFill",
    [Arg("value", "tensor(string)"), Arg("mask", "tensor(bool)")],
    [Arg("output", "tensor(string)")],
    typed(STRING),
)
def masked_fill(kn: KernelNode) -> Callable[..., tuple[Any]]:
    def run(value: Any, mask: Any) -> tuple[Any]:
        arr = strings(value).reshape(-1)
        keep = np.asarray(mask, dtype=bool).reshape(-1)
        return (string_array([s for s, k in zip(arr, keep, strict=True) if k]),)

    return run


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in text.split())


@op(
    "VectorToString",
    [Arg("input", "T")],
    [Arg("output", "tensor(string)")],
    typed(STRING),
    types={"T": ("int64",)},
    attrs=[Attr("map", "string"), Attr("unk", "string")],
)
def vector_to_string(kn: KernelNode) -> Callable[..., tuple[Any]]:
    table = {_ints(value): key for key, value in _tab_map(kn)}
    unk = attr_text(kn, "unk")

    def run(x: Any) -> tuple[Any]:
        arr = np.asarray(x, dtype=np.int64)
        width = arr.shape[-1] if arr.ndim else 1
        rows = arr.reshape(-1, width)
        out = [table.get(tuple(int(v) for v in row), unk) for row in rows]
        return (string_array(out, arr.shape[:-1] if arr.ndim > 1 else (len(out),)),)

    return run


@op(
    "StringToVector",
    [_TEXT],
    [Arg("output", "T")],
    typed(INT64),
    types={"T": ("int64",)},
    attrs=[Attr("map", "string"), Attr("unk", "string")],
)
def string_to_vector(kn: KernelNode) -> Callable[..., tuple[Any]]:
    table = {key: _ints(value) for key, value in _tab_map(kn)}
    unk = _ints(attr_text(kn, "unk"))

    def run(x: Any) -> tuple[Any]:
        arr = strings(x)
        rows = [table.get(s, unk) for s in arr.reshape(-1)]
        width = len(unk) if not rows else len(rows[0])
        out = np.asarray(rows, dtype=np.int64).reshape(*arr.shape, width)
        return (out,)

    return run
