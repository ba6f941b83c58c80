"""Built OpenCL programs, cached in memory and on disk.

The key is a hash of the source, the build options, the device name and the driver version, so
a driver update or another device never loads a stale binary. Binaries go to
`$TURNOUT_CACHE_DIR/opencl` (default `~/.cache/turnout/opencl`); a missing or unreadable
directory only disables the disk cache. Programs are built while the session is created.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path
from typing import Any, cast

import pyopencl as cl

from .logs import log

__all__ = ["ProgramCache", "cache_dir"]


def cache_dir() -> Path:
    base = os.environ.get("TURNOUT_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "turnout"
    )
    return Path(base) / "opencl"


class ProgramCache:
    """Programs of one context and device: `get(source)` builds once, then reuses."""

    def __init__(self, context: cl.Context, device: cl.Device, options: str = "") -> None:
        self.context = context
        self.device = device
        self.options = options
        self._mem: dict[str, Any] = {}
        self._lock = threading.Lock()
        self.builds = 0
        self.disk_hits = 0
        ident = f"{device.name}|{device.driver_version}|{device.platform.version}|{options}"
        self._ident = ident.encode()

    def key(self, source: str) -> str:
        return hashlib.sha256(self._ident + b"\0" + source.encode()).hexdigest()

    def get(self, source: str) -> Any:
        key = self.key(source)
        with self._lock:
            prg = self._mem.get(key)
            if prg is None:
                prg = self._mem[key] = self._load_or_build(key, source)
            return prg

    def _load_or_build(self, key: str, source: str) -> Any:
        path = cache_dir() / key[:2] / f"{key}.bin"
        try:
            binary = path.read_bytes()
        except OSError:
            binary = None
        if binary:
            try:
                prg = cl.Program(self.context, [self.device], [binary]).build(self.options)
                self.disk_hits += 1
                return prg
            except cl.Error as e:  # corrupt or foreign binary: rebuild from source
                log.debug("opencl cache entry %s unusable: %s", path, e)
        raw = cl._cl._Program(self.context, source)
        try:
            raw._build(options=self.options.encode(), devices=[self.device])
        except cl.Error as e:
            try:
                build_log = raw.get_build_info(self.device, cl.program_build_info.LOG)
            except cl.Error:
                build_log = ""
            raise RuntimeError(
                f"OpenCL build failed: {e}\n{build_log}\n--- source ---\n{source}"
            ) from e
        self.builds += 1
        prg = cl.Program(raw)
        try:
            binaries = cast("list[bytes]", raw.get_info(cl.program_info.BINARIES))  # per device
            (data,) = binaries
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_bytes(bytes(data))
            os.replace(tmp, path)
        except (OSError, cl.Error, ValueError) as e:
            log.debug("opencl program not cached on disk: %s", e)
        return prg
