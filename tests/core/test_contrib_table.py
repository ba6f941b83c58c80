"""docs/contrib-ops.md is what `python -m turnout.tools.contrib_table` prints now: the supported
columns come from the kernel registries, so a kernel added or dropped without regenerating the
page fails here."""

from __future__ import annotations

from pathlib import Path

from turnout.graph.contrib import DOCUMENTED_OPS, DOMAIN
from turnout.providers.cpu.registry import CPU_KERNELS
from turnout.tools.contrib_table import installed_kernels, render

PAGE = Path(__file__).resolve().parents[2] / "docs" / "contrib-ops.md"


def test_contrib_table_is_current() -> None:
    want = render(installed_kernels())
    assert PAGE.read_text() == want, (
        "docs/contrib-ops.md is stale: python -m turnout.tools.contrib_table > docs/contrib-ops.md"
    )


def test_table_marks_every_cpu_contrib_kernel() -> None:
    page = PAGE.read_text()
    cpu_ops = {op for domain, op in CPU_KERNELS.ops() if domain == DOMAIN}
    assert cpu_ops, "the CPU provider registers com.microsoft kernels"
    assert cpu_ops <= DOCUMENTED_OPS
    for op in cpu_ops:
        assert f"| {op} | yes | CPUExecutionProvider" in page, op
