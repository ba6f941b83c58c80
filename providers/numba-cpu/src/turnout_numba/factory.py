"""NumbaProviderFactory: probe (numba's version and the CPU, or why numba cannot load) and
create (validated options)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from turnout.sdk.provider import (
    CONTRACT_VERSION,
    Availability,
    DeviceEntry,
    ExecutionProvider,
    ProviderFactory,
)
from turnout.sdk.provider_options import ProviderOption

from . import __version__

__all__ = ["NumbaProviderFactory"]


class NumbaProviderFactory(ProviderFactory):
    name = "NumbaExecutionProvider"
    aliases = ("numba",)
    default_priority = 100
    serves_cpu_requests = True  # CPUExecutionProvider requests run here first (numpy behind)
    options = (
        ProviderOption(
            "intra_op_num_threads",
            (int,),
            0,
            "Threads for the parallel kernels (0: numba's thread count, every core); "
            "SessionOptions.intra_op_num_threads sets it. 1 compiles serial kernels.",
            minimum=0,
        ),
        ProviderOption(
            "fuse", (bool,), True, "Compile each fused elementwise group into one kernel."
        ),
    )
    version = __version__
    vendor = "turnout"
    contract_version = CONTRACT_VERSION
    device_type = "cpu"  # the one device declaration: probe entries and the provider read it

    def _probe(self) -> Availability:
        try:
            import llvmlite.binding as ll
            import numba
        except Exception as e:  # the exact reason numba cannot import
            return Availability(False, reason=f"numba cannot be imported: {type(e).__name__}: {e}")
        from .cache import NUMBA_CONFIG, cache_dir

        meta = {
            "numba": numba.__version__,
            "cpu": ll.get_host_cpu_name(),
            "threads": str(NUMBA_CONFIG.NUMBA_NUM_THREADS),
            "cache_dir": str(cache_dir()),
        }
        entry = DeviceEntry(self.device(), meta, self.default_options())
        return Availability(True, (entry,), version=__version__)

    def _create(self, options: dict[str, Any]) -> ExecutionProvider:
        from .provider import NumbaExecutionProvider

        return NumbaExecutionProvider(options, self)

    def expected_failures(self) -> Mapping[str, str]:
        from .expected_failures import EXPECTED_FAILURES

        return EXPECTED_FAILURES
