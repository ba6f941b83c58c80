"""onnxruntime-extensions' `ai.onnx.contrib` ops (turnout.providers.extensions): models loaded
the way applications load them (`register_custom_ops_library(get_library_path())`) give
onnxruntime + onnxruntime-extensions' outputs. Tokenizer models are trained in the test."""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import turnout
from turnout.graph.errors import InvalidArgument, RuntimeException
from turnout.providers import extensions
from turnout.providers.extensions import _registry

ort = pytest.importorskip("onnxruntime", reason="compares with onnxruntime")
ortx = pytest.importorskip("onnxruntime_extensions", reason="compares with onnxruntime-extensions")

DOMAIN = "ai.onnx.contrib"
STR = TensorProto.STRING
I64 = TensorProto.INT64
CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "hello world, this is a test of the tokenizer!",
    "encoders turn sentences into vectors; a small vector database stores them",
    "unicode: café naïve déjà vu, 日本語のテキスト, emoji 🙂 and Ελληνικά",
    "numbers 12345 and punctuation; (brackets) [more] {braces} 'quotes'",
]
FUZZ = [
    "",
    " ",
    "hello world",
    "Hello, World!",
    "café 日本語 🙂 Ελληνικά",
    "  leading and trailing  ",
    "tabs\tand\nnewlines",
    " ".join(CORPUS) * 8,  # a long input
]


def _model(
    nodes: Sequence[Any],
    inputs: Sequence[Any],
    outputs: Sequence[Any],
    initializers: Sequence[Any] = (),
) -> bytes:
    graph = helper.make_graph(list(nodes), "g", list(inputs), list(outputs), list(initializers))
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)]
    )
    return bytes(model.SerializeToString())


def _run_both(model: bytes, feeds: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    """The outputs of turnout and of onnxruntime + onnxruntime-extensions, each session
    created the way applications create it."""
    library = ortx.get_library_path()
    theirs = ort.SessionOptions()
    theirs.register_custom_ops_library(library)
    ours = turnout.SessionOptions()
    ours.register_custom_ops_library(library)
    expected = ort.InferenceSession(model, theirs, providers=["CPUExecutionProvider"])
    got = turnout.InferenceSession(model, ours, providers=["CPUExecutionProvider"])
    return got.run(None, feeds), expected.run(None, feeds)


def _assert_same(got: Sequence[Any], expected: Sequence[Any]) -> None:
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        g, e = np.asarray(g), np.asarray(e)
        assert g.shape == e.shape, (g, e)
        if e.dtype == object:
            assert g.tolist() == e.tolist()
        else:
            assert g.dtype == e.dtype, (g.dtype, e.dtype)
            np.testing.assert_array_equal(g, e)


def _texts(values: Sequence[str]) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out


def _embedding(vocab_size: int, dim: int = 16) -> Any:
    table = np.random.default_rng(0).standard_normal((vocab_size, dim)).astype(np.float32)
    return numpy_helper.from_array(table, "embedding")


def _max_diff(got: Any, expected: Any) -> float:
    return float(np.max(np.abs(np.asarray(got) - np.asarray(expected))))


def _mean_pooling(ids: str, mask_axis: str, token_axis: str, keepdims: int) -> list[Any]:
    """Embedding lookup of `ids`, then the mean over the tokens that attention_mask keeps
    (a row with none gives zeros)."""
    return [
        helper.make_node("Gather", ["embedding", ids], ["vectors"], axis=0),
        helper.make_node("Cast", ["attention_mask"], ["mask"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["mask", mask_axis], ["mask_n"]),
        helper.make_node("Mul", ["vectors", "mask_n"], ["masked"]),
        helper.make_node("ReduceSum", ["masked", token_axis], ["total"], keepdims=keepdims),
        helper.make_node("ReduceSum", ["mask_n", token_axis], ["count"], keepdims=keepdims),
        helper.make_node("Max", ["count", "one"], ["safe_count"]),
        helper.make_node("Div", ["total", "safe_count"], ["sentence"]),
    ]


# -- a sentence encoder on SentencePiece ------------------------------------------------------


@pytest.fixture(scope="module")
def sp_model() -> bytes:
    spm = pytest.importorskip("sentencepiece", reason="SentencepieceTokenizer runs on it")
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS * 20),
        model_writer=buf,
        vocab_size=100,
        hard_vocab_limit=False,
        model_type="unigram",
        character_coverage=1.0,
        minloglevel=2,
        num_threads=1,
    )
    return buf.getvalue()


def _sp_node(model: bytes, outputs: Sequence[str] = ("tokens", "indices")) -> Any:
    return helper.make_node(
        "SentencepieceTokenizer",
        ["text", "nbest", "alpha", "bos", "eos", "reverse"],
        list(outputs),
        domain=DOMAIN,
        model=model,
    )


def _sp_flags(bos: bool = True, eos: bool = True, reverse: bool = False) -> list[Any]:
    return [
        numpy_helper.from_array(np.array(0, np.int64), "nbest"),
        numpy_helper.from_array(np.array(0.0, np.float32), "alpha"),
        numpy_helper.from_array(np.array(bos), "bos"),
        numpy_helper.from_array(np.array(eos), "eos"),
        numpy_helper.from_array(np.array(reverse), "reverse"),
    ]


