"""Every contrib schema turnout defines agrees with the one onnxruntime registers: formal
inputs and outputs (names, optional, variadic, types), type constraints and attribute names.
The documented-op list is checked against onnxruntime's schemas and CPU kernels too."""

from __future__ import annotations

from typing import Any

import pytest

from turnout.graph.contrib import DOCUMENTED_OPS, DOMAIN, ORT_CPU_KERNELS, OpSpec, specs

C = pytest.importorskip(
    "onnxruntime.capi._pybind_state", reason="onnxruntime is the oracle of these checks"
)

ORT_SCHEMAS = {(s.domain, s.name, s.since_version): s for s in C.get_all_operator_schema()}


def _option(p: Any) -> str:
    return str(p.option).rsplit(".", 1)[-1]


@pytest.mark.parametrize("spec", specs(), ids=lambda s: f"{s.domain or 'ai.onnx'}::{s.name}")
def test_schema_matches_onnxruntime(spec: OpSpec) -> None:
    ort = ORT_SCHEMAS.get((spec.domain, spec.name, spec.since))
    assert ort is not None, f"onnxruntime defines no {spec.domain}::{spec.name}-{spec.since}"
    for kind, ours, theirs in (
        ("input", spec.inputs, ort.inputs),
        ("output", spec.outputs, ort.outputs),
    ):
        assert [a.name for a in ours] == [p.name for p in theirs], kind
        for a, p in zip(ours, theirs):
            want = "Variadic" if a.variadic else "Optional" if a.optional else "Single"
            assert _option(p) == want, f"{kind} {a.name}"
            assert a.type == p.typeStr, f"{kind} {a.name}"
            if a.variadic:
                assert a.homogeneous == p.isHomogeneous, f"{kind} {a.name}: homogeneous"
    constraints = {t.type_param_str: set(t.allowed_type_strs) for t in ort.type_constraints}
    assert {k: set(spec.type_strs(k)) for k in spec.types} == constraints
    assert sorted(a.name for a in spec.attrs) == sorted(ort.attributes)
    for attr in spec.attrs:
        assert attr.required == ort.attributes[attr.name].required, attr.name


def test_documented_ops_are_onnxruntimes() -> None:
    theirs = {name for domain, name, _ in ORT_SCHEMAS if domain == DOMAIN}
    assert theirs >= DOCUMENTED_OPS, sorted(DOCUMENTED_OPS - theirs)
    kernels = {
        k.op_name
        for k in C.get_all_opkernel_def()
        if k.domain == DOMAIN and k.provider == "CPUExecutionProvider"
    }
    assert kernels >= ORT_CPU_KERNELS, sorted(ORT_CPU_KERNELS - kernels)
