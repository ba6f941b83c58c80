"""turnout's own sequence kernels (and the string kernels, which have no test file of their own)
against the ONNX node tests and onnx.reference."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto

from turnout.graph.errors import InvalidArgument
from turnout.tools.testing import check_official_case, iter_node_cases, run_own_kernel

SEQ_OPS = {
    "SequenceEmpty", "SequenceConstruct", "SequenceInsert", "SequenceAt", "SequenceErase",
    "SequenceLength", "SplitToSequence", "ConcatFromSequence",
}  # fmt: skip
STRING_OPS = {
    "StringConcat",
    "StringSplit",
    "RegexFullMatch",
    "StringNormalizer",
    "TfIdfVectorizer",
}
CASES = list(iter_node_cases(SEQ_OPS | STRING_OPS))

# sequence and string kernels move data; TfIdf's weighted counts are held to 1e-6
pytestmark = pytest.mark.kernel_check(rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_official_node_case(case: Any) -> None:
    check_official_case(case)


def seq(rng: np.random.Generator, n: int) -> list[np.ndarray]:
    return [rng.standard_normal((2, 3)).astype(np.float32) for _ in range(n)]


def plain_seq(n: int) -> list[np.ndarray]:
    """A sequence for parametrize lists (built at import: no random draws)."""
    return [np.full((2, 3), i, np.float32) for i in range(n)]


def i64(v: int) -> np.ndarray:
    return np.array(v, dtype=np.int64)


# --------------------------------------------------------------------------------------------
# Sequences


def test_construct_length_empty(rng: np.random.Generator, node: Any, check: Any) -> None:
    a, b = seq(rng, 2)
    check(node("SequenceConstruct", ["a", "b"]), [a, b])
    check(node("SequenceLength", ["s"]), [[a, b, a]])
    (empty,) = run_own_kernel(node("SequenceEmpty", [], dtype=TensorProto.INT32), [])
    assert empty == []


@pytest.mark.parametrize("pos", [None, 0, 2, 3, -1, -3])
def test_insert_at_erase_do_not_mutate(
    pos: int | None, rng: np.random.Generator, node: Any, check: Any
) -> None:
    s = seq(rng, 3)
    before = list(s)
    x = np.ones((2, 3), np.float32)
    ins = ["s", "x"] if pos is None else ["s", "x", "p"]
    feeds = [s, x] if pos is None else [s, x, i64(pos)]
    if pos == 3:  # the reference wraps position == len to 0; the spec appends
        (got,) = run_own_kernel(node("SequenceInsert", ins), feeds)
        assert len(got) == 4 and got[3] is x and all(p is q for p, q in zip(got, s))
    else:
        check(node("SequenceInsert", ins), feeds)
    if pos is not None and pos != 3:
        check(node("SequenceAt", ["s", "p"]), [s, i64(pos)])
        check(node("SequenceErase", ["s", "p"]), [s, i64(pos)])
    check(node("SequenceErase", ["s"]), [s])
    assert len(s) == 3 and all(p is q for p, q in zip(s, before))


@pytest.mark.parametrize(
    "split,axis,keepdims",
    [
        (None, 0, 1),
        (None, 1, 0),
        (None, -1, 1),
        (i64(2), 1, 1),
        (np.array([1, 3], np.int64), -1, 0),
    ],
)
def test_split_to_sequence(
    split: Any, axis: int, keepdims: int, rng: np.random.Generator, node: Any, check: Any
) -> None:
    x = rng.standard_normal((3, 4)).astype(np.float32)
    ins = ["x"] if split is None else ["x", "s"]
    feeds = [x] if split is None else [x, split]
    check(node("SplitToSequence", ins, axis=axis, keepdims=keepdims), feeds)


@pytest.mark.parametrize("axis,new_axis", [(0, 0), (-1, 0), (0, 1), (2, 1), (-3, 1)])
def test_concat_from_sequence(
    axis: int, new_axis: int, rng: np.random.Generator, node: Any, check: Any
) -> None:
    check(node("ConcatFromSequence", ["s"], axis=axis, new_axis=new_axis), [seq(rng, 3)])


BAD_INPUTS = [  # (op, input names, node() keywords, inputs)
    ("SequenceAt", ["s", "p"], {}, [plain_seq(2), i64(2)]),
    ("SequenceAt", ["s", "p"], {}, [plain_seq(2), i64(-3)]),
    ("SequenceInsert", ["s", "x", "p"], {}, [plain_seq(2), plain_seq(1)[0], i64(3)]),
    ("SequenceErase", ["s", "p"], {}, [plain_seq(2), i64(5)]),
    ("SplitToSequence", ["x", "s"], {}, [np.zeros(5, np.float32), np.array([2, 2])]),
    ("ConcatFromSequence", ["s"], {"axis": 2}, [plain_seq(2)]),
]


@pytest.mark.parametrize("op,names,kw,inputs", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_sequence_inputs(
    op: str, names: list[str], kw: dict[str, Any], inputs: list[Any], node: Any, check: Any
) -> None:
    check.rejects(node(op, names, **kw), inputs)


# --------------------------------------------------------------------------------------------
# Strings


def strings(*v: str) -> np.ndarray:
    return np.array(v, dtype=object)


def test_string_concat_broadcasts(node: Any, check: Any) -> None:
    x = strings("a", "bé", "").reshape(3, 1)
    y = strings("x", "yz")
    check(node("StringConcat", ["x", "y"]), [x, y], 20)


@pytest.mark.parametrize(
    "attrs", [{}, {"delimiter": ","}, {"delimiter": ",", "maxsplit": 1}, {"maxsplit": 1},
              {"delimiter": "ab"}]
)  # fmt: skip
def test_string_split(attrs: dict[str, Any], node: Any, check: Any) -> None:
    x = strings("a,b,,c", "  hello  world x ", "", "abXabYab", "one").reshape(5, 1)
    check(node("StringSplit", ["x"], 2, **attrs), [x], 20)


def test_regex_full_match(node: Any, check: Any) -> None:
    x = strings("www.google.com", "google.com", "www.x.org", "").reshape(2, 2)
    check(node("RegexFullMatch", ["x"], pattern=r"www\.[\w.-]+\.\bcom\b"), [x], 20)
    with pytest.raises(InvalidArgument, match="my_RegexFullMatch"):
        run_own_kernel(node("RegexFullMatch", ["x"], pattern="(unclosed"), [x], 20)


@pytest.mark.parametrize("action", ["NONE", "LOWER", "UPPER"])
@pytest.mark.parametrize("case_sensitive", [0, 1])
@pytest.mark.parametrize("shape", [(6,), (1, 6)])
def test_string_normalizer(
    action: str, case_sensitive: int, shape: tuple[int, ...], node: Any, check: Any
) -> None:
    """Against onnxruntime: onnx.reference ignores is_case_sensitive=0 when action is NONE."""
    x = strings("Monday", "tuesday", "monday", "THE", "the", "x").reshape(shape)
    n = node(
        "StringNormalizer",
        ["x"],
        case_change_action=action,
        is_case_sensitive=case_sensitive,
        stopwords=["monday", "The"],
        locale="C",  # ORT's default en_US.UTF-8 may be missing on the test machine
    )
    check.ort(n, [x], 10)
    all_gone = node("StringNormalizer", ["x"], stopwords=["a"], is_case_sensitive=0, locale="C")
    check.ort(all_gone, [strings("A", "a").reshape((2,) if len(shape) == 1 else (1, 2))], 10)


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
@pytest.mark.parametrize("lo,hi,skip", [(1, 1, 0), (1, 3, 2), (2, 2, 1), (2, 3, 0)])
def test_tfidf_vectorizer(
    mode: str, lo: int, hi: int, skip: int, rng: np.random.Generator, node: Any, check: Any
) -> None:
    pool = [1, 2, 3, 4, 1, 2, 2, 3, 3, 1, 1, 2, 3, 4, 4, 1]  # 4 unigrams, 3 bigrams, 2 trigrams
    attrs = dict(
        mode=mode, min_gram_length=lo, max_gram_length=hi, max_skip_count=skip,
        ngram_counts=[0, 4, 10], ngram_indexes=[8, 0, 1, 2, 3, 4, 5, 6, 7],
        pool_int64s=pool, weights=rng.uniform(0.5, 2, 9).tolist(),
    )  # fmt: skip
    x = rng.integers(0, 6, (3, 12)).astype(np.int64)
    check(node("TfIdfVectorizer", ["x"], **attrs), [x], 9)
    check(node("TfIdfVectorizer", ["x"], **attrs), [x[0].astype(np.int32)], 9)
    s = np.array([str(v) for v in x.ravel()], dtype=object).reshape(x.shape)
    attrs["pool_strings"] = [str(v) for v in attrs.pop("pool_int64s")]
    check(node("TfIdfVectorizer", ["x"], **attrs), [s], 9)
