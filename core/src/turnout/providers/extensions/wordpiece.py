"""BERT's tokenizers as onnxruntime-extensions runs them: BasicTokenizer (split on spaces,
punctuation and CJK characters), WordpieceTokenizer (greedy longest match) and BertTokenizer
(the two, then [CLS] ... [SEP]). Plain Python on `unicodedata`."""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Callable
from typing import Any

import numpy as np

from turnout.graph.contrib import Arg, Attr, NodeTypes, TensorType
from turnout.graph.errors import InvalidArgument
from turnout.graph.errors import NotImplemented as OrtNotImplemented
from turnout.providers.extensions import _registry as reg
from turnout.sdk.provider import KernelNode

__all__ = ["basic_tokenize", "wordpiece"]

_CJK = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)


def _is_cjk(c: str) -> bool:
    o = ord(c)
    return any(lo <= o <= hi for lo, hi in _CJK)


def _is_punct(c: str) -> bool:
    o = ord(c)
    if 33 <= o <= 47 or 58 <= o <= 64 or 91 <= o <= 96 or 123 <= o <= 126:
        return True
    return unicodedata.category(c).startswith("P")


def _is_space(c: str) -> bool:
    return c in " \t\n\r" or unicodedata.category(c) == "Zs"


def _is_control(c: str) -> bool:
    return c not in "\t\n\r" and unicodedata.category(c) in ("Cc", "Cf")


def _strip_accent(c: str) -> str:
    base = unicodedata.normalize("NFD", c)
    return base[0] if len(base) > 1 and unicodedata.category(base[0]).startswith("L") else c


def basic_tokenize(
    text: str,
    *,
    lower: bool,
    chinese: bool,
    strip_accents: bool,
    punctuation: bool,
    remove_control: bool,
) -> list[str]:
    """Split `text` at spaces, and around punctuation and CJK characters when asked."""
    if strip_accents:
        text = "".join(_strip_accent(c) for c in text)
    if lower:
        text = reg.latin_lower(text)
    tokens: list[str] = []
    word: list[str] = []

    def flush() -> None:
        if word:
            tokens.append("".join(word))
            word.clear()

    for c in text:
        if (chinese and _is_cjk(c)) or (punctuation and _is_punct(c)):
            flush()
            tokens.append(c)
        elif strip_accents and unicodedata.category(c) == "Mn":
            continue
        elif _is_space(c):
            flush()
        elif not (remove_control and _is_control(c)):
            word.append(c)
    flush()
    return tokens


def wordpiece(word: str, vocab: dict[str, int], unk: str, suffix: str, max_chars: int) -> list[str]:
    """Greedy longest-match pieces of `word`; where no piece matches, `unk` ends the word
    (the pieces found before it stay, as onnxruntime-extensions keeps them)."""
    if len(word) > max_chars:
        return [unk]
    pieces: list[str] = []
    start = 0
    while start < len(word):
        end = len(word)
        while end > start:
            piece = word[start:end] if start == 0 else suffix + word[start:end]
            if piece in vocab:
                break
            end -= 1
        if end == start:
            pieces.append(unk)
            break
        pieces.append(piece)
        start = end
    return pieces


def _vocab_lines(content: str) -> dict[str, int]:
    """A vocab.txt: one token a line (empty lines skipped), its id its line's index."""
    tokens = [t for t in content.replace("\r", "\n").split("\n") if t]
    return {t: i for i, t in enumerate(tokens)}


@reg.op(
    "BasicTokenizer",
    [Arg("text", "tensor(string)")],
    [Arg("tokens", "tensor(string)")],
    reg.typed(reg.STRING),
    attrs=[
        Attr("do_lower_case", "int", 1),
        Attr("tokenize_chinese_chars", "int", 1),
        Attr("strip_accents", "int", 0),
        Attr("tokenize_punctuation", "int", 0),
        Attr("remove_control_chars", "int", 1),
    ],
)
def basic_tokenizer(kn: KernelNode) -> Callable[..., tuple[Any]]:
    options = {
        "lower": bool(reg.attr_int(kn, "do_lower_case", 1)),
        "chinese": bool(reg.attr_int(kn, "tokenize_chinese_chars", 1)),
        "strip_accents": bool(reg.attr_int(kn, "strip_accents", 0)),
        "punctuation": bool(reg.attr_int(kn, "tokenize_punctuation", 0)),
        "remove_control": bool(reg.attr_int(kn, "remove_control_chars", 1)),
    }

    def run(text: Any) -> tuple[Any]:
        arr = reg.strings(text).reshape(-1)
        if arr.size != 1:
            raise InvalidArgument(f"{kn.name}: BasicTokenizer takes one string")
        return (reg.string_array(basic_tokenize(arr[0], **options)),)

    return run


