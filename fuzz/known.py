"""Reviewed differences: findings the fuzzer keeps seeing that are not turnout bugs to fix.

Each entry says why. An entry matches a result when its op is one of the case's ops, the class
matches (against onnxruntime: `outcome`; against turnout's CPU provider: `vs_cpu`), and its
regexes match the detail and the mutations. Bugs to fix do not belong here: they go to the corpus
as strict xfails (tests/fuzz/corpus), so the list of open bugs shrinks as they are fixed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["KNOWN", "Known", "match_known"]


@dataclass(frozen=True)
class Known:
    op: str  # "*": any op
    outcome: str
    reason: str
    against: str = "ort"  # "ort" (the outcome field) or "cpu" (vs_cpu)
    providers: tuple[str, ...] = ()  # empty: every provider
    detail: str = ""  # regex searched in the detail
    mutation: str = ""  # regex searched in the case's mutations, joined by spaces
    dtype: str = ""  # regex one of the case's input dtypes must match

    def matches(self, rec: Mapping[str, Any]) -> bool:
        field, detail = (
            ("outcome", "detail") if self.against == "ort" else ("vs_cpu", "vs_cpu_detail")
        )
        if rec.get(field) != self.outcome or self.op not in ("*", *rec.get("ops", ())):
            return False
        if self.dtype and not any(re.fullmatch(self.dtype, d) for d in rec.get("dtypes", ())):
            return False
        if self.providers and rec.get("provider") not in self.providers:
            return False
        if self.detail and not re.search(self.detail, str(rec.get(detail, ""))):
            return False
        return not self.mutation or bool(
            re.search(self.mutation, " ".join(rec.get("mutations", ())))
        )


KNOWN: Sequence[Known] = ()


def match_known(rec: Mapping[str, Any], against: str = "ort") -> Known | None:
    """The first reviewed difference that explains `rec` (against "ort" or "cpu")."""
    return next((k for k in KNOWN if k.against == against and k.matches(rec)), None)
