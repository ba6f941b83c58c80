"""HfJsonTokenizer: a tokenizer described by a Hugging Face `tokenizer.json` (and its
`tokenizer_config.json`), as onnxruntime-extensions' `gen_processing_models(..., schema_v2=True)`
embeds them. Run by the `tokenizers` package, which reads that file format natively."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from turnout.graph.contrib import Arg, Attr
from turnout.graph.errors import InvalidArgument
from turnout.graph.errors import NotImplemented as OrtNotImplemented
from turnout.providers.extensions import _registry as reg
from turnout.sdk.provider import KernelNode

__all__ = ["SpecialTokens", "load"]


class SpecialTokens:
    """What tokenizer_config.json adds around each string, and the padding id, as
    onnxruntime-extensions 0.15 reads them:

    - `add_bos_token: true` replaces the post-processor of tokenizer.json: `bos_token` first,
      and `eos_token` last only where `add_eos_token` is also true;
    - otherwise the post-processor's frame (`TemplateProcessing`, `RobertaProcessing`, ...)
      stays, and `add_eos_token: true` appends `eos_token` where the frame does not end with it;
    - rows are padded with the id of `pad_token` (a string), or with 0 where it is absent or is
      the eos token.
    """

    def __init__(self, config: dict[str, Any], tok: Any) -> None:
        def token_id(key: str) -> int | None:
            value = config.get(key)
            if isinstance(value, dict):
                value = value.get("content")
            return tok.token_to_id(value) if isinstance(value, str) and value else None

        self.tok = tok
        self.replace_frame = bool(config.get("add_bos_token", False))
        self.add_eos = bool(config.get("add_eos_token", False))
        self.bos, self.eos = token_id("bos_token"), token_id("eos_token")
        pad = token_id("pad_token") if isinstance(config.get("pad_token"), str) else None
        self.pad = 0 if pad is None or pad == self.eos else pad

    def encode(self, text: str) -> list[int]:
        """The ids of one string, special tokens included."""
        if self.replace_frame:
            head = [] if self.bos is None else [self.bos]
            tail = [self.eos] if self.add_eos and self.eos is not None else []
            return [*head, *self.tok.encode(text, add_special_tokens=False).ids, *tail]
        enc = self.tok.encode(text)
        ids = list(enc.ids)
        framed_eos = bool(ids) and enc.special_tokens_mask[-1] == 1 and ids[-1] == self.eos
        if self.add_eos and self.eos is not None and not framed_eos:
            ids.append(self.eos)
        return ids


def load(tokenizer_json: str, config_json: str) -> SpecialTokens:
    """The tokenizer of a tokenizer.json with the special-token rules of its
    tokenizer_config.json (padding and truncation settings of tokenizer.json left out)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(tokenizer_json)
    tok.no_padding()
    tok.no_truncation()
    config = json.loads(config_json) if config_json.strip() else {}
    if not isinstance(config, dict):
        raise ValueError("tokenizer_config is not a JSON object")
    return SpecialTokens(config, tok)


@reg.op(
    "HfJsonTokenizer",
    [Arg("str", "tensor(string)")],
    [
        Arg("input_ids", "tensor(int64)"),
        Arg("attention_mask", "tensor(int64)", optional=True),
        Arg("offset_mapping", "tensor(int64)", optional=True),
    ],
    reg.token_rows_infer,
    attrs=[Attr("tokenizer_vocab", "string"), Attr("tokenizer_config", "string", "")],
    library="tokenizers",
)
def hf_json_tokenizer(kn: KernelNode) -> Callable[..., tuple[Any, ...]]:
    """Each string's ids as `tokenizers` encodes them with tokenizer.json (normalizer,
    pre-tokenizer, model, added tokens, post-processor), special tokens as `SpecialTokens`
    says; rows padded to the longest, with the attention mask."""
    if len(kn.node.outputs) > 2 and kn.node.outputs[2]:
        raise OrtNotImplemented(
            f"node {kn.name!r} ({kn.domain}::{kn.op_type}): turnout does not compute the "
            "offset_mapping output"
        )
    try:
        tokenizer = load(
            reg.attr_text(kn, "tokenizer_vocab"), reg.attr_text(kn, "tokenizer_config")
        )
    except Exception as e:  # tokenizers raises plain Exceptions for a bad tokenizer.json
        raise InvalidArgument(
            f"node {kn.name!r} ({kn.domain}::HfJsonTokenizer): cannot read the tokenizer: {e}"
        ) from None

    def run(text: Any) -> tuple[Any, ...]:
        arr = reg.strings(text)
        rows = [tokenizer.encode(s) for s in arr.reshape(-1)]
        ids, mask = reg.padded_rows(rows, tokenizer.pad, arr.shape)
        return (ids, mask)[: len(kn.node.outputs)]

    return run
