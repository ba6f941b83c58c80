"""turnout's own conformance cases (kind "turnout") on every provider: Selu without attributes
gives the CPU provider's float32 values bit for bit on the CPU, numba, OpenCL (PoCL here) and
CuPy (its kernels on the emulated numpy backend) (issue 31).

Before: Selu's default alpha was 1.67326319217681884765625 in the CPU and OpenCL kernels and
1.6732632423543772 in numba and CuPy, and each provider ordered the formula its own way.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from turnout.sdk.semantics.numerics import expm1
from turnout.tools.testing import run_reference
from turnout_conformance.cases import Case, collect_cases
from turnout_conformance.own_cases import SELU_INPUT
from turnout_conformance.runner import execute_case

CPU = "CPUExecutionProvider"
NUMBA = "NumbaExecutionProvider"
OPENCL = "OpenCLExecutionProvider"
CUPY_EMULATED = "CuPyEmulatedExecutionProvider"


@pytest.fixture(scope="module")
def cases() -> list[Case]:
    return collect_cases(["turnout"])


PROVIDERS = pytest.mark.parametrize(
    "provider_on", [CPU, NUMBA, OPENCL, CUPY_EMULATED], indirect=True
)
"""Each case on each provider, the provider alone (see `provider_on` in conftest)."""


def test_own_cases_are_exact_and_named(cases: list[Case]) -> None:
    assert [c.name for c in cases] == ["turnout_selu_default_alpha_gamma"]
    assert all(c.exact and c.kind == "turnout" for c in cases)


def test_selu_case_is_the_schema_selu(cases: list[Case]) -> None:
    """The CPU provider's values, the case's expected ones, are onnx.reference's Selu (within a
    float32 ulp or two: the reference computes in its own order)."""
    (case,) = cases
    (node,) = case.load_model().graph.node  # type: ignore[union-attr]
    assert not node.attribute  # the defaults are what is checked
    ((_, expected),) = case.load_data()
    with np.errstate(all="ignore"):
        (ref,) = run_reference(node, [SELU_INPUT], 22)
    np.testing.assert_allclose(expected[0], ref, rtol=3e-7, atol=0)


@PROVIDERS
def test_selu_default_alpha_bit_for_bit(cases: list[Case], provider_on: str) -> None:
    (case,) = cases
    out = execute_case(case, provider_on, "isolated")  # the provider_on alone: no CPU behind it
    assert out.status == "passed", f"{provider_on}: {out.status}: {out.message}"


def test_exact_check_tells_negative_zero_and_one_ulp(cases: list[Case]) -> None:
    (case,) = cases
    ((_, expected),) = case.load_data()
    e = np.asarray(expected[0])
    case.check([e], [e.copy()])
    for changed in (np.where(e == 0, np.float32(-0.0), e), np.nextafter(e, np.float32(np.inf))):
        with pytest.raises(AssertionError, match="bit for bit"):
            case.check([e], [changed.astype(np.float32)])


def test_expm1_is_rounded_once_from_double() -> None:
    """The CPU provider's expm1 (`semantics.numerics.expm1`) is the same on every machine:
    numpy's float32 expm1 is SVML's on AVX-512 (1 ulp off at -3.0), which no other provider
    can match."""
    x = SELU_INPUT[np.isfinite(SELU_INPUT) & (SELU_INPUT < 88)]  # expm1 in float32 range
    want = np.array([math.expm1(float(v)) for v in x]).astype(np.float32)
    assert np.array_equal(expm1(x).view(np.uint32), want.view(np.uint32))
