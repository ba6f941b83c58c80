"""turnout's benchmark suite: `python -m benchmarks` or `turnout bench` (see docs/benchmarks.md).

This module imports neither numpy nor turnout: `reexec_clean()` must run before either is
loaded, because OpenBLAS reads its environment when it is loaded.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Sequence

__all__ = ["BLAS_OVERRIDES", "blas_overrides_unset", "import_torch", "reexec_clean"]

# Set on some build machines for old OpenBLAS builds; they force slower kernels (numpy's sgemm
# runs at half speed). A user's machine does not have them, so the benchmark drops them.
BLAS_OVERRIDES = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
_MARK = "TURNOUT_BENCH_UNSET_ENV"

# Steady-state benchmarks time the compiled tier, so sessions wait for it at creation (their
# creation times include compiling, as before tiered kernels). `python -m benchmarks startup`
# sets this per child process: it times what users get by default as well.
os.environ.setdefault("TURNOUT_WAIT_FOR_COMPILED_TIER", "1")


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


def import_torch() -> None:
    """Import torch and set it to one thread (`--import-torch`), before numpy, numba or turnout
    are loaded when called first: applications load torch next to the runtime, and numba's
    threads must not stall beside torch's OpenMP runtime.

    Raises ImportError, saying what to do, when torch is not installed.
    """
    try:
        torch = importlib.import_module("torch")
    except ImportError as e:
        raise ImportError(
            f"--import-torch needs torch, which cannot be imported here ({e}); install it "
            "(`pip install torch`) or leave the flag out"
        ) from e
    torch.set_num_threads(1)
