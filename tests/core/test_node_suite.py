"""The ONNX backend node tests (built in memory by the onnx package) through turnout.api.backend.

Every case must pass except those listed in EXPECTED_FAILURES with a reason; an expected failure
that starts passing fails the run (strict xfail), so the list only shrinks; only the random
draws (`RANDOM_SAMPLE_CASES`), which a kernel can match by luck, may pass.
"""

from __future__ import annotations

from typing import Any

import pytest

from turnout.api.backend import TurnoutBackend
from turnout.providers.cpu.expected_failures import RANDOM_SAMPLE_CASES
from turnout.providers.cpu.provider import CPUProviderFactory
from turnout.tools.testing import _all_node_cases, assert_outputs_close, normalize_values

EXPECTED_FAILURES = CPUProviderFactory().expected_failures()


def _params() -> list[Any]:
    out = []
    for case in _all_node_cases():
        marks = []
        if case.name in EXPECTED_FAILURES:
            strict = case.name not in RANDOM_SAMPLE_CASES  # a random draw may match by luck
            marks.append(pytest.mark.xfail(reason=EXPECTED_FAILURES[case.name], strict=strict))
        out.append(pytest.param(case, id=case.name, marks=marks))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("case", _params())
def test_node_case(case: Any) -> None:
    rep = TurnoutBackend.prepare(case.model)
    for inputs, expected in case.data_sets:
        got = rep.run(normalize_values(inputs))
        assert_outputs_close(normalize_values(expected), list(got), case.rtol, case.atol)
