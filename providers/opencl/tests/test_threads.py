"""One OpenCL session shared by many threads: no crash, and every output equal to the
single-thread result.

The threads run in a subprocess (`benchmarks/thread_stress.py`), so a crash inside the OpenCL
runtime (a segfault, a `free(): invalid size` abort) fails the test instead of killing pytest.
A tiny `sys.setswitchinterval` makes Python switch threads often, which turns a rare race into
a frequent one: before runs were serialized, 8 x 200 runs gave ~300 wrong outputs this way.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from turnout_opencl.factory import OpenCLProviderFactory

AVAIL = OpenCLProviderFactory().probe()
pytestmark = pytest.mark.skipif(not AVAIL.ok, reason=f"no OpenCL device: {AVAIL.reason}")
SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "thread_stress.py"


def _stress(*args: str, timeout: float) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--provider", "opencl", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode < 0:
        sig = signal.Signals(-proc.returncode).name
        pytest.fail(f"the threaded runs crashed with {sig}:\n{proc.stderr[-4000:]}")
    lines = proc.stdout.strip().splitlines()
    assert lines, f"no result (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
    res: dict[str, object] = json.loads(lines[-1])
    return res


def _check(res: dict[str, object]) -> None:
    assert res["placed"] == {"OpenCLExecutionProvider": 4}, res  # nothing fell back to CPU
    assert res["errors"] == 0, f"runs raised: {res['first_error']} ({res})"
    assert res["mismatches"] == 0, f"outputs differ from the single-thread run: {res}"


def test_threads_share_one_session_with_frequent_switches() -> None:
    switchy = ("--runs", "150", "--switch-interval", "1e-5")
    _check(_stress("--model", "small_classifier", *switchy, timeout=120))


@pytest.mark.slow
def test_threads_share_one_session_8x1000() -> None:
    _check(_stress("--model", "small_classifier", "--runs", "1000", timeout=600))
