"""The worker pool survives what a case does to its worker: abort, hang, memory blow-up."""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
import pytest

import fuzz.execute
from fuzz.generate import FuzzCase
from fuzz.pool import Pool


def _fake_execute(case: FuzzCase, provider: str, stage: Any) -> dict[str, Any]:
    stage(provider)
    if provider == "abort":
        os.abort()
    if provider == "hang":
        time.sleep(60)
    if provider == "memory":
        np.ones(2**34, np.uint8)  # 16 GiB: over the worker's address-space limit
    return {"outcome": "ok", "pid": os.getpid()}


def test_crash_hang_and_memory_are_recorded_and_the_run_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(fuzz.execute, "execute", _fake_execute)  # forked workers inherit it
    case = FuzzCase("c", b"", {}, ())
    tasks = [(case, p) for p in ("ok", "abort", "ok", "hang", "memory", "ok")]
    with Pool(jobs=1, timeout=3.0, memory_mb=2048) as pool:
        got = [(p, rec) for _, p, rec in pool.run(tasks)]
    outcomes = [rec["outcome"] for _, rec in got]
    assert outcomes[:4] == ["ok", "crash", "ok", "hang"]
    assert outcomes[4] == "harness-error" and "MemoryError" in got[4][1]["detail"]
    assert outcomes[5] == "ok"
    assert "in abort: killed by SIGABRT" in got[1][1]["detail"]
    assert got[3][1]["detail"].startswith("in hang:")
    assert got[0][1]["pid"] != got[2][1]["pid"]  # a fresh worker after the crash