def test_sentencepiece_sentence_encoder_gives_onnxruntimes_embeddings(sp_model: bytes) -> None:
    nodes = [
        _sp_node(sp_model),
        helper.make_node("Cast", ["tokens"], ["ids"], to=I64),
        helper.make_node("Gather", ["embedding", "ids"], ["vectors"], axis=0),
        helper.make_node("ReduceMean", ["vectors"], ["sentence"], axes=[0], keepdims=1),
    ]
    model = _model(
        nodes,
        [helper.make_tensor_value_info("text", STR, [1])],
        [helper.make_tensor_value_info("sentence", TensorProto.FLOAT, [1, 16])],
        [*_sp_flags(), _embedding(128)],
    )
    worst = 0.0
    for text in [*CORPUS, *FUZZ]:
        got, expected = _run_both(model, {"text": _texts([text])})
        assert got[0].shape == expected[0].shape == (1, 16)
        worst = max(worst, _max_diff(got[0], expected[0]))
    assert worst <= 1e-4, worst


@pytest.mark.parametrize(
    "flags", [(True, True, False), (False, False, False), (True, False, True), (False, True, True)]
)
def test_sentencepiece_tokens_of_a_batch(sp_model: bytes, flags: tuple[bool, bool, bool]) -> None:
    model = _model(
        [_sp_node(sp_model)],
        [helper.make_tensor_value_info("text", STR, [None])],
        [
            helper.make_tensor_value_info("tokens", TensorProto.INT32, [None]),
            helper.make_tensor_value_info("indices", I64, [None]),
        ],
        _sp_flags(*flags),
    )
    _assert_same(*_run_both(model, {"text": _texts(FUZZ)}))


def test_sentencepiece_decoder(sp_model: bytes) -> None:
    spm = pytest.importorskip("sentencepiece")
    ids = spm.SentencePieceProcessor(model_proto=sp_model).encode(CORPUS[3])
    node = helper.make_node(
        "SentencepieceDecoder", ["ids"], ["text"], domain=DOMAIN, model=sp_model
    )
    model = _model(
        [node],
        [helper.make_tensor_value_info("ids", I64, [None])],
        [helper.make_tensor_value_info("text", STR, None)],
    )
    _assert_same(*_run_both(model, {"ids": np.asarray(ids, np.int64)}))


# -- BERT ------------------------------------------------------------------------------------

BERT_VOCAB = [
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "quick", "brown", "fox", "hello",
    "world", ",", "!", ".", "un", "##want", "##ed", "run", "##ning", "test", "token", "##izer",
    "日", "本", "語", "cafe", "café", "vector", "##s", "a", "of", "this", "is", "(", ")", "'",
]  # fmt: skip


def _bert_node(**attrs: Any) -> Any:
    return helper.make_node(
        "BertTokenizer",
        ["text"],
        ["input_ids", "token_type_ids", "attention_mask"],
        domain=DOMAIN,
        vocab_file="\n".join(BERT_VOCAB),
        **attrs,
    )


def test_bert_tokenizer_model_gives_onnxruntimes_embeddings() -> None:
    nodes = [
        _bert_node(),
        *_mean_pooling("input_ids", "axis1", "axis0", keepdims=1),
    ]
    model = _model(
        nodes,
        [helper.make_tensor_value_info("text", STR, [None])],
        [helper.make_tensor_value_info("sentence", TensorProto.FLOAT, [1, 16])],
        [
            _embedding(len(BERT_VOCAB)),
            numpy_helper.from_array(np.array([1], np.int64), "axis1"),
            numpy_helper.from_array(np.array([0], np.int64), "axis0"),
            numpy_helper.from_array(np.array(1.0, np.float32), "one"),
        ],
    )
    worst = 0.0
    for text in [*CORPUS, *FUZZ]:
        got, expected = _run_both(model, {"text": _texts([text])})
        worst = max(worst, _max_diff(got[0], expected[0]))
    got, expected = _run_both(model, {"text": _texts(CORPUS[:2])})  # a pair
    worst = max(worst, _max_diff(got[0], expected[0]))
    assert worst <= 1e-4, worst


@pytest.mark.parametrize(
    "attrs",
    [
        {},
        {"do_lower_case": 0},
        {"strip_accents": 1},
        {"tokenize_chinese_chars": 0},
        {"do_basic_tokenize": 0},
        {"max_length": 6},
    ],
)
def test_bert_tokenizer_ids(attrs: dict[str, Any]) -> None:
    model = _model(
        [_bert_node(**attrs)],
        [helper.make_tensor_value_info("text", STR, [None])],
        [
            helper.make_tensor_value_info(n, I64, [None])
            for n in ("input_ids", "token_type_ids", "attention_mask")
        ],
    )
    for text in [*CORPUS, *FUZZ]:
        _assert_same(*_run_both(model, {"text": _texts([text])}))
    _assert_same(*_run_both(model, {"text": _texts(CORPUS[2:4])}))


def test_basic_and_wordpiece_tokenizers() -> None:
    basic = helper.make_node("BasicTokenizer", ["text"], ["words"], domain=DOMAIN)
    model = _model(
        [basic],
        [helper.make_tensor_value_info("text", STR, [1])],
        [helper.make_tensor_value_info("words", STR, [None])],
    )
    for text in [*CORPUS, *FUZZ]:
        _assert_same(*_run_both(model, {"text": _texts([text])}))


