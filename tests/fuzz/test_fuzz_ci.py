"""A short seeded fuzz campaign per provider: no unexplained crash, hang, bare exception or
mismatch. The long campaign is `python fuzz/run.py` (see fuzz/README.md)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from fuzz.campaign import findings, run_campaign
from fuzz.execute import PROVIDERS
from fuzz.generate import Generator
from fuzz.pool import Pool
from fuzz.seeds import SeedPool

SEED = 7
CASES = {"cpu": 300, "numba": 200, "opencl": 200}


def _explain(found: list[dict[str, object]], provider: str) -> str:
    lines = [f"{len(found)} unexplained fuzz finding(s) on {provider}:"]
    for r in found[:20]:
        index = str(r["id"]).rsplit("-", 1)[1]
        lines.append(
            f"  {r['id']} {r['ops']} {r['mutations']}: {r['outcome']} {r.get('detail', '')}"
            f" | vs CPU: {r.get('vs_cpu', '-')} {r.get('vs_cpu_detail', '')}\n"
            f"    replay: python fuzz/run.py --seed {SEED} --only {index} --provider {provider}"
        )
    lines.append("Fix the bug, or add a corpus entry (open bug) or a reviewed fuzz/known.py entry.")
    return "\n".join(lines)


@pytest.mark.parametrize("name", sorted(CASES))
def test_seeded_campaign(
    name: str, fuzz_pool: Pool, require: Callable[[str], None], seed_pool: SeedPool
) -> None:
    provider = PROVIDERS[name]
    require(provider)
    gen = Generator(seed_pool, SEED)
    records = run_campaign(fuzz_pool, gen, [provider], range(CASES[name]))
    assert len(records) == CASES[name]
    found = findings(records)
    assert not found, _explain(found, name)
