"""Byte-level BPE tokenizers (GPT-2, RoBERTa, CLIP) on the `tokenizers` package, built from the
vocab (JSON) and merges (text) that the node carries."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np

from turnout.graph.contrib import Arg, Attr
from turnout.graph.errors import InvalidArgument
from turnout.graph.errors import NotImplemented as OrtNotImplemented
from turnout.providers.extensions._registry import (
    attr_int,
    attr_text,
    op,
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
) -> tuple[Any, Any, Any]:
    """input_ids, attention_mask and offsets, each row padded (with `pad`) or cut to the
    padding_length attribute (-1: the longest row)."""
    length = attr_int(kn, "padding_length", -1)
    width = max((len(ids) for ids, _ in rows), default=0) if length < 0 else length
    ids_out = np.full((len(rows), width), pad, dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    offsets = np.zeros((len(rows), width, 2), dtype=np.int64)
    for r, (ids, offs) in enumerate(rows):
        n = min(len(ids), width)
        ids_out[r, :n] = ids[:n]
        mask[r, :n] = 1
        if n:
            offsets[r, :n] = np.asarray(offs[:n], dtype=np.int64).reshape(n, 2)
    lead = tuple(shape)
    return (
        ids_out.reshape(*lead, width),
        mask.reshape(*lead, width),
        offsets.reshape(*lead, width, 2),
    )


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


def _no_offsets(kn: KernelNode) -> None:
    if len(kn.node.outputs) > 2 and kn.node.outputs[2]:
        raise OrtNotImplemented(
            f"node {kn.name!r} ({kn.domain}::{kn.op_type}): turnout does not compute the "
            "offset_mapping output"
        )


@_bpe_op("GPT2Tokenizer")
def gpt2_tokenizer(kn: KernelNode) -> Callable[..., tuple[Any, ...]]:
    """Byte-level BPE of each string (GPT-2's pre-tokenizer split; `<|endoftext|>` kept
    whole when the vocab has it); ids padded with 0 to `padding_length`."""
    from tokenizers import AddedToken, pre_tokenizers

    _no_offsets(kn)
    tok, vocab = _model(kn, "")
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    specials = [t for t in vocab if t.startswith("<|") and t.endswith("|>")]
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])

    def run(text: Any) -> tuple[Any, ...]:
        arr = strings(text)
        rows = []
        for s in arr.reshape(-1):
            enc = tok.encode(s, add_special_tokens=False)
            rows.append((list(enc.ids), list(enc.offsets)))
        return _padded(kn, rows, 0, arr.shape)[: len(kn.node.outputs)]

    return run


@_bpe_op("CLIPTokenizer")
def clip_tokenizer(kn: KernelNode) -> Callable[..., tuple[Any, ...]]:
    """CLIP's BPE: lower case, whitespace collapsed, words split by CLIP's pattern, `</w>`
    ending each word; `<|startoftext|>` ... `<|endoftext|>` around every string, and rows
    padded with the `<|endoftext|>` id."""
    from tokenizers import Regex, normalizers, pre_tokenizers

    _no_offsets(kn)
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
            enc = tok.encode(s.strip(), add_special_tokens=False)
            rows.append(([bos, *enc.ids, eos], [(0, 0), *enc.offsets, (0, 0)]))
        return _padded(kn, rows, eos, arr.shape)[: len(kn.node.outputs)]

    return run


_ROBERTA_SPECIALS = ("<s>", "</s>", "<pad>", "<unk>", "<mask>")


@_bpe_op("RobertaTokenizer")
def roberta_tokenizer(kn: KernelNode) -> Callable[..., tuple[Any, ...]]:
    """GPT-2's byte-level BPE with RoBERTa's frame: `<s>` ... `</s>` around every string (an
    empty one too), RoBERTa's special tokens kept whole, and rows padded with the `<pad>` id."""
    from tokenizers import AddedToken, pre_tokenizers

    _no_offsets(kn)
    tok, vocab = _model(kn, "")
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
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
        return _padded(kn, rows, pad, arr.shape)[: len(kn.node.outputs)]

    return run