def test_wordpiece_tokenizer_on_the_documented_example() -> None:
    """onnxruntime-extensions 0.15's WordpieceTokenizer crashes the process (a segmentation
    fault) on every input, so the reference here is the example of its op documentation."""
    vocab = {
        w: i + 10 for i, w in enumerate(["want", "##want", "##ed", "wa", "un", "runn", "##ing"])
    }
    piece = helper.make_node(
        "WordpieceTokenizer",
        ["words", "rows"],
        ["tokens", "ids", "row_splits"],
        domain=DOMAIN,
        vocab=json.dumps(vocab),
        suffix_indicator="##",
        unknown_token="[UNK]",
    )
    model = _model(
        [piece],
        [
            helper.make_tensor_value_info("words", STR, [None]),
            helper.make_tensor_value_info("rows", I64, [None]),
        ],
        [
            helper.make_tensor_value_info("tokens", STR, [None]),
            helper.make_tensor_value_info("ids", I64, [None]),
            helper.make_tensor_value_info("row_splits", I64, [None]),
        ],
    )
    opts = turnout.SessionOptions()
    opts.register_custom_ops_library(ortx.get_library_path())
    sess = turnout.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    words = _texts(["unwanted", "running", "unwantedX", "running"])
    tokens, ids, rows = sess.run(None, {"words": words, "rows": np.array([0, 2, 4], np.int64)})
    assert tokens.tolist() == [
        "un", "##want", "##ed", "runn", "##ing", "un", "##want", "##ed", "[UNK]", "runn", "##ing",
    ]  # fmt: skip
    assert ids.tolist() == [14, 11, 12, 15, 16, 14, 11, 12, -1, 15, 16]
    assert rows.tolist() == [0, 5, 11]


# -- GPT-2 and CLIP --------------------------------------------------------------------------


def _bpe_files(
    end_of_word: str = "", specials: Sequence[str] = ("<|endoftext|>",)
) -> tuple[str, str]:
    tokenizers = pytest.importorskip("tokenizers", reason="the BPE tokenizers run on it")
    suffix = {"end_of_word_suffix": end_of_word} if end_of_word else {}
    tok = tokenizers.Tokenizer(tokenizers.models.BPE(**suffix))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=list(specials),
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
        **suffix,
    )
    corpus = [c.lower() for c in CORPUS] if end_of_word else CORPUS
    tok.train_from_iterator(corpus * 10, trainer)
    state = json.loads(tok.to_str())["model"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in state["merges"]]
    return json.dumps(state["vocab"]), "#version: 0.2\n" + "\n".join(merges) + "\n"


def _bpe_encoder(op: str, vocab: str, merges: str, **attrs: Any) -> bytes:
    nodes = [
        helper.make_node(
            op,
            ["text"],
            ["ids", "attention_mask"],
            domain=DOMAIN,
            vocab=vocab,
            merges=merges,
            **attrs,
        ),
        *_mean_pooling("ids", "axis2", "axis1", keepdims=0),
    ]
    return _model(
        nodes,
        [helper.make_tensor_value_info("text", STR, [None])],
        [
            helper.make_tensor_value_info("sentence", TensorProto.FLOAT, [None, 16]),
            helper.make_tensor_value_info("ids", I64, [None, None]),
        ],
        [
            _embedding(len(json.loads(vocab))),
            numpy_helper.from_array(np.array([2], np.int64), "axis2"),
            numpy_helper.from_array(np.array([1], np.int64), "axis1"),
            numpy_helper.from_array(np.array(1.0, np.float32), "one"),
        ],
    )


def _clip_parity(text: str) -> bool:
    return text.isascii() and not any(c.isdigit() or c in "\t\n" for c in text)


@pytest.mark.parametrize("op", ["GPT2Tokenizer", "CLIPTokenizer"])
def test_bpe_tokenizer_model_gives_onnxruntimes_embeddings(op: str) -> None:
    if op == "CLIPTokenizer":
        vocab, merges = _bpe_files("</w>", ("<|startoftext|>", "<|endoftext|>"))
        # onnxruntime-extensions keeps tabs and newlines as words (unknown ids); CLIP, and
        # turnout, collapse every whitespace run to one space
        # ASCII without digits: on other text the two differ (docs/extensions-ops.md)
        cases = [t for t in FUZZ if _clip_parity(t)]
    else:
        vocab, merges = _bpe_files()
        cases = [*FUZZ, "ends <|endoftext|> the text"]
    model = _bpe_encoder(op, vocab, merges)
    worst = 0.0
    corpus = [c for c in CORPUS if _clip_parity(c)] if op == "CLIPTokenizer" else CORPUS
    for batch in [corpus, cases, *([c] for c in cases)]:
        got, expected = _run_both(model, {"text": _texts(batch)})
        _assert_same(got[1:], expected[1:])  # the ids
        worst = max(worst, _max_diff(got[0], expected[0]))
    assert worst <= 1e-4, worst


@pytest.mark.parametrize("padding_length", [1, 5, 64])
def test_gpt2_padding_length(padding_length: int) -> None:
    vocab, merges = _bpe_files()
    model = _bpe_encoder("GPT2Tokenizer", vocab, merges, padding_length=padding_length)
    got, expected = _run_both(model, {"text": _texts(CORPUS)})
    _assert_same(got[1:], expected[1:])
    assert _max_diff(got[0], expected[0]) <= 1e-4


