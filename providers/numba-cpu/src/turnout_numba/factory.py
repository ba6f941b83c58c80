"""NumbaProviderFactory: probe (numba's version and the CPU, or why numba cannot load) and
create (validated options)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from turnout.errors import InvalidArgument
from turnout.provider import (
    CPU,
    Availability,
    DeviceEntry,
    ExecutionProvider,
    ProviderFactory,
    nonnegative_int_option,
)

from . import __version__

__all__ = ["NumbaProviderFactory"]

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


class NumbaProviderFactory(ProviderFactory):
    name = "NumbaExecutionProvider"
    aliases = ("numba",)
    default_priority = 100
    serves_cpu_requests = True  # CPUExecutionProvider requests run here first (numpy behind)
    option_names = frozenset({"intra_op_num_threads", "fuse"})
    version = __version__
    vendor = "turnout"

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
        defaults = {"intra_op_num_threads": 0, "fuse": True}
        return Availability(True, (DeviceEntry(CPU, meta, defaults),), version=__version__)

    def _create(self, options: dict[str, Any]) -> ExecutionProvider:
        opts: dict[str, Any] = {}
        if "intra_op_num_threads" in options:
            opts["intra_op_num_threads"] = nonnegative_int_option(
                self.name,
                "intra_op_num_threads",
                options["intra_op_num_threads"],
                f" (0: all {os.cpu_count()} cores)",
            )
        if "fuse" in options:
            raw = options["fuse"]
            if isinstance(raw, bool):
                opts["fuse"] = raw
            elif str(raw).lower() in _TRUE | _FALSE:
                opts["fuse"] = str(raw).lower() in _TRUE
            else:
                raise InvalidArgument(f"{self.name}: fuse must be a boolean, not {raw!r}")
        from .provider import NumbaExecutionProvider

        return NumbaExecutionProvider(opts)

    def expected_failures(self) -> Mapping[str, str]:
        from .expected_failures import EXPECTED_FAILURES

        return EXPECTED_FAILURES
