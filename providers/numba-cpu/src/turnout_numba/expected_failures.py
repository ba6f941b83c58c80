"""Reviewed conformance failures of the numba provider: case name (or regex) -> reason.

The numba provider runs turnout's numpy kernels where it has no compiled one, so it inherits the
CPU provider's reviewed list; entries of its own are added below with their reasons.
"""

from __future__ import annotations

from turnout.providers.cpu.expected_failures import EXPECTED_FAILURES as _CPU

__all__ = ["EXPECTED_FAILURES"]

EXPECTED_FAILURES: dict[str, str] = {
    **_CPU,
    "test_attention_4d_causal_fp16_expanded": (
        "float16 Softmax here accumulates in float64 and rounds once; the expected data rounds "
        "every step to float16, so 2 of 192 outputs differ by one float16 ulp (4.9e-4) at "
        "rtol 1e-3 (seen with fusion off too)"
    ),
}
