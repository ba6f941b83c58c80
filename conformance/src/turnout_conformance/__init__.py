"""turnout-conformance: the ONNX backend tests against every installed turnout provider.

`turnout conformance` runs them in worker processes (crash- and hang-proof) and writes text,
JSON, Markdown and JUnit reports; `turnout compare` finds the first intermediate value where two
providers disagree; `pytest -p turnout_conformance --turnout-provider NAME` yields the same
cases as pytest items.
"""

from __future__ import annotations

import sys

from .cases import ALL_KINDS, Case, collect_cases
from .compare import Comparison, compare_model
from .expected import ExpectedFailures
from .report import Report
from .runner import Outcome, Result, Runner, execute_case

__version__ = "0.1.0"

__all__ = [
    "ALL_KINDS",
    "Case",
    "Comparison",
    "ExpectedFailures",
    "Outcome",
    "Report",
    "Result",
    "Runner",
    "collect_cases",
    "compare_model",
    "execute_case",
]

if "pytest" in sys.modules:  # loaded by pytest (`-p turnout_conformance`): expose the hooks
    from .plugin import pytest_addoption, pytest_collection_modifyitems  # noqa: F401
