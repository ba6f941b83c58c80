"""The worker pool survives what a case does to its worker: abort, hang, memory blow-up."""

from __future__ import annotations

from fuzz.generate import FuzzCase
from fuzz.pool import Pool


def test_crash_hang_and_memory_are_recorded_and_the_run_goes_on() -> None:
    case = FuzzCase("c", b"", {}, ())
    tasks = [(case, p) for p in ("ok", "abort", "ok", "hang", "memory", "ok")]
    fake = "fuzz.fakes:misbehaving_execute"
    with Pool(jobs=1, timeout=3.0, memory_mb=2048, execute=fake) as pool:
        got = [(p, rec) for _, p, rec in pool.run(tasks)]
    outcomes = [rec["outcome"] for _, rec in got]
    assert outcomes[:4] == ["ok", "crash", "ok", "hang"]
    assert outcomes[4] == "harness-error" and "MemoryError" in got[4][1]["detail"]
    assert outcomes[5] == "ok"
    assert "in abort: killed by SIGABRT" in got[1][1]["detail"]
    assert got[3][1]["detail"].startswith("in hang:")
    assert got[0][1]["pid"] != got[2][1]["pid"]  # a fresh worker after the crash
