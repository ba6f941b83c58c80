"""The numba provider's compiled blobs: its kernel sources and numba's cache entries for them.

Every kernel of this provider is a generated module in the cache (`cache.load_source`), and
numba keeps its compiled code next to it, keyed by the module file and its timestamp. A compiled
model carries both, with the timestamps, so that on another machine (same numba, CPU and
turnout-numba: the compatibility string says so) numba finds the entries and loads them: no
kernel is compiled again.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import llvmlite.binding as ll
from numba.core.caching import UserProvidedCacheLocator

from turnout.graph.errors import Fail

from . import cache

__all__ = ["compatibility", "export_blobs", "import_blobs"]

_MANIFEST = "manifest.json"
_MODULE = re.compile(r"turnout_numba_gen_[a-z0-9_]+_([0-9a-f]{20})")  # hints: "qgemm_s8"...
_ENTRY = re.compile(r"[A-Za-z0-9_.-]+")


def compatibility(parallel: bool, fuse: bool) -> str:
    """numba, the CPU (name and features: they shape the machine code), turnout-numba, and
    the options that change what is compiled."""
    features = hashlib.sha256(ll.get_host_cpu_features().flatten().encode()).hexdigest()[:12]
    return f"{cache.cache_key()} features={features} parallel={parallel} fuse={fuse}"


def _numba_dir(source: Path) -> Path:
    """Where numba keeps the entries of functions defined in `source` (its own rule)."""
    locator: Any = UserProvidedCacheLocator
    subpath = str(locator.get_suitable_cache_subpath(str(source)))
    return cache.cache_dir() / subpath


def export_blobs(modules: Iterable[str]) -> dict[str, bytes]:
    """The kernel modules named in `modules` (one session's: `cache.recording`), with numba's
    entries for them. Modules other sessions of the process loaded stay out: an artifact
    carries only its own model's kernels."""
    blobs: dict[str, bytes] = {}
    stamps: dict[str, int] = {}
    loaded = cache.loaded_modules()
    for name in sorted(modules):
        source = loaded.get(name)
        if source is None:
            continue  # recorded names are loaded modules; this guards a foreign name
        entries = sorted(_numba_dir(source).glob(f"{name}.*"))
        if not source.is_file() or not entries:
            continue  # compiled without a writable cache: nothing numba could load
        blobs[f"src/{name}.py"] = source.read_bytes()
        stamps[name] = source.stat().st_mtime_ns
        for entry in entries:
            blobs[f"numba/{entry.name}"] = entry.read_bytes()
    if blobs:
        blobs[_MANIFEST] = json.dumps({"mtime_ns": stamps}, sort_keys=True).encode()
    return blobs


def import_blobs(blobs: Mapping[str, bytes]) -> None:
    """Write the modules and their numba entries into this machine's cache, unless the same
    module is already there with entries of its own."""
    try:
        stamps = json.loads(blobs[_MANIFEST])["mtime_ns"]
    except (KeyError, ValueError, TypeError) as e:
        raise Fail(f"NumbaExecutionProvider: compiled data without a usable manifest ({e})") from e
    src_dir = cache.cache_dir() / "src"
    src_dir.mkdir(parents=True, exist_ok=True)
    for name, mtime_ns in stamps.items():
        text = blobs.get(f"src/{name}.py")
        named = _MODULE.fullmatch(str(name))
        if text is None or named is None:
            raise Fail(f"NumbaExecutionProvider: compiled data lacks the source of {name!r}")
        if hashlib.sha256(text).hexdigest()[:20] != named.group(1):
            raise Fail(f"NumbaExecutionProvider: the source of {name} does not match its name")
        source = src_dir / f"{name}.py"
        numba_dir = _numba_dir(source)
        if source.is_file() and source.read_bytes() == text and any(numba_dir.glob(f"{name}.*")):
            continue  # already in this cache
        _write(source, text)
        os.utime(source, ns=(int(mtime_ns), int(mtime_ns)))  # numba's index checks the stamp
        numba_dir.mkdir(parents=True, exist_ok=True)
        for key, data in blobs.items():
            entry = key.removeprefix("numba/")
            if key.startswith(f"numba/{name}.") and _ENTRY.fullmatch(entry):
                _write(numba_dir / entry, data)


def _write(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(path.suffix + f".tmp{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)
