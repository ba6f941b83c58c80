"""Byte-level BPE tokenizers (GPT-2, RoBERTa, CLIP) on the `tokenizers` package, built from the
vocab (JSON) and merges (text) that the node carries."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np

from turnout.graph.contrib import Arg, Attr
from turnout.graph.errors import InvalidArgument
from turnout.providers.extensions._registry import (
    attr_int,
    attr_text,
    op,
    padded_rows,
    strings,
    token_rows_infer,
)
from turnout.sdk.provider import KernelNode

__all__: list[str] = []

_ATTRS = [
    Attr("vocab", "string"),
    Attr("merges", "string"),
    Attr("padding_length", "int", -1),
]
_OUTPUTS = [
    Arg("input_ids", "tensor(int64)"),
    Arg("attention_mask", "tensor(int64)", optional=True),
    Arg("offset_mapping", "tensor(int64)", optional=True),
]
_CLIP_SPLIT = (
    r"<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"
)


def _model(kn: KernelNode, suffix: str) -> tuple[Any, dict[str, int]]:
    from tokenizers import Tokenizer, models

    vocab = {str(k): int(v) for k, v in json.loads(attr_text(kn, "vocab")).items()}
    merges = []
    for line in attr_text(kn, "merges").splitlines():
        parts = line.split()
        if len(parts) == 2 and not line.startswith("#version"):
            merges.append((parts[0], parts[1]))
    bpe = models.BPE(vocab, merges, **({"end_of_word_suffix": suffix} if suffix else {}))
    return Tokenizer(bpe), vocab


def _padded(
    kn: KernelNode, rows: list[tuple[list[int], list[tuple[int, int]]]], pad: int, shape: Any
) -> tuple[Any, ...]:
    """input_ids, attention_mask and offset_mapping (as many as the node has), each row padded
    (ids with `pad`, offsets with (0, 0)) or cut to the padding_length attribute (-1: the
    longest row). Offsets count characters of the string, a token's (start, end) as Python
    slices it; special tokens and padding have (0, 0)."""
    length = attr_int(kn, "padding_length", -1)
    ids, mask = padded_rows([r for r, _ in rows], pad, shape, length)
    width = ids.shape[-1]
    offsets = np.zeros((len(rows), width, 2), dtype=np.int64)
    for r, (_, offs) in enumerate(rows):
        n = min(len(offs), width)
        if n:
            offsets[r, :n] = np.asarray(offs[:n], dtype=np.int64).reshape(n, 2)
    return (ids, mask, offsets.reshape(*shape, width, 2))[: len(kn.node.outputs)]


def _bpe_op(name: str) -> Callable[[Any], Any]:
    """Register a BPE tokenizer op: one string tensor in, ids, mask (and offsets) out."""
    return op(
        name,
        [Arg("input_text", "tensor(string)")],
        _OUTPUTS,
        token_rows_infer,
        attrs=_ATTRS,
        library="tokenizers",
    )


def _byte_level(tok: Any) -> None:
    """GPT-2's byte-level split, its offsets trimmed of the space a word starts with (as
    onnxruntime-extensions' start offsets are)."""
    from tokenizers import pre_tokenizers, processors

    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.post_processor = processors.ByteLevel(trim_offsets=True)


@_bpe_op("GPT2Tokenizer")
def gpt2_tokenizer(kn: KernelNode) -> Callable[..., tuple[Any, ...]]:
    """Byte-level BPE of each string (GPT-2's pre-tokenizer split; `<|endoftext|>` kept
    whole when the vocab has it); ids padded with 0 to `padding_length`."""
    from tokenizers import AddedToken

    tok, vocab = _model(kn, "")
    _byte_level(tok)
    specials = [t for t in vocab if t.startswith("<|") and t.endswith("|>")]
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])

    def run(text: Any) -> tuple[Any, ...]:
        arr = strings(text)
        rows = []
        for s in arr.reshape(-1):
            enc = tok.encode(s, add_special_tokens=False)
            rows.append((list(enc.ids), list(enc.offsets)))
        return _padded(kn, rows, 0, arr.shape)

    return run


@_bpe_op("CLIPTokenizer")
def clip_tokenizer(kn: KernelNode) -> Callable[..., tuple[Any, ...]]:
    """CLIP's BPE: lower case, whitespace collapsed, words split by CLIP's pattern, `</w>`
    ending each word; `<|startoftext|>` ... `<|endoftext|>` around every string, and rows
    padded with the `<|endoftext|>` id."""
    from tokenizers import Regex, normalizers, pre_tokenizers

    tok, vocab = _model(kn, "</w>")
    tok.normalizer = normalizers.Sequence(
        [normalizers.Replace(Regex(r"\s+"), " "), normalizers.Lowercase()]
    )
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_CLIP_SPLIT), behavior="removed", invert=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    bos, eos = vocab["<|startoftext|>"], vocab["<|endoftext|>"]

    def run(text: Any) -> tuple[Any, ...]:
        arr = strings(text)
        rows = []
        for s in arr.reshape(-1):
            lead = len(s) - len(s.lstrip())  # offsets are in the text as given
            enc = tok.encode(s.strip(), add_special_tokens=False)
            offsets = [(a + lead, b + lead) for a, b in enc.offsets]
            rows.append(([bos, *enc.ids, eos], [(0, 0), *offsets, (0, 0)]))
        return _padded(kn, rows, eos, arr.shape)

    return run


_ROBERTA_SPECIALS = ("<s>", "</s>", "<pad>", "<unk>", "<mask>")


@_bpe_op("RobertaTokenizer")
def roberta_tokenizer(kn: KernelNode) -> Callable[..., tuple[Any, ...]]:
    """GPT-2's byte-level BPE with RoBERTa's frame: `<s>` ... `</s>` around every string (an
    empty one too), RoBERTa's special tokens kept whole, and rows padded with the `<pad>` id."""
    from tokenizers import AddedToken

    tok, vocab = _model(kn, "")
    _byte_level(tok)
    specials = [t for t in _ROBERTA_SPECIALS if t in vocab]
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    missing = [t for t in ("<s>", "</s>", "<pad>") if t not in vocab]
    if missing:
        raise InvalidArgument(f"{kn.name}: RobertaTokenizer's vocab has no token {missing[0]!r}")
    bos, eos, pad = vocab["<s>"], vocab["</s>"], vocab["<pad>"]

    def run(text: Any) -> tuple[Any, ...]:
        arr = strings(text)
        rows = []
        for s in arr.reshape(-1):
            enc = tok.encode(s, add_special_tokens=False)
            rows.append(([bos, *enc.ids, eos], [(0, 0), *enc.offsets, (0, 0)]))
        return _padded(kn, rows, pad, arr.shape)

    return run
