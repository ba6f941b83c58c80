"""Node-test coverage of the OpenCL provider, in isolation and in fallback mode.

Isolated: `so.fallback = "error"`, providers=["OpenCLExecutionProvider"]; a FallbackError (or
no provider at all) at session creation is a decline ("unclaimed"). Fallback: "allow", with the
CPU provider behind it; every case must pass. Claimed-and-failing cases not in the reviewed
list (`turnout_opencl.expected_failures`) make the exit status 1.

    python scripts/node_coverage.py [-j JOBS] [--filter REGEX] [--json OUT] [--show-unclaimed]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import re
import sys
import time
import warnings
from collections import Counter
from typing import Any

import numpy as np

PROVIDER = "OpenCLExecutionProvider"
_CASES: Any = None


def _run_case(args: tuple[int, str]) -> tuple[str, str, str, float]:
    import turnout
    from turnout.graph import errors
    from turnout.tools.testing import assert_outputs_close, normalize_values

    i, mode = args
    case = _CASES[i]
    t0 = time.perf_counter()
    so = turnout.SessionOptions()
    so.fallback = "error" if mode == "isolated" else "allow"
    providers = [PROVIDER] if mode == "isolated" else [PROVIDER, "CPUExecutionProvider"]
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            sess = turnout.InferenceSession(case.model, so, providers=providers)
        except (errors.FallbackError, errors.NotImplemented) as e:
            if mode == "isolated":
                return case.name, "unclaimed", str(e)[:600], time.perf_counter() - t0
            return case.name, "failed", f"creation: {e}"[:600], time.perf_counter() - t0
        except Exception as e:
            return case.name, "failed", f"creation: {type(e).__name__}: {e}"[:900], 0.0
        try:
            args_ = sess.get_inputs()
            for inputs, outputs in case.data_sets:
                feeds = {a.name: v for a, v in zip(args_, normalize_values(inputs))}
                got = sess.run(None, feeds)
                assert_outputs_close(normalize_values(outputs), got, case.rtol, case.atol)
        except AssertionError as e:
            return case.name, "failed", f"wrong outputs: {e}"[:900], time.perf_counter() - t0
        except Exception as e:
            return case.name, "failed", f"run: {type(e).__name__}: {e}"[:900], 0.0
    return case.name, "passed", "", time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    global _CASES
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--filter", default=None, help="regex on case names")
    ap.add_argument("--modes", default="isolated,fallback")
    ap.add_argument("--json", default=None, help="write every result here")
    ap.add_argument("--show-unclaimed", action="store_true")
    a = ap.parse_args(argv)
    os.environ.setdefault("POCL_MAX_PTHREAD_COUNT", "1")  # one PoCL thread per worker process
    from turnout.tools.testing import _all_node_cases
    from turnout_opencl.expected_failures import EXPECTED_FAILURES

    cases = list(_all_node_cases())
    if a.filter:
        cases = [c for c in cases if re.search(a.filter, c.name)]
    _CASES = cases
    results: dict[str, list[tuple[str, str, str, float]]] = {}
    t_all = time.perf_counter()
    for mode in a.modes.split(","):
        t0 = time.perf_counter()
        ctx = mp.get_context("fork")
        with ctx.Pool(a.jobs, maxtasksperchild=50) as pool:
            res = pool.map(_run_case, [(i, mode) for i in range(len(cases))], chunksize=4)
        results[mode] = res
        counts = Counter(r[1] for r in res)
        took = time.perf_counter() - t0
        if mode == "isolated":
            claimed = counts["passed"] + counts["failed"]
            print(
                f"isolated: {len(res)} cases, claimed {claimed}, passed {counts['passed']}, "
                f"failed {counts['failed']}, unclaimed {counts['unclaimed']} ({took:.0f} s)"
            )
        else:
            print(
                f"fallback: {len(res)} cases, passed {counts['passed']}, "
                f"failed {counts['failed']} ({took:.0f} s)"
            )
    unexpected = 0
    for mode, res in results.items():
        for name, status, msg, _ in res:
            listed = any(re.fullmatch(k, name) for k in EXPECTED_FAILURES)
            if status == "failed":
                tag = "expected" if listed else "UNEXPECTED"
                unexpected += 0 if listed else 1
                print(f"  {mode} {tag} failure {name}: {msg[:300]}")
            elif status == "passed" and listed and mode == "isolated":
                print(f"  stale expected-failure entry: {name} passes")
            elif status == "unclaimed" and a.show_unclaimed:
                print(f"  unclaimed {name}: {msg[:200]}")
    print(f"total {time.perf_counter() - t_all:.0f} s; unexpected failures: {unexpected}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({m: [list(r) for r in res] for m, res in results.items()}, f, indent=1)
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
