"""The generator: deterministic per (seed, index), varied, and its saved cases round-trip."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx

from fuzz.execute import compare_outputs
from fuzz.generate import FuzzCase, Generator
from fuzz.seeds import NONDETERMINISTIC, SeedPool


def test_a_case_is_a_function_of_seed_and_index(seed_pool: SeedPool) -> None:
    a, b = Generator(seed_pool, 3).case(11), Generator(seed_pool, 3).case(11)
    assert a.model == b.model and a.mutations == b.mutations
    assert all(np.array_equal(a.feeds[k], b.feeds[k]) for k in a.feeds)
    assert Generator(seed_pool, 4).case(11).model != a.model


def test_cases_cover_ops_chains_and_mutations(seed_pool: SeedPool) -> None:
    cases = [Generator(seed_pool, 0).case(i) for i in range(300)]
    ops = {op for c in cases for op in c.ops}
    assert len(ops) > 80 and not ops & NONDETERMINISTIC
    lengths = Counter(len(c.ops) for c in cases)
    assert lengths[1] and sum(n for k, n in lengths.items() if k > 1) > 10
    kinds = {m.split(":")[0].lstrip("n0123456789:") for c in cases for m in c.mutations}
    assert {"values", "specials", "dtype", "freeze", "dynamic"} <= kinds
    valid = sum(_checks(c) for c in cases)
    assert valid > 0.7 * len(cases)  # mostly valid models: outputs get compared, not only errors


def _checks(case: FuzzCase) -> bool:
    try:
        onnx.checker.check_model(onnx.load_from_string(case.model), full_check=True)
    except Exception:
        return False
    return True


def test_saved_case_round_trips(seed_pool: SeedPool, tmp_path: Path) -> None:
    case = Generator(seed_pool, 1).case(5)
    model_path, _ = case.save(tmp_path, "c")
    back = FuzzCase.load(model_path)
    assert onnx.load_from_string(back.model) == onnx.load_from_string(case.model)
    assert sorted(back.feeds) == sorted(case.feeds)


def test_compare_reports_the_difference() -> None:
    x = np.array([1.0, np.nan, np.inf], np.float32)
    assert compare_outputs([x], [x.copy()], 1e-3, 1e-7) is None
    d = compare_outputs([x + np.float32(1)], [x], 1e-3, 1e-7)
    assert d is not None and d.max_abs == 1.0
    assert "NaN on one side" in compare_outputs([np.zeros(3, np.float32)], [x], 0, 0).detail  # type: ignore[union-attr]
    assert "shape" in compare_outputs([x[:2]], [x], 0, 0).detail  # type: ignore[union-attr]
