"""String kernels: StringConcat, StringSplit, RegexFullMatch, StringNormalizer, TfIdfVectorizer.

String tensors are numpy object arrays of Python `str`. These ops are per-element Python string
work by nature; each runs one comprehension over the flattened array.
"""

from __future__ import annotations

import re

import numpy as np

from turnout.graph.errors import InvalidArgument
from turnout.providers.cpu.registry import cpu_kernel
from turnout.sdk.provider import KernelFn, KernelNode

__all__: list[str] = []


def _bad(node: KernelNode, msg: str) -> InvalidArgument:
    return InvalidArgument(f"{node.name}: {msg}")


def _strings(values: list[str], shape: tuple[int, ...]) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out.reshape(shape)


@cpu_kernel("StringConcat", since=20)
def string_concat(node: KernelNode) -> KernelFn:
    def run(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray]:
        try:
            xb, yb = np.broadcast_arrays(x, y)
        except ValueError:
            raise _bad(node, f"cannot broadcast shapes {x.shape} and {y.shape}") from None
        vals = [str(a) + str(b) for a, b in zip(xb.ravel().tolist(), yb.ravel().tolist())]
        return (_strings(vals, xb.shape),)

    return run


@cpu_kernel("StringSplit", since=20)
def string_split(node: KernelNode) -> KernelFn:
    delim = node.attr("delimiter") or None  # empty or absent: split on whitespace runs
    maxsplit = node.attr("maxsplit", -1)

    def run(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        parts = [str(s).split(delim, maxsplit) for s in x.ravel().tolist()]
        counts = np.array([len(p) for p in parts], dtype=np.int64).reshape(x.shape)
        width = max((len(p) for p in parts), default=0)
        padded = [w for p in parts for w in p + [""] * (width - len(p))]
        return _strings(padded, (*x.shape, width)), counts

    return run


@cpu_kernel("RegexFullMatch", since=20)
def regex_full_match(node: KernelNode) -> KernelFn:
    pattern = node.attr("pattern")
    try:
        regex = re.compile(pattern or "")
    except re.error as e:
        raise _bad(node, f"invalid regex pattern {pattern!r}: {e}") from None

    def run(x: np.ndarray) -> tuple[np.ndarray]:
        hits = [regex.fullmatch(str(s)) is not None for s in x.ravel().tolist()]
        return (np.array(hits, dtype=bool).reshape(x.shape),)

    return run


@cpu_kernel("StringNormalizer", since=10)
def string_normalizer(node: KernelNode) -> KernelFn:
    """Drop stopword elements, then change case; [C] or [1, C] in, same rank out (never empty)."""
    action = node.attr("case_change_action", "NONE")
    if action not in ("NONE", "LOWER", "UPPER"):
        raise _bad(node, f"unknown case_change_action {action!r}")
    case_sensitive = bool(node.attr("is_case_sensitive", 0))
    stops = list(node.attr("stopwords", []) or [])
    stopset = set(stops) if case_sensitive else {w.lower() for w in stops}
    change = {"LOWER": str.lower, "UPPER": str.upper}.get(action)

    def run(x: np.ndarray) -> tuple[np.ndarray]:
        if not (x.ndim == 1 or (x.ndim == 2 and x.shape[0] == 1)):
            raise _bad(node, f"input must be [C] or [1, C], got shape {x.shape}")
        words = [str(s) for s in x.ravel().tolist()]
        if stopset:
            key = (lambda w: w) if case_sensitive else str.lower
            words = [w for w in words if key(w) not in stopset]
        if change is not None:
            words = [change(w) for w in words]
        if not words:
            words = [""]
        return (_strings(words, (len(words),) if x.ndim == 1 else (1, len(words))),)

    return run


@cpu_kernel("TfIdfVectorizer", since=9)
def tfidf_vectorizer(node: KernelNode) -> KernelFn:
    """Count pool n-grams (with skips) per row, then weight by mode TF, IDF or TFIDF.

    The pool is a dict from n-gram tuple to output column. For each gram size and skip
    distance, all windows of all rows are gathered with one fancy index; unigrams are counted
    once (skips do not change them).
    """
    lo = node.attr("min_gram_length")
    hi = node.attr("max_gram_length")
    max_skip = node.attr("max_skip_count")
    mode = node.attr("mode")
    if mode not in ("TF", "IDF", "TFIDF"):
        raise _bad(node, f"unknown mode {mode!r}")
    counts_ = list(node.attr("ngram_counts"))
    indexes = list(node.attr("ngram_indexes"))
    pool = list(node.attr("pool_int64s", None) or node.attr("pool_strings", None) or [])
    weights = node.attr("weights")
    width = max(indexes) + 1
    table: dict[tuple[object, ...], int] = {}
    gram_id = 0
    for size, start in enumerate(counts_, start=1):
        end = counts_[size] if size < len(counts_) else len(pool)
        for g in range(start, end, size):
            if lo <= size <= hi:
                table[tuple(pool[g : g + size])] = indexes[gram_id]
            gram_id += 1
    w = None if not weights else np.asarray(weights, dtype=np.float32)

    def run(x: np.ndarray) -> tuple[np.ndarray]:
        if x.ndim > 2:
            raise _bad(node, f"input must be [C] or [N, C], got shape {x.shape}")
        rows = x.reshape(1, -1) if x.ndim < 2 else x
        freq = np.zeros((rows.shape[0], width), dtype=np.float32)
        c = rows.shape[1]
        for n in range(lo, hi + 1):
            for d in range(1, (max_skip if n > 1 else 0) + 2):
                starts = c - (n - 1) * d
                if starts <= 0:
                    break
                idx = np.arange(starts)[:, None] + np.arange(n) * d
                for r, windows in enumerate(rows[:, idx].tolist()):
                    for gram in windows:
                        col = table.get(tuple(gram))
                        if col is not None:
                            freq[r, col] += 1
        if mode == "IDF":
            freq = (freq > 0).astype(np.float32) * (1 if w is None else w)
        elif mode == "TFIDF" and w is not None:
            freq = freq * w
        return (freq if x.ndim == 2 else freq[0],)

    return run
