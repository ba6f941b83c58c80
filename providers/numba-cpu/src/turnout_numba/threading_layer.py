"""Which numba threading layer runs the parallel kernels, chosen before numba starts its threads.

numba picks its layer at the first parallel launch, TBB first, then OpenMP, then its own
workqueue. pip's `tbb` wheel puts `libtbb.so.12` in the environment's `lib/`, which the dynamic
loader does not search, so numba fell through to OpenMP. Sharing OpenMP with torch (imported
first, `torch.set_num_threads(1)`, as voice-activity packages do) stalled every parallel kernel
for a scheduler slice: 7-8 ms instead of 0.02 ms, in 10 of 13 processes.

The choice, unless the user set `NUMBA_THREADING_LAYER` (numba reads it; we leave it alone, but
load the `tbb` package's library when the layer asked for may use it, or numba would refuse
"tbb" with "No threading layer could be loaded" although tbb is installed):
1. TBB when the `tbb` package is installed (a dependency of turnout-numba where wheels exist):
   its library is loaded by path, then the layer is set. TBB composes with other thread pools
   and is safe for runs from many threads.
2. Otherwise, if an OpenMP runtime is already loaded in this process by someone else, numba's
   workqueue, which starts no OpenMP team. workqueue is not safe for launches from two threads
   at once, so parallel runs of this provider then take `PARALLEL_RUN_LOCK` one at a time.
3. Otherwise numba's own default order.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import sys
import threading
from importlib import metadata
from pathlib import Path

from .cache import NUMBA_CONFIG

__all__ = ["PARALLEL_RUN_LOCK", "choose_layer", "chosen_layer", "decide_layer", "run_lock"]

_OPENMP_LIBRARIES = ("libgomp", "libiomp", "libomp.")
_LAYERS_THAT_MAY_USE_TBB = ("", "tbb", "default", "safe", "threadsafe")
_CHOSEN: list[str] = []
_CHOICE_LOCK = threading.Lock()
PARALLEL_RUN_LOCK = threading.RLock()
"""Taken around each parallel run when the layer is workqueue (not safe from two threads)."""


def decide_layer(user_layer: str, tbb_loaded: bool, openmp_loaded: bool) -> str:
    """The layer to use: the user's, else "tbb", else "workqueue" beside a foreign OpenMP
    runtime, else "default" (numba's own order)."""
    if user_layer:
        return user_layer
    if tbb_loaded:
        return "tbb"
    if openmp_loaded:
        return "workqueue"
    return "default"


def choose_layer() -> str:
    """Decide once per process and set numba's config; call before the first parallel launch."""
    with _CHOICE_LOCK:
        if not _CHOSEN:
            user = os.environ.get("NUMBA_THREADING_LAYER", "").strip()
            openmp = _openmp_loaded()
            # numba only finds the `tbb` package's library once it is loaded by path, whether
            # we pick TBB or the user asks for a layer that may use it ("tbb", "safe", ...)
            tbb = user.lower() in _LAYERS_THAT_MAY_USE_TBB and _load_tbb()
            layer = decide_layer(user, tbb, openmp)
            if not user:
                NUMBA_CONFIG.THREADING_LAYER = layer
            _CHOSEN.append(layer)
        return _CHOSEN[0]


def chosen_layer() -> str | None:
    """The layer `choose_layer()` picked in this process, or None before it ran."""
    return _CHOSEN[0] if _CHOSEN else None


def run_lock() -> threading.RLock | None:
    """The lock parallel runs must hold, or None when the layer is safe from many threads."""
    layer = _CHOSEN[0] if _CHOSEN else str(NUMBA_CONFIG.THREADING_LAYER)
    return PARALLEL_RUN_LOCK if layer == "workqueue" else None


def _load_tbb() -> bool:
    """Load libtbb from the `tbb` package by path, so that numba's TBB layer can link to it."""
    for path in _tbb_library_paths():
        try:
            ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
        except OSError:
            continue
        try:  # fails if the TBB found is too old for numba
            importlib.import_module("numba.np.ufunc.tbbpool")
        except ImportError:
            return False
        return True
    return False


def _tbb_library_paths() -> list[Path]:
    try:
        files = metadata.distribution("tbb").files or []
    except metadata.PackageNotFoundError:
        return []
    name = "tbb12.dll" if sys.platform == "win32" else "libtbb.so.12"
    if sys.platform == "darwin":
        name = "libtbb.12.dylib"
    return [Path(str(f.locate())) for f in files if f.name == name]


def _openmp_loaded() -> bool:
    """Whether an OpenMP runtime is mapped into this process already (Linux: /proc/self/maps;
    elsewhere unknown, so False)."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            maps = f.read()
    except OSError:
        return False
    return any(lib in maps for lib in _OPENMP_LIBRARIES)
