"""Expected failures: a provider's reviewed list (case name or regex -> reason), and what a
result becomes under it. A listed case that fails is `xfail`; one that passes is `xpass`, which
fails the run so that a fixed case leaves the list.

In fallback mode the CPU provider's reviewed list is inherited for a case whose failing node ran
on the CPU provider (`Result.culprit`): the case is `xfail`, labelled as inherited. Inherited
entries never make an `xpass`: the CPU provider's own run keeps its list honest."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["ExpectedFailures", "apply", "classify"]

FAILING = frozenset({"failed", "crash", "timeout"})


class ExpectedFailures:
    """Match case names against a list: exact names first, then each key as a full-match regex."""

    def __init__(self, entries: Mapping[str, str]) -> None:
        self.entries = dict(entries)
        self._patterns: list[tuple[re.Pattern[str], str, str]] = []
        for key, reason in self.entries.items():
            with contextlib.suppress(re.error):  # not a regex: exact matches only
                self._patterns.append((re.compile(key), key, reason))

    def match(self, name: str, kind: str = "") -> tuple[str, str] | None:
        """(entry key, reason) for the entry covering case `name` (or `kind/name`), or None."""
        for candidate in (name, f"{kind}/{name}"):
            if candidate in self.entries:
                return candidate, self.entries[candidate]
        for rx, key, reason in self._patterns:
            if rx.fullmatch(name) or rx.fullmatch(f"{kind}/{name}"):
                return key, reason
        return None


def apply(status: str, entry: tuple[str, str] | None) -> str:
    """The final status of a case given its raw status and the expected-failure entry (if any)."""
    if entry is None:
        return status
    if status in FAILING:
        return "xfail"
    if status == "passed":
        return "xpass"
    return status  # unclaimed: the listed case is not claimed any more; nothing to say


def classify(result: Any, own: ExpectedFailures, inherited: Mapping[str, ExpectedFailures]) -> None:
    """Set `result`'s final status and reason: an inherited entry first (`inherited` maps a
    provider to its list, for failures whose `culprit` is that provider, not the one under
    test), then the provider's own list."""
    if result.status in FAILING and result.culprit and result.culprit != result.provider:
        theirs = inherited.get(result.culprit)
        entry = theirs.match(result.case, result.kind) if theirs is not None else None
        if entry is not None:
            result.status, result.expected, result.expected_from = "xfail", entry[1], result.culprit
            return
    entry = own.match(result.case, result.kind)
    if entry is not None:
        result.expected = entry[1]
        result.status = apply(result.status, entry)
