"""SentencePiece models (T5, XLM-R, sentence encoders): SentencepieceTokenizer and
SentencepieceDecoder, on the `sentencepiece` package."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from onnx import TensorProto

from turnout.graph.contrib import Arg, Attr
from turnout.providers.extensions._registry import (
    INT64,
    STRING,
    attr_bytes,
    op,
    string_array,
    strings,
    typed,
)
from turnout.sdk.provider import KernelNode

__all__: list[str] = []

_FAIRSEQ_UNK = 3
"""fairseq's dictionary puts <s>, <pad>, </s>, <unk> first: its ids are sentencepiece's plus
one, and sentencepiece's unknown (0) is its 3."""


_OPTIONS = (
    ("nbest_size", "int64"),
    ("alpha", "float"),
    ("add_bos", "bool"),
    ("add_eos", "bool"),
    ("reverse", "bool"),
    ("fairseq", "bool"),
)
"""SentencepieceTokenizer's optional inputs after the strings, in order."""


def _processor(kn: KernelNode) -> Any:
    import sentencepiece

    return sentencepiece.SentencePieceProcessor(model_proto=attr_bytes(kn, "model"))


def _given(x: Any) -> bool:
    return x is not None and np.size(x) > 0


def _flag(x: Any) -> bool:
    return _given(x) and bool(np.asarray(x).reshape(-1)[0])


@op(
    "SentencepieceTokenizer",
    [
        Arg("inputs", "tensor(string)"),
        *(Arg(n, f"tensor({t})", optional=True) for n, t in _OPTIONS),
    ],
    [Arg("tokens", "tensor(int32)"), Arg("indices", "tensor(int64)")],
    typed(TensorProto.INT32, INT64),
    attrs=[Attr("model", "string")],
    library="sentencepiece",
)
def sentencepiece_tokenizer(kn: KernelNode) -> Callable[..., tuple[Any, Any]]:
    """Every string's ids, concatenated, and the row splits (`indices[i]` is where string i's
    ids start). The <s> and </s> ids are added before `reverse` reverses the row; nbest_size
    above 1 (or below 0) samples, as sentencepiece does."""
    sp = _processor(kn)
    bos, eos = sp.bos_id(), sp.eos_id()

    def run(text: Any, *options: Any) -> tuple[Any, Any]:
        given: dict[str, Any] = dict(zip((n for n, _ in _OPTIONS), options, strict=False))
        nbest_size, alpha = given.get("nbest_size"), given.get("alpha")
        add_bos, add_eos = given.get("add_bos"), given.get("add_eos")
        reverse, fairseq = given.get("reverse"), given.get("fairseq")
        nbest = int(np.asarray(nbest_size).reshape(-1)[0]) if _given(nbest_size) else 0
        smooth = float(np.asarray(alpha).reshape(-1)[0]) if _given(alpha) else 0.0
        ids: list[int] = []
        splits = [0]
        for s in strings(text).reshape(-1):
            if nbest in (0, 1):
                piece = list(sp.encode(s))
            else:
                piece = list(sp.encode(s, enable_sampling=True, nbest_size=nbest, alpha=smooth))
            if _flag(add_bos):
                piece.insert(0, bos)
            if _flag(add_eos):
                piece.append(eos)
            if _flag(reverse):
                piece.reverse()
            if _flag(fairseq):
                piece = [i + 1 if i else _FAIRSEQ_UNK for i in piece]
            ids.extend(piece)
            splits.append(len(ids))
        return np.asarray(ids, dtype=np.int32), np.asarray(splits, dtype=np.int64)

    return run


@op(
    "SentencepieceDecoder",
    [Arg("ids", "tensor(int64)"), Arg("fairseq", "tensor(bool)", optional=True)],
    [Arg("str", "tensor(string)")],
    typed(STRING),
    attrs=[Attr("model", "string")],
    library="sentencepiece",
)
def sentencepiece_decoder(kn: KernelNode) -> Callable[..., tuple[Any]]:
    """The text of one sequence of ids ([n] or [1, n]), as a string tensor of shape [1]."""
    sp = _processor(kn)
    size = sp.get_piece_size()

    def run(ids: Any, fairseq: Any = None) -> tuple[Any]:
        values = [int(i) for i in np.asarray(ids).reshape(-1)]
        if _flag(fairseq):
            values = [i - 1 if i > _FAIRSEQ_UNK else 0 for i in values]
        return (string_array([sp.decode([i for i in values if 0 <= i < size])]),)

    return run