def _bpe_offsets_model(op: str, vocab: str, merges: str, **attrs: Any) -> bytes:
    node = helper.make_node(
        op,
        ["text"],
        ["ids", "attention_mask", "offsets"],
        domain=DOMAIN,
        vocab=vocab,
        merges=merges,
        **attrs,
    )
    return _model(
        [node],
        [helper.make_tensor_value_info("text", STR, [None])],
        [
            helper.make_tensor_value_info("ids", I64, [None, None]),
            helper.make_tensor_value_info("attention_mask", I64, [None, None]),
            helper.make_tensor_value_info("offsets", I64, [None, None, 2]),
        ],
    )


def _bpe_vocab(op: str) -> tuple[str, str]:
    if op == "CLIPTokenizer":
        return _bpe_files("</w>", ("<|startoftext|>", "<|endoftext|>"))
    if op == "RobertaTokenizer":
        return _bpe_files(specials=("<s>", "<pad>", "</s>", "<unk>", "<mask>"))
    return _bpe_files()


def _token_text(token: str) -> str | None:
    """A byte-level BPE token's text without the space that starts a word or the </w> that
    ends one; None where its bytes cut a character."""
    tk = pytest.importorskip("tokenizers")
    byte_of = {
        c: i for i, c in enumerate(_byte_level_order(tk.pre_tokenizers.ByteLevel.alphabet()))
    }
    try:
        text = bytes(byte_of[c] for c in token.removesuffix("</w>")).decode("utf-8")
    except (KeyError, UnicodeDecodeError):
        return None
    return text.lstrip(" ")


def _byte_level_order(alphabet: Sequence[str]) -> list[str]:
    """GPT-2's byte -> character table, byte by byte: printable Latin-1 bytes stand for
    themselves, the others take the characters from U+0100 on, in order."""
    keep = [*range(33, 127), *range(161, 173), *range(174, 256)]
    out, extra = [], 0
    for b in range(256):
        if b in keep:
            out.append(chr(b))
        else:
            out.append(chr(256 + extra))
            extra += 1
    assert sorted(out) == sorted(alphabet)
    return out


@pytest.mark.parametrize("op", ["GPT2Tokenizer", "RobertaTokenizer"])
def test_bpe_offsets_of_a_word_are_onnxruntime_extensions(op: str) -> None:
    """One ASCII word a string, where onnxruntime-extensions 0.15's offsets are right (on a
    word after a space they count the space in the token's end, on non-ASCII text they count
    bytes of the byte-level characters, and a batch's rows are packed without padding)."""
    vocab, merges = _bpe_vocab(op)
    model = _bpe_offsets_model(op, vocab, merges)
    for text in ["hello", "tokenizer!", "vectors;", "a", "'quotes'"]:
        _assert_same(*_run_both(model, {"text": _texts([text])}))


@pytest.mark.parametrize("op", ["GPT2Tokenizer", "RobertaTokenizer", "CLIPTokenizer"])
@pytest.mark.parametrize("padding_length", [-1, 7])
def test_bpe_offsets_slice_each_token_from_the_text(op: str, padding_length: int) -> None:
    """Every token's offsets slice its text out of the string (in characters, the space before
    a word left out), rows padded with (0, 0) as the ids are; the ids as onnxruntime's (with
    padding_length, Roberta's and CLIP's only on GPT-2: 0.15 writes their rows longer than it
    into the next rows)."""
    vocab, merges = _bpe_vocab(op)
    by_id = {i: t for t, i in json.loads(vocab).items()}
    model = _bpe_offsets_model(op, vocab, merges, padding_length=padding_length)
    batch = [c for c in [*CORPUS, *FUZZ] if _clip_parity(c)] if op == "CLIPTokenizer" else FUZZ
    got, expected = _run_both(model, {"text": _texts(batch)})
    if padding_length < 0 or op == "GPT2Tokenizer":
        _assert_same(got[:2], expected[:2])
    ids, mask, offsets = got
    assert offsets.shape == (*ids.shape, 2)
    checked = 0
    for text, row, keep, spans in zip(batch, ids, mask, offsets, strict=True):
        source = text.lower() if op == "CLIPTokenizer" else text
        for i, m, (start, end) in zip(row, keep, spans.tolist(), strict=True):
            token = by_id[int(i)]
            if not m or token.startswith("<"):
                assert (start, end) == (0, 0)
                continue
            expect = _token_text(token)
            if expect is not None and expect:
                assert source[start:end] == expect, (text, token, start, end)
                checked += 1
    assert checked > 20


def test_roberta_tokenizer_ids_of_a_batch() -> None:
    """<s> ... </s> around every string (an empty one too), <s> in the text kept whole, rows
    padded with the <pad> id, which the vocab puts where it likes. Without padding_length:
    onnxruntime-extensions 0.15 writes rows longer than padding_length into the next rows."""
    vocab, merges = _bpe_files(specials=("<s>", "<pad>", "</s>", "<unk>", "<mask>"))
    ids = json.loads(vocab)
    by_id = {i: t for t, i in ids.items()}
    for a, b in ((0, 5), (1, 9)):  # <s> and <pad> at other ids
        ids[by_id[a]], ids[by_id[b]] = b, a
    node = helper.make_node(
        "RobertaTokenizer",
        ["text"],
        ["input_ids", "attention_mask"],
        domain=DOMAIN,
        vocab=json.dumps(ids),
        merges=merges,
    )
    model = _model(
        [node],
        [helper.make_tensor_value_info("text", STR, [None])],
        [
            helper.make_tensor_value_info(n, I64, [None, None])
            for n in ("input_ids", "attention_mask")
        ],
    )
    for batch in [CORPUS, FUZZ, ["café 🙂 <s> x </s>"], *([t] for t in FUZZ)]:
        _assert_same(*_run_both(model, {"text": _texts(batch)}))


