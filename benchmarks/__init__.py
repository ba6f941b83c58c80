"""turnout's benchmark suite: `python -m benchmarks` or `turnout bench` (see docs/benchmarks.md).

This module imports neither numpy nor turnout: `reexec_clean()` must run before either is
loaded, because OpenBLAS reads its environment when it is loaded.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence

__all__ = ["BLAS_OVERRIDES", "blas_overrides_unset", "reexec_clean"]

# Set on some build machines for old OpenBLAS builds; they force slower kernels (numpy's sgemm
# runs at half speed). A user's machine does not have them, so the benchmark drops them.
BLAS_OVERRIDES = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
_MARK = "TURNOUT_BENCH_UNSET_ENV"


def reexec_clean(argv: Sequence[str]) -> None:
    """Re-execute `python *argv` without BLAS_OVERRIDES if any is set (this process only).

    Returns without doing anything when none is set; otherwise does not return. What was unset
    is passed on in an environment variable so the report can say so.
    """
    found = {k: os.environ[k] for k in BLAS_OVERRIDES if k in os.environ}
    if not found:
        return
    env = {k: v for k, v in os.environ.items() if k not in BLAS_OVERRIDES}
    env[_MARK] = json.dumps({**blas_overrides_unset(), **found})
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *argv], env)


def blas_overrides_unset() -> dict[str, str]:
    """The overrides `reexec_clean` removed for this process ({} when none were set)."""
    try:
        value = json.loads(os.environ.get(_MARK, "{}"))
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
