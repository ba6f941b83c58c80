"""Reviewed conformance failures of ExampleExecutionProvider: case name (or regex) -> reason.

`turnout conformance --provider example` runs every ONNX test case whose nodes this provider claims.
A claimed case that fails is a defect, unless it is listed here with the reason (a known gap
under review). A listed case that passes fails the run, so that fixed entries leave the list.
"""

from __future__ import annotations

__all__ = ["EXPECTED_FAILURES"]

EXPECTED_FAILURES: dict[str, str] = {
    # "test_add_bcast": "why it fails here, and what would fix it",
}
