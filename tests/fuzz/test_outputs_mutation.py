"""The `outputs` mutation: optional outputs of the last node left out, as the schema allows.

It is drawn from a random stream of its own, so every case it does not touch is what it was
before; the cases it makes are valid models that every provider runs as onnxruntime does; and a
kernel returning the wrong number of outputs is a finding, not a mere turnout-only error (Unique
returned all four of its outputs on every provider and the fuzzer did not say so).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper

from fuzz import generate
from fuzz.campaign import findings, run_campaign
from fuzz.execute import PROVIDERS, classify, run_turnout
from fuzz.generate import FuzzCase, Generator
from fuzz.pool import Pool
from fuzz.seeds import SeedPool
from turnout.sdk.plugins import registry
from turnout.sdk.provider import ExecutionProvider, KernelRegistry, ProviderFactory
from turnout.tools.testing import optional_outputs

SEED = 7


def _optional_output_ops(pool: SeedPool) -> set[str]:
    return {s.op for s in pool.seeds if any(optional_outputs(s.node, dict(s.opsets)))}


def _outputs_label(case: FuzzCase) -> str | None:
    return next((m for m in case.mutations if m.startswith("outputs:")), None)


def test_outputs_mutation_leaves_out_optional_outputs(seed_pool: SeedPool) -> None:
    ops = _optional_output_ops(seed_pool)
    assert {"Unique", "LSTM", "LayerNormalization", "Dropout"} <= ops
    gen = Generator(seed_pool, SEED, chain_probability=0.0, ops=ops)
    seeds = {s.name: s for s in seed_pool.seeds}
    mutated = [c for c in map(gen.case, range(60)) if _outputs_label(c)]
    assert len(mutated) >= 15
    assert {c.ops[0] for c in mutated} >= {"Unique", "LayerNormalization"}
    assert sum(map(_checks, mutated)) > 0.8 * len(mutated)  # other mutations may break some
    for case in mutated:
        model = onnx.load_from_string(case.model)
        node, seed = model.graph.node[0], seeds[case.seeds[0]]
        kept = [y for y in node.output if y]
        assert len(kept) < sum(1 for y in seed.node.output if y), case.id
        assert [o.name for o in model.graph.output] == kept
        assert _outputs_label(case) == "outputs:" + ",".join(y or "-" for y in node.output)


def _checks(case: FuzzCase) -> bool:
    try:
        onnx.checker.check_model(onnx.load_from_string(case.model), full_check=True)
    except onnx.checker.ValidationError:
        return False
    return True


def test_cases_without_it_are_what_they_were(
    seed_pool: SeedPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    cases = [Generator(seed_pool, SEED).case(i) for i in range(120)]
    monkeypatch.setattr(generate, "OUTPUTS_PROBABILITY", 0.0)
    before = [Generator(seed_pool, SEED).case(i) for i in range(120)]
    untouched = [(a, b) for a, b in zip(cases, before) if not _outputs_label(a)]
    assert len(untouched) > 100
    assert all(a.model == b.model and a.mutations == b.mutations for a, b in untouched)


@pytest.mark.parametrize("name", sorted(PROVIDERS))
def test_every_provider_runs_the_mutated_cases(
    name: str, fuzz_pool: Pool, require: Callable[[str], None], seed_pool: SeedPool
) -> None:
    provider = PROVIDERS[name]
    require(provider)
    gen = Generator(seed_pool, SEED, chain_probability=0.0, ops=_optional_output_ops(seed_pool))
    indices = [i for i in range(40) if _outputs_label(gen.case(i))]
    records = run_campaign(fuzz_pool, gen, [provider], indices)
    found = findings(records)
    assert not found, "\n".join(
        f"{r['id']} {r['mutations']}: {r['outcome']} {r.get('detail', '')}"
        f" | vs CPU: {r.get('vs_cpu', '-')} {r.get('vs_cpu_detail', '')}"
        for r in found
    )


# ------------------------------------------------------------------------------ the finding

BREAKER = "OutputCountBreakingExecutionProvider"
KERNELS = KernelRegistry(BREAKER)


@KERNELS.register("Relu", 14)
def _relu_with_an_extra_output(node: Any) -> Any:
    return lambda x: (np.maximum(x, 0), x)  # Relu has one output: a broken contract


class _Breaker(ExecutionProvider):
    name = BREAKER

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self.kernels = KERNELS


class _BreakerFactory(ProviderFactory):
    name = BREAKER

    def _create(self, options: dict[str, Any]) -> ExecutionProvider:
        return _Breaker(options)


def test_a_wrong_output_count_is_a_finding() -> None:
    x = np.array([-1.0, 2.0], np.float32)
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    case = FuzzCase("c", model.SerializeToString(), {"x": x}, ("Relu",))
    registry.register(_BreakerFactory())
    try:
        got = run_turnout(case, BREAKER)
    finally:
        registry.unregister(BREAKER)
    assert "wrong number of outputs" in got.error and not got.typed
    assert classify(got, run_turnout(case, PROVIDERS["cpu"]), "cpu", case)[0] == "bare-exception"
