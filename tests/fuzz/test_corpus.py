"""Replay every saved fuzz finding (tests/fuzz/corpus/index.json), crash-isolated.

An entry passes when turnout agrees with onnxruntime (same outputs, or both reject the model)
and, on another provider, with turnout's CPU provider; an entry with `"against": "cpu"` (a model
onnxruntime rejects) only has to agree with the CPU provider. Open bugs are strict xfails with
the bug as the reason: when one is fixed the test fails until its entry says `"open": false`, so
the list of open bugs only shrinks.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fuzz.execute import FINDINGS
from fuzz.generate import FuzzCase
from fuzz.pool import Pool

CORPUS = Path(__file__).parent / "corpus"
ENTRIES: list[dict[str, Any]] = json.loads((CORPUS / "index.json").read_text())
AGREE = frozenset({"ok", "both-error"})


def _params() -> list[Any]:
    out = []
    for e in ENTRIES:
        marks = [pytest.mark.xfail(strict=True, reason=e["bug"])] if e["open"] else []
        for provider in e["providers"]:
            out.append(pytest.param(e, provider, marks=marks, id=f"{e['name']}-{provider[:-17]}"))
    return out


@pytest.mark.parametrize(("entry", "provider"), _params())
def test_corpus_entry(
    entry: dict[str, Any], provider: str, fuzz_pool: Pool, require: Callable[[str], None]
) -> None:
    require(provider)
    case = FuzzCase.load(CORPUS / f"{entry['name']}.onnx")
    [(_, _, rec)] = list(fuzz_pool.run([(case, provider)]))
    if entry.get("against", "ort") == "ort":
        assert rec["outcome"] in AGREE, f"{rec['outcome']}: {rec.get('detail')}"
        assert rec.get("vs_cpu", "ok") not in FINDINGS, f"vs CPU: {rec.get('vs_cpu_detail')}"
    else:  # onnxruntime rejects the model: turnout's CPU provider is the reference
        assert rec.get("vs_cpu") in AGREE, f"vs CPU {rec.get('vs_cpu')}: {rec.get('vs_cpu_detail')}"


def test_corpus_entries_are_tiny_and_listed() -> None:
    names = {e["name"] for e in ENTRIES}
    on_disk = {p.stem for p in CORPUS.glob("*.onnx")}
    assert names == on_disk, "every corpus model has an index entry and the reverse"
    for p in CORPUS.iterdir():
        assert p.stat().st_size < 10_000, f"{p.name} is not tiny"
    assert all(e["bug"] and e["providers"] for e in ENTRIES)