# -- tokenizer.json (HfJsonTokenizer) --------------------------------------------------------


def _hf_json(kind: str) -> str:
    """A tokenizer.json trained on CORPUS: "bytelevel" (GPT-2, Qwen), "llama" (BPE on "▁"
    words with byte fallback), "unigram" (T5) or "wordpiece" (BERT)."""
    tk = pytest.importorskip("tokenizers", reason="HfJsonTokenizer runs on it")
    specials = ["<s>", "</s>", "<pad>", "<unk>", "<|endoftext|>"]
    if kind == "bytelevel":
        tok = tk.Tokenizer(tk.models.BPE())
        tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = tk.decoders.ByteLevel()
        trainer: Any = tk.trainers.BpeTrainer(
            vocab_size=400,
            special_tokens=specials,
            initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
    elif kind == "llama":
        tok = tk.Tokenizer(tk.models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
        tok.normalizer = tk.normalizers.Sequence(
            [tk.normalizers.Prepend("▁"), tk.normalizers.Replace(" ", "▁")]
        )
        tok.decoder = tk.decoders.Sequence(
            [
                tk.decoders.Replace("▁", " "),
                tk.decoders.ByteFallback(),
                tk.decoders.Fuse(),
                tk.decoders.Strip(" ", 1, 0),
            ]
        )
        # trained on "▁"-led words, digits and punctuation apart as SentencePiece trains
        # Llama's merges, and saved without the split, as Llama's tokenizer.json is
        tok.pre_tokenizer = tk.pre_tokenizers.Sequence(
            [
                tk.pre_tokenizers.Metaspace(prepend_scheme="never"),
                tk.pre_tokenizers.Digits(individual_digits=True),
                tk.pre_tokenizers.Punctuation(),
            ]
        )
        byte_pieces = [f"<0x{b:02X}>" for b in range(256)]
        trainer = tk.trainers.BpeTrainer(
            vocab_size=400, special_tokens=specials + byte_pieces, show_progress=False
        )
    elif kind == "unigram":
        tok = tk.Tokenizer(tk.models.Unigram())
        # SentencePiece's extra whitespace removal, which T5's precompiled normalizer does
        tok.normalizer = tk.normalizers.Sequence(
            [tk.normalizers.Strip(), tk.normalizers.Replace(tk.Regex(" {2,}"), " ")]
        )
        tok.pre_tokenizer = tk.pre_tokenizers.Metaspace()
        trainer = tk.trainers.UnigramTrainer(
            vocab_size=150, special_tokens=specials, unk_token="<unk>", show_progress=False
        )
    else:
        tok = tk.Tokenizer(tk.models.WordPiece(unk_token="<unk>"))
        tok.normalizer = tk.normalizers.BertNormalizer(lowercase=True)
        tok.pre_tokenizer = tk.pre_tokenizers.BertPreTokenizer()
        trainer = tk.trainers.WordPieceTrainer(
            vocab_size=300, special_tokens=specials, show_progress=False
        )
    tok.train_from_iterator(CORPUS * 10, trainer)
    state = json.loads(tok.to_str())
    if kind == "llama":  # the byte pieces are vocab entries, not added tokens
        state["added_tokens"] = [t for t in state["added_tokens"] if t["content"] in specials]
        state["pre_tokenizer"] = None
    return json.dumps(state)


def _hf_json_model(tokenizer: str, config: dict[str, Any], outputs: Sequence[str]) -> bytes:
    node = helper.make_node(
        "HfJsonTokenizer",
        ["text"],
        list(outputs),
        domain=DOMAIN,
        tokenizer_vocab=tokenizer,
        tokenizer_config=json.dumps(config),
    )
    return _model(
        [node],
        [helper.make_tensor_value_info("text", STR, [None])],
        [helper.make_tensor_value_info(n, I64, [None, None]) for n in outputs],
    )


def _with_post(tokenizer: str, post: str) -> str:
    """tokenizer.json with a post-processor: none, or <s> and/or </s> around each string."""
    tk = pytest.importorskip("tokenizers")
    tok = tk.Tokenizer.from_str(tokenizer)
    ids = {t: tok.token_to_id(t) for t in ("<s>", "</s>")}
    if post == "roberta":
        tok.post_processor = tk.processors.RobertaProcessing(
            ("</s>", ids["</s>"]), ("<s>", ids["<s>"])
        )
    elif post:
        tok.post_processor = tk.processors.TemplateProcessing(
            single=post, special_tokens=[(t, i) for t, i in ids.items() if t in post]
        )
    return str(tok.to_str())


_HF_BATCHES = [CORPUS, FUZZ, ["ends <|endoftext|> the text", "</s> <s>", "ü"], *([t] for t in FUZZ)]


def _hf_bpe_cases() -> list[tuple[str, str, str, dict[str, Any]]]:
    """(kind, tokenizer_class, post-processor, config flags). Llama's are the ones without an
    eos token: 0.15 never appends one to a SentencePiece-style BPE row (docs/extensions-ops.md)."""
    posts = ["", "<s> $A", "$A </s>", "<s> $A </s>", "roberta"]
    flags: list[dict[str, Any]] = [
        {},
        {"add_bos_token": True},
        {"add_eos_token": True},
        {"add_bos_token": True, "add_eos_token": True},
        {"add_bos_token": False, "add_eos_token": False},
    ]
    cases = [
        (kind, cls, post, f)
        for kind, cls in [("bytelevel", "GPT2Tokenizer"), ("bytelevel", "Qwen2Tokenizer")]
        for post in posts
        for f in flags
    ]
    cases += [
        ("llama", "LlamaTokenizer", post, f)
        for post in ("", "<s> $A")
        for f in flags
        if not f.get("add_eos_token")
    ]
    return cases


@pytest.mark.parametrize(("kind", "cls", "post", "flags"), _hf_bpe_cases())
def test_hf_json_tokenizer_bpe(kind: str, cls: str, post: str, flags: dict[str, Any]) -> None:
    """Byte-level and Llama-style BPE: the post-processor's frame, unless add_bos_token
    replaces it (docs/extensions-ops.md); rows padded with 0. onnxruntime-extensions picks
    its pre-tokenization by tokenizer_class (a Llama tokenizer.json under a GPT-2 class gives
    unknown ids, a GPT-2 one under Llama's splits digits otherwise), turnout by
    tokenizer.json: each is tested with its own classes."""
    tokenizer = _with_post(_hf_json(kind), post)
    config = {"tokenizer_class": cls, "bos_token": "<s>", "eos_token": "</s>", **flags}
    model = _hf_json_model(tokenizer, config, ["ids", "attention_mask"])
    for batch in _HF_BATCHES:
        _assert_same(*_run_both(model, {"text": _texts(batch)}))


@pytest.mark.parametrize(
    "tokens",
    [
        {"pad_token": "<pad>"},
        {"pad_token": "</s>"},  # the eos token: 0 pads
        {"pad_token": {"content": "<pad>"}},  # not a string: 0 pads
        {"bos_token": {"content": "<s>"}, "eos_token": {"content": "</s>"}, "pad_token": "<pad>"},
    ],
)
def test_hf_json_tokenizer_padding(tokens: dict[str, Any]) -> None:
    tokenizer = _with_post(_hf_json("bytelevel"), "<s> $A </s>")
    config = {"tokenizer_class": "GPT2Tokenizer", "bos_token": "<s>", "eos_token": "</s>"}
    model = _hf_json_model(tokenizer, {**config, **tokens}, ["ids", "attention_mask"])
    _assert_same(*_run_both(model, {"text": _texts(CORPUS)}))


def test_hf_json_tokenizer_unigram() -> None:
    """onnxruntime-extensions 0.15 runs a Unigram tokenizer.json on one string at a time, gives
    its ids as a vector and no attention mask; turnout takes a batch, gives [N, L] as the op's
    schema says, and the mask too. Where a special token is in the text, 0.15 makes the space
    before it (or the text's start) a "▁" piece, and a blank string gives no ids, not even
    </s>: there turnout's ids are those of `tokenizers`."""
    tokenizer = _with_post(_hf_json("unigram"), "$A </s>")
    config = {"tokenizer_class": "T5Tokenizer", "eos_token": "</s>", "pad_token": "<pad>"}
    model = _hf_json_model(tokenizer, config, ["ids"])
    for text in [t for t in [*CORPUS, *FUZZ] if t.strip()]:
        got, expected = _run_both(model, {"text": _texts([text])})
        assert got[0].shape == (1, *expected[0].shape)
        _assert_same([got[0][0]], expected)
    tk = pytest.importorskip("tokenizers")
    rows = [tk.Tokenizer.from_str(tokenizer).encode(t).ids for t in CORPUS]
    ids, mask = _run_ours(_hf_json_model(tokenizer, config, ["ids", "mask"]), _texts(CORPUS))
    pad = json.loads(tokenizer)["model"]["vocab"].index(["<pad>", 0.0])
    assert ids.tolist() == [r + [pad] * (ids.shape[1] - len(r)) for r in rows]
    assert mask.tolist() == [[1] * len(r) + [0] * (ids.shape[1] - len(r)) for r in rows]


def test_hf_json_tokenizer_wordpiece() -> None:
    """A BERT tokenizer.json, which onnxruntime-extensions 0.15 refuses ("Unknown tokenizer
    type"): turnout gives the ids of `tokenizers`, [CLS]-style frame included."""
    tokenizer = _with_post(_hf_json("wordpiece"), "<s> $A </s>")
    tk = pytest.importorskip("tokenizers")
    reference = tk.Tokenizer.from_str(tokenizer)
    config = {"tokenizer_class": "BertTokenizer", "pad_token": "<pad>"}
    ids, mask = _run_ours(_hf_json_model(tokenizer, config, ["ids", "mask"]), _texts(CORPUS))
    for row, keep, text in zip(ids.tolist(), mask.tolist(), CORPUS, strict=True):
        assert [i for i, m in zip(row, keep, strict=True) if m] == reference.encode(text).ids


def _run_ours(model: bytes, text: Any) -> list[Any]:
    opts = turnout.SessionOptions()
    opts.register_custom_ops_library(ortx.get_library_path())
    sess = turnout.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    return list(sess.run(None, {"text": text}))


def _trie_vocab() -> str:
    """RWKV's vocab form: every byte, then longer entries, each `ID LITERAL LENGTH`."""
    tokens = [bytes([b]) for b in range(256)]
    tokens += [w.encode() for w in ("th", "the", " the", "qu", "quick", " brown", "café", "🙂")]
    tokens += [b"\xf0\x9f", b"\xc3"]
    lines = []
    for i, t in enumerate(tokens, 1):
        try:
            literal = repr(t.decode("utf-8"))
        except UnicodeDecodeError:
            literal = repr(t)
        lines.append(f"{i} {literal} {len(t)}")
    return "\n".join(lines)


def test_trie_tokenizer_and_detokenizer() -> None:
    """Ids of a batch (rows padded with 0), and the text of rows of ids. onnxruntime-extensions
    0.15 fails a row whose text is empty (an all-padding row) and takes no 1-D ids; turnout
    gives "" and reads 1-D ids as one row."""
    vocab = _trie_vocab()
    tokenizer = _model(
        [helper.make_node("TrieTokenizer", ["text"], ["ids"], domain=DOMAIN, vocab=vocab)],
        [helper.make_tensor_value_info("text", STR, None)],
        [helper.make_tensor_value_info("ids", I64, None)],
    )
    detokenizer = _model(
        [helper.make_node("TrieDetokenizer", ["ids"], ["text"], domain=DOMAIN, vocab=vocab)],
        [helper.make_tensor_value_info("ids", I64, None)],
        [helper.make_tensor_value_info("text", STR, None)],
    )
    texts = [t for t in [*CORPUS, *FUZZ] if t]
    for batch in [_texts(texts), _texts(texts).reshape(1, -1), _texts(["the quick"])]:
        got, expected = _run_both(tokenizer, {"text": batch})
        _assert_same(got, expected)
        rows = expected[0].reshape(-1, expected[0].shape[-1])
        got, expected = _run_both(detokenizer, {"ids": rows})
        _assert_same(got, expected)
        assert got[0].tolist() == batch.reshape(-1).tolist()
    opts = turnout.SessionOptions()
    opts.register_custom_ops_library(ortx.get_library_path())
    ours = turnout.InferenceSession(detokenizer, opts, providers=["CPUExecutionProvider"])
    ids = np.array([[35, 0, 0], [0, 0, 0]], np.int64)
    assert ours.run(None, {"ids": ids})[0].tolist() == ['"', ""]
    assert ours.run(None, {"ids": ids[0]})[0].tolist() == ['"']
    with pytest.raises(RuntimeException, match="not valid UTF-8"):
        ours.run(None, {"ids": np.array([[265]], np.int64)})  # b"\xf0\x9f" alone


# -- string ops ------------------------------------------------------------------------------


def _string_case(op: str, inputs: dict[str, Any], out_types: Sequence[int], **attrs: Any) -> None:
    def vi(name: str, x: Any) -> Any:
        arr = np.asarray(x)
        elem = STR if arr.dtype == object else helper.np_dtype_to_tensor_dtype(arr.dtype)
        return helper.make_tensor_value_info(name, elem, None)

    outs = [f"out{i}" for i in range(len(out_types))]
    node = helper.make_node(op, list(inputs), outs, domain=DOMAIN, **attrs)
    model = _model(
        [node],
        [vi(k, v) for k, v in inputs.items()],
        [helper.make_tensor_value_info(n, t, None) for n, t in zip(outs, out_types, strict=True)],
    )
    _assert_same(*_run_both(model, inputs))


TEXT2D = np.array([["Hello World", "ÉCOLE straße ǅ"], ["", "日本語 ÀÉÎ x"]], dtype=object)
# onnxruntime-extensions splits at every byte where sep is "" (and so breaks UTF-8): ASCII here
WORDS = _texts(["a,b,,c", "", "x y  z", ",lead", "trail,", "x,y"])


@pytest.mark.parametrize(
    ("op", "out"),
    [("StringLower", STR), ("StringUpper", STR), ("StringLength", I64), ("StringStrip", STR)],
)
@pytest.mark.parametrize("text", [TEXT2D, _texts(FUZZ), _texts(["\u3000x\u00a0", " \v\f "])])
def test_unary_string_ops(op: str, out: int, text: Any) -> None:
    _string_case(op, {"x": text}, [out])


def test_binary_string_ops() -> None:
    _string_case("StringConcat", {"a": _texts(FUZZ), "b": _texts(FUZZ[::-1])}, [STR])
    _string_case("StringEqual", {"a": _texts(FUZZ), "b": _texts(FUZZ[::-1])}, [TensorProto.BOOL])
    _string_case("StringEqual", {"a": _texts(FUZZ), "b": _texts([""])}, [TensorProto.BOOL])


@pytest.mark.parametrize("sep", [",", "", ", ", " "])
@pytest.mark.parametrize("skip_empty", [True, False])
def test_string_split(sep: str, skip_empty: bool) -> None:
    inputs = {"x": WORDS, "sep": _texts([sep]), "skip": np.array(skip_empty)}
    _string_case("StringSplit", inputs, [I64, STR, I64])


@pytest.mark.parametrize("axis", [0, 1])
def test_string_join(axis: int) -> None:
    inputs = {"x": TEXT2D, "sep": _texts(["-"]), "axis": np.array([axis], np.int64)}
    _string_case("StringJoin", inputs, [STR])


def test_string_join_of_a_vector() -> None:
    inputs = {"x": _texts(FUZZ), "sep": np.array(" | ", dtype=object), "axis": np.array(0)}
    _string_case("StringJoin", inputs, [STR])


@pytest.mark.parametrize(
    ("pattern", "rewrite", "attrs"),
    [
        (r"(b)c", r"[\1]", {}),
        (r"\s+", " ", {}),
        (r"o", "0", {"global_replace": 0}),
        (r"(\w+)@(\w+)", r"\2 at \1", {}),
        (r"^", ">", {}),
        (r"é|本", r"<\0>", {}),
    ],
)
def test_string_regex_replace(pattern: str, rewrite: str, attrs: dict[str, Any]) -> None:
    text = _texts([*FUZZ, "abc abc", "user@host", "abcABC"])
    inputs = {"x": text, "pattern": _texts([pattern]), "rewrite": _texts([rewrite])}
    _string_case("StringRegexReplace", inputs, [STR], **attrs)


@pytest.mark.parametrize(
    ("pattern", "rewrite", "attrs"),
    [
        (r"(b)c", r"[$1]", {}),
        (r"B", "x", {"ignore_case": 1}),
        (r"o", "0", {"global_replace": 0}),
        (r"(\w+)@(\w+)", r"$2 at $1 ($&) $$", {}),
    ],
)
def test_string_ecma_regex_replace(pattern: str, rewrite: str, attrs: dict[str, Any]) -> None:
    text = _texts([*FUZZ, "abc abc", "user@host", "abcABC"])
    inputs = {"x": text, "pattern": _texts([pattern]), "rewrite": _texts([rewrite])}
    _string_case("StringECMARegexReplace", inputs, [STR], **attrs)


@pytest.mark.parametrize("op", ["StringRegexSplitWithOffsets", "StringECMARegexSplitWithOffsets"])
@pytest.mark.parametrize(("pattern", "keep"), [(r"(\s)", r"\s"), (r"\s", ""), (r"[,!]", r"!")])
def test_string_regex_split_with_offsets(op: str, pattern: str, keep: str) -> None:
    inputs = {"x": _texts(FUZZ), "pattern": _texts([pattern]), "keep": _texts([keep])}
    _string_case(op, inputs, [STR, I64, I64, I64])


def test_mapping_masked_fill_and_vectors() -> None:
    _string_case("StringMapping", {"x": _texts(["a", "b", "c", ""])}, [STR], map="a\tA\nb\tB")
    mask = np.array([True, False, True, True, False, False, True, False])
    _string_case("MaskedFill", {"x": _texts(FUZZ), "mask": mask}, [STR])
    table = "hi\t1 2\nyo\t3 4"
    vectors = np.array([[1, 2], [3, 4], [9, 9]], dtype=np.int64)
    _string_case("VectorToString", {"x": vectors}, [STR], map=table, unk="<unk>")
    _string_case("StringToVector", {"x": _texts(["hi", "yo", "zz"])}, [I64], map=table, unk="-1 -1")


# -- loading ---------------------------------------------------------------------------------


def test_the_library_is_recognised_by_name_and_path(tmp_path: Any) -> None:
    assert extensions.is_extensions_library(ortx.get_library_path())
    for name in ("libortextensions.so", "ortextensions.dll", "libortextensions.dylib"):
        assert extensions.is_extensions_library(tmp_path / name)
    assert not extensions.is_extensions_library(tmp_path / "libcustom_op_library.so")


def test_another_native_library_is_refused_saying_what_turnout_takes(tmp_path: Any) -> None:
    opts = turnout.SessionOptions()
    with pytest.raises(InvalidArgument, match=r"onnxruntime_extensions\.get_library_path"):
        opts.register_custom_ops_library(str(tmp_path / "libcustom_op_library.so"))


def test_a_missing_library_is_refused_at_session_creation(
    sp_model: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = _registry.importlib.import_module

    def no_sentencepiece(name: str, *args: Any) -> Any:
        if name == "sentencepiece":
            raise ImportError(name)
        return real(name, *args)

    monkeypatch.setattr(_registry.importlib, "import_module", no_sentencepiece)
    node = helper.make_node(
        "SentencepieceTokenizer",
        ["text"],
        ["tokens", "indices"],
        name="tok",
        domain=DOMAIN,
        model=sp_model,
    )
    model = _model(
        [node],
        [helper.make_tensor_value_info("text", STR, [None])],
        [
            helper.make_tensor_value_info("tokens", TensorProto.INT32, [None]),
            helper.make_tensor_value_info("indices", I64, [None]),
        ],
    )
    opts = turnout.SessionOptions()
    opts.register_custom_ops_library(ortx.get_library_path())
    with pytest.raises(extensions.MissingExtensionsLibrary, match=r"'tok'.*pip install"):
        turnout.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
