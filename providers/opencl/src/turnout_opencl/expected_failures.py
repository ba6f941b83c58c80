"""Reviewed conformance failures of the OpenCL provider: case name (or regex) -> reason.

In fallback mode the CPU provider runs what OpenCL declines, so the CPU provider's reviewed
list (random ops such as Bernoulli, onnx.reference disagreements such as Resize align_corners)
is inherited as it stands; only OpenCL's own entries are written here, each with its reason.
Every entry was looked at; a case listed here that passes is reported as stale by the
conformance runner and by `scripts/node_coverage.py`, so the list only shrinks.
"""

from __future__ import annotations

from turnout.providers.cpu.expected_failures import EXPECTED_FAILURES as _CPU

__all__ = ["EXPECTED_FAILURES"]

EXPECTED_FAILURES: dict[str, str] = {
    **_CPU,
    # float16 graph of ~80 nodes: 2 of 192 outputs differ by 2 float16 ulps (0.00049 at 0.47,
    # rtol 1e-3). Every op rounds to float16 as ONNX does, but MatMul/Softmax run as float32
    # kernels (different summation order from numpy's float16 loops); not fully diagnosed.
    "test_attention_4d_causal_fp16_expanded": "float16 rounding-order difference (2 ulps)",
}
