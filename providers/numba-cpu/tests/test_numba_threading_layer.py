"""The threading layer turnout-numba picks: TBB where the `tbb` package is installed, numba's
workqueue (one parallel run at a time) beside a foreign OpenMP runtime, the user's choice when
`NUMBA_THREADING_LAYER` is set. These tests assert the choice, never a time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata

import pytest

from turnout_numba.threading_layer import decide_layer

_CHILD = """
import json, sys
if "--openmp-first" in sys.argv:
    import ctypes, ctypes.util
    ctypes.CDLL(ctypes.util.find_library("gomp"), mode=ctypes.RTLD_GLOBAL)
import numpy as np
import numba
import turnout
from turnout_testbed import zoo
from turnout_numba import threading_layer

sess = turnout.InferenceSession(
    zoo.small_classifier().SerializeToString(),
    providers=[("NumbaExecutionProvider", {"intra_op_num_threads": 2})],
)
sess.run(None, {"x": np.ones((4, 32), np.float32)})
print(json.dumps({
    "chosen": threading_layer.chosen_layer(),
    "numba": numba.threading_layer(),
    "locked": threading_layer.run_lock() is not None,
}))
"""


def _child(*args: str, env: dict[str, str] | None = None) -> dict[str, object]:
    environ = {k: v for k, v in os.environ.items() if k != "NUMBA_THREADING_LAYER"}
    environ.update(env or {})
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, *args],
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize(
    ("user", "tbb", "openmp", "expected"),
    [
        ("omp", True, True, "omp"),
        ("", True, True, "tbb"),
        ("", True, False, "tbb"),
        ("", False, True, "workqueue"),
        ("", False, False, "default"),
    ],
)
def test_decision_table(user: str, tbb: bool, openmp: bool, expected: str) -> None:
    assert decide_layer(user, tbb, openmp) == expected


def _tbb_installed() -> bool:
    try:
        metadata.distribution("tbb")
    except metadata.PackageNotFoundError:
        return False
    return True


@pytest.mark.skipif(not _tbb_installed(), reason="the tbb package is not installed here")
@pytest.mark.parametrize("first", [[], ["--openmp-first"]], ids=["alone", "openmp-loaded-first"])
def test_tbb_is_chosen_and_used(first: list[str]) -> None:
    """With tbb installed, numba runs on TBB even when an OpenMP runtime was loaded first (as
    torch loads one): TBB shares no state with it, and runs from many threads are safe."""
    got = _child(*first)
    assert got == {"chosen": "tbb", "numba": "tbb", "locked": False}


def test_user_choice_is_kept_and_workqueue_serializes_runs() -> None:
    got = _child(env={"NUMBA_THREADING_LAYER": "workqueue"})
    assert got == {"chosen": "workqueue", "numba": "workqueue", "locked": True}


@pytest.mark.skipif(not _tbb_installed(), reason="the tbb package is not installed here")
def test_user_asking_for_tbb_gets_it() -> None:
    """NUMBA_THREADING_LAYER=tbb with the tbb package installed: the library is loaded by path
    for numba (without it, session creation failed: "No threading layer could be loaded")."""
    got = _child(env={"NUMBA_THREADING_LAYER": "tbb"})
    assert got == {"chosen": "tbb", "numba": "tbb", "locked": False}
