"""A stand-in for `execute` that misbehaves on purpose, for the pool's own tests (a worker is
a separate process, so the fake must be importable by name there)."""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from .generate import FuzzCase


def misbehaving_execute(case: FuzzCase, provider: str, stage: Any) -> dict[str, Any]:
    """Do what the provider name says: abort, hang, blow the memory limit, or succeed."""
    stage(provider)
    if provider == "abort":
        os.abort()
    if provider == "hang":
        time.sleep(60)
    if provider == "memory":
        np.ones(2**34, np.uint8)  # 16 GiB: over the worker's address-space limit
    return {"outcome": "ok", "pid": os.getpid()}
