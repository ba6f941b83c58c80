"""The thread count a session gets when `intra_op_num_threads` is 0 (the default): the physical
cores this process may run on, as onnxruntime's CPU provider counts them.

Why a number and not "leave it to the libraries": with no count, numpy's OpenBLAS ran its own
threads and numba its own pool, each sized to every core, and neither does the work of a thread
that lost its core. With another busy process on the 2-core VM, ResNet-50 at the default took
622 ms a run against 34 ms with `intra_op_num_threads=2`, where turnout splits products itself
(`blas_threads`) and holds BLAS to one thread inside runs.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

__all__ = ["default_thread_count", "physical_cores"]

_TOPOLOGY = Path("/sys/devices/system/cpu")


def _usable_cpus() -> set[int]:
    if hasattr(os, "sched_getaffinity"):
        return set(os.sched_getaffinity(0))
    return set(range(os.cpu_count() or 1))


def physical_cores(cpus: set[int], topology: Path = _TOPOLOGY) -> int:
    """How many distinct physical cores the logical `cpus` sit on (hyperthreads of one core
    count once); `len(cpus)` where the topology cannot be read (not Linux, or hidden)."""
    cores: set[tuple[str, str]] = set()
    for cpu in cpus:
        base = topology / f"cpu{cpu}" / "topology"
        try:
            package = (base / "physical_package_id").read_text().strip()
            core = (base / "core_id").read_text().strip()
        except OSError:
            return max(1, len(cpus))
        cores.add((package, core))
    return max(1, len(cores))


@functools.cache
def default_thread_count() -> int:
    """The intra-op thread count of a session that does not set one (computed once per
    process; a process that changes its affinity later keeps the first answer)."""
    return physical_cores(_usable_cpus())
