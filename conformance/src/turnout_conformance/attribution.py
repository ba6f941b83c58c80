"""Whose failure is it? In fallback mode the CPU provider runs what the provider under test
declines, so a failing case may fail in a node the provider never ran. This module reads where
the nodes ran (the session's partition report) and which node failed, so that the CPU
provider's reviewed failures can be inherited for exactly those cases.

Placement is how many of a case's nodes the provider under test ran: "all", "some", "none",
or "" when no session was made to tell. The culprit of a failure is the provider that ran the
failing node: the CPU provider when it ran every node, when no provider could run some node (the
CPU provider is the last resort, so the gap is its own), or when a run error names a node it
ran; for wrong outputs of a mixed placement, when the provider under test ran no node of the
case's op and, compared value by value with the CPU provider alone on the same inputs, made no
difference of its own. Anything unknown is the provider's.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["PLACEMENTS", "culprit_of_error", "culprit_of_wrong_outputs", "placement"]

PLACEMENTS = ("all", "some", "none", "")

# how turnout names a failing node: "node 'n3' (Resize) on P: ..." at run time and kernel build,
# "node 'n3' (Resize): P could not build its kernel: ..." when a kernel factory raises
_NODE = re.compile(r"node '(?P<node>[^']*)' \((?P<op>[^)]*)\)(?:: (?P<builder>\w+) could not)?")


def _assignments(report: Any) -> Iterator[Any]:
    """Every Assignment of a partition report, nested graphs included."""
    yield from report.assignments
    for sub in report.subgraphs.values():
        yield from _assignments(sub)


def placement(report: Any, provider: str) -> str:
    """How many of the session's nodes `provider` ran: "all", "some" or "none"."""
    counts: Mapping[str, int] = report.counts()
    mine, total = counts.get(provider, 0), sum(counts.values())
    if mine == 0:
        return "none"
    return "all" if mine == total else "some"


def culprit_of_error(message: str, report: Any | None, providers: tuple[str, ...]) -> str:
    """The provider that ran the node an error message names, or "" if it names none we know.

    `report` is the partition report when the session was made (run errors); without it (build
    errors) the provider is read from the message, which names it after the node.
    """
    m = _NODE.search(message)
    if m is None:
        return ""
    if m.group("builder") in providers:
        return str(m.group("builder"))
    if report is not None:
        for a in _assignments(report):
            if a.node == m.group("node"):
                return str(a.provider)
    after = message[m.end() :]
    return next((p for p in providers if after.startswith(f" on {p}")), "")


def culprit_of_wrong_outputs(
    case: Any, report: Any, provider: str, cpu: str, feeds: Mapping[str, Any]
) -> str:
    """`cpu` when the provider under test ran no node of the case's op and every value its nodes
    produced agrees with what the CPU provider alone computes from the same inputs; else
    `provider`. Random ops differ between runs: the first difference is then introduced where
    they run, and the values after it inherit it."""
    from .compare import compare_model

    op = case.op.rsplit("::", 1)[-1]
    if any(a.op_type == op and a.provider == provider for a in _assignments(report)):
        return provider
    try:
        comparison = compare_model(case.load_model(), provider, cpu, feeds, case.rtol, case.atol)
    except Exception:  # a run error while comparing: unknown, so the provider's
        return provider
    for d in comparison.diffs:
        if d.introduced and d.placed_on.get(provider) == provider:
            return provider
    return cpu
