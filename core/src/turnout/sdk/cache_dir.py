"""Where turnout keeps what it computes once for later processes: one rule for every cache.

Compiled kernels (turnout-numba's, under `numba/`), measured placements (`placement/`) and
whatever a provider caches live under one root, so that `TURNOUT_CACHE_DIR` moves (or a CI run
empties) all of them at once.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = ["cache_root"]


def cache_root() -> Path:
    """`$TURNOUT_CACHE_DIR`, else the user's cache folder (`$XDG_CACHE_HOME/turnout`,
    `~/.cache/turnout`; `%LOCALAPPDATA%\\turnout\\cache` on Windows). Not created here."""
    root = os.environ.get("TURNOUT_CACHE_DIR")
    if root:
        return Path(root)
    if sys.platform == "win32":
        return Path(os.environ.get("LOCALAPPDATA", Path.home())) / "turnout" / "cache"
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "turnout"