@reg.op(
    "WordpieceTokenizer",
    [Arg("text", "tensor(string)"), Arg("row_indices", "tensor(int64)", optional=True)],
    [
        Arg("tokens", "tensor(string)"),
        Arg("token_indices", "tensor(int64)"),
        Arg("row_indices", "tensor(int64)"),
    ],
    reg.typed(reg.STRING, reg.INT64, reg.INT64),
    attrs=[
        Attr("vocab", "string"),
        Attr("suffix_indicator", "string", "##"),
        Attr("unknown_token", "string", "[UNK]"),
        Attr("max_input_chars_per_word", "int", 100),
    ],
)
def wordpiece_tokenizer(kn: KernelNode) -> Callable[..., tuple[Any, Any, Any]]:
    """Words (one a string; grouped into rows by `row_indices` when given) to their pieces,
    each piece's id (-1 for the unknown token) and the row splits of the pieces."""
    vocab: dict[str, int] = {
        str(k): int(v) for k, v in json.loads(reg.attr_text(kn, "vocab")).items()
    }
    suffix = reg.attr_text(kn, "suffix_indicator", "##")
    unk = reg.attr_text(kn, "unknown_token", "[UNK]")
    max_chars = reg.attr_int(kn, "max_input_chars_per_word", 100)

    def run(text: Any, row_indices: Any = None) -> tuple[Any, Any, Any]:
        words = reg.strings(text).reshape(-1)
        splits = (
            list(range(len(words) + 1))
            if row_indices is None or np.size(row_indices) == 0
            else [int(v) for v in np.asarray(row_indices).reshape(-1)]
        )
        tokens: list[str] = []
        rows = [0]
        for r in range(len(splits) - 1):
            for w in words[splits[r] : splits[r + 1]]:
                tokens.extend(wordpiece(w, vocab, unk, suffix, max_chars))
            rows.append(len(tokens))
        ids = np.asarray([vocab.get(t, -1) if t != unk else -1 for t in tokens], dtype=np.int64)
        return reg.string_array(tokens), ids, np.asarray(rows, dtype=np.int64)

    return run


def _bert_infer(types: NodeTypes) -> list[TensorType | None]:
    ids: TensorType | None = TensorType(reg.INT64, (None,))
    return [ids, ids, ids, TensorType(reg.INT64, (None, 2))]


@reg.op(
    "BertTokenizer",
    [Arg("text", "tensor(string)")],
    [
        Arg("input_ids", "tensor(int64)"),
        Arg("token_type_ids", "tensor(int64)"),
        Arg("attention_mask", "tensor(int64)"),
        Arg("offset_mapping", "tensor(int64)", optional=True),
    ],
    _bert_infer,
    attrs=[
        Attr("vocab_file", "string"),
        Attr("do_lower_case", "int", 1),
        Attr("do_basic_tokenize", "int", 1),
        Attr("unk_token", "string", "[UNK]"),
        Attr("sep_token", "string", "[SEP]"),
        Attr("pad_token", "string", "[PAD]"),
        Attr("cls_token", "string", "[CLS]"),
        Attr("mask_token", "string", "[MASK]"),
        Attr("tokenize_chinese_chars", "int", 1),
        Attr("strip_accents", "int", 0),
        Attr("suffix_indicator", "string", "##"),
        Attr("truncation_strategy_name", "string", "longest_first"),
        Attr("max_length", "int", -1),
    ],
)
def bert_tokenizer(kn: KernelNode) -> Callable[..., tuple[Any, ...]]:
    """One string, or a pair: [CLS] pieces [SEP] (pieces [SEP]), with token types and mask."""
    if len(kn.node.outputs) > 3 and kn.node.outputs[3]:
        raise OrtNotImplemented(
            f"node {kn.name!r} (ai.onnx.contrib::BertTokenizer): turnout does not compute "
            "the offset_mapping output"
        )
    vocab = _vocab_lines(reg.attr_text(kn, "vocab_file"))
    token = {k: reg.attr_text(kn, f"{k}_token", f"[{k.upper()}]") for k in ("unk", "sep", "cls")}
    missing = [t for t in token.values() if t not in vocab]
    if missing:
        raise InvalidArgument(f"{kn.name}: BertTokenizer's vocab has no token {missing[0]!r}")
    unk_id, sep_id, cls_id = (vocab[token[k]] for k in ("unk", "sep", "cls"))
    suffix = reg.attr_text(kn, "suffix_indicator", "##")
    max_length = reg.attr_int(kn, "max_length", -1)
    basic = bool(reg.attr_int(kn, "do_basic_tokenize", 1))
    options = {
        "lower": bool(reg.attr_int(kn, "do_lower_case", 1)),
        "chinese": bool(reg.attr_int(kn, "tokenize_chinese_chars", 1)),
        "strip_accents": bool(reg.attr_int(kn, "strip_accents", 0)),
        "punctuation": True,
        "remove_control": True,
    }

    def encode(text: str) -> list[int]:
        words = basic_tokenize(text, **options) if basic else _space_words(text)
        pieces = [p for w in words for p in wordpiece(w, vocab, token["unk"], suffix, 100)]
        return [vocab.get(p, unk_id) for p in pieces]

    def run(text: Any) -> tuple[Any, ...]:
        arr = reg.strings(text).reshape(-1)
        if arr.size not in (1, 2):
            raise InvalidArgument(f"{kn.name}: BertTokenizer takes one string or a pair")
        if arr.size == 1:
            ids = encode(arr[0])
            if max_length > 0:
                ids = ids[: max(max_length - 2, 0)]
            input_ids = [cls_id, *ids, sep_id]
            types = [0] * len(input_ids)
        else:
            first, second = encode(arr[0]), encode(arr[1])  # a pair is never truncated
            input_ids = [cls_id, *first, sep_id, *second, sep_id]
            types = [0] * (len(first) + 2) + [1] * (len(second) + 1)
        i64 = np.int64
        out = np.asarray(input_ids, dtype=i64)
        return out, np.asarray(types, dtype=i64), np.ones_like(out)

    return run


def _space_words(text: str) -> list[str]:
    """Words without basic tokenization: a space ends a word, and a space that starts one (after
    another space, or at the start) stays in it, as onnxruntime-extensions splits."""
    words: list[str] = []
    word = ""
    for c in text:
        if c == " " and word:
            words.append(word)
            word = ""
        else:
            word += c
    if word:
        words.append(word)
    return words
