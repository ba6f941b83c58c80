"""The default thread count: physical cores of the process's CPUs, as onnxruntime counts them,
and what a session without `intra_op_num_threads` gets from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from turnout.providers.cpu.provider import CPUExecutionProvider
from turnout.sdk import blas_threads
from turnout.sdk.cores import default_thread_count, physical_cores


def _topology(root: Path, cpus: dict[int, tuple[int, int]]) -> Path:
    """A fake /sys/devices/system/cpu: logical cpu -> (package, core)."""
    for cpu, (package, core) in cpus.items():
        d = root / f"cpu{cpu}" / "topology"
        d.mkdir(parents=True)
        (d / "physical_package_id").write_text(f"{package}\n")
        (d / "core_id").write_text(f"{core}\n")
    return root


def test_hyperthreads_of_one_core_count_once(tmp_path: Path) -> None:
    topo = _topology(tmp_path, {0: (0, 0), 1: (0, 1), 2: (0, 0), 3: (0, 1)})
    assert physical_cores({0, 1, 2, 3}, topo) == 2
    assert physical_cores({0, 2}, topo) == 1  # affinity to one core's two threads


def test_cores_of_two_packages_are_distinct(tmp_path: Path) -> None:
    topo = _topology(tmp_path, {0: (0, 0), 1: (1, 0)})
    assert physical_cores({0, 1}, topo) == 2


def test_an_unreadable_topology_counts_logical_cpus(tmp_path: Path) -> None:
    assert physical_cores({0, 1, 2}, tmp_path / "missing") == 3
    assert physical_cores(set(), tmp_path / "missing") == 1


def test_the_default_is_at_least_one_and_cached() -> None:
    assert default_thread_count() >= 1
    assert default_thread_count() is default_thread_count()


@pytest.mark.parametrize("asked", [0, 1, 3])
def test_the_cpu_provider_holds_blas_to_the_count(asked: int) -> None:
    """0 means the default count: BLAS is managed (held and split by turnout) either way,
    never left to run its own threads beside the session's."""
    ep = CPUExecutionProvider({"intra_op_num_threads": asked})
    assert isinstance(ep._blas, blas_threads.BlasThreads)
    assert ep._blas.threads == (asked or default_thread_count())
