"""How much of the ONNX node-test suite the numba provider claims and passes in isolation.

    python providers/numba-cpu/scripts/node_coverage.py [-j JOBS] [-k SUBSTRING] [--json PATH]

Each case runs as a session with providers=["NumbaExecutionProvider"] and fallback "error": a
FallbackError at session creation means the provider declined a node (unclaimed). A claimed case
passes when every data set matches the expected outputs. Cases listed in the provider's
expected-failures list are counted apart. Prints counts by outcome and by node source
(numba-compiled vs numpy kernel), then the claimed-and-failing cases.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import re
import sys
import time
import warnings
from collections import Counter


def _run_case(i: int) -> tuple[str, str, str, dict[str, int]]:
    import numpy as np

    import turnout
    from turnout.graph.errors import FallbackError
    from turnout.tools.testing import _all_node_cases, assert_outputs_close, normalize_values

    case = _all_node_cases()[i]
    so = turnout.SessionOptions()
    so.fallback = "error"
    sources: dict[str, int] = {}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sess = turnout.InferenceSession(
                case.model.SerializeToString(), so, providers=["NumbaExecutionProvider"]
            )
    except FallbackError as e:
        return case.name, "unclaimed", str(e).splitlines()[-1][:300], sources
    except Exception as e:
        return case.name, "failed", f"create: {type(e).__name__}: {str(e)[:300]}", sources
    for a in sess.partition_report().assignments:
        sources[a.source] = sources.get(a.source, 0) + 1
    names = [
        x.name for x in sess._engine.graph.inputs if x.name not in sess._engine.graph.initializers
    ]
    try:
        for inputs, expected in case.data_sets:
            feeds = dict(zip(names, normalize_values(inputs)))
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                got = sess.run(None, feeds)
            assert_outputs_close(normalize_values(expected), got, case.rtol, case.atol)
    except Exception as e:
        msg = str(e).strip().splitlines()
        return case.name, "failed", f"{type(e).__name__}: {' '.join(msg[:3])[:300]}", sources
    return case.name, "passed", "", sources


def _init() -> None:
    warnings.simplefilter("ignore")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-j", "--jobs", type=int, default=mp.cpu_count())
    ap.add_argument("-k", default="", help="only cases whose name contains this")
    ap.add_argument("--json", help="write per-case results here")
    ap.add_argument("-v", action="store_true", help="list unclaimed cases with their reasons")
    args = ap.parse_args(argv)

    from turnout.tools.testing import _all_node_cases
    from turnout_numba.factory import NumbaProviderFactory

    expected = NumbaProviderFactory().expected_failures()
    cases = _all_node_cases()
    todo = [i for i, c in enumerate(cases) if args.k in c.name]
    t0 = time.time()
    if args.jobs > 1:
        with mp.get_context("fork").Pool(args.jobs, initializer=_init) as pool:
            results = pool.map(_run_case, todo, chunksize=8)
    else:
        results = [_run_case(i) for i in todo]
    counts: Counter[str] = Counter()
    sources: Counter[str] = Counter()
    failing: list[tuple[str, str]] = []
    for name, outcome, why, src in results:
        listed = name in expected or any(
            re.fullmatch(k, name) for k in expected if not k.startswith("test_")
        )
        if outcome == "failed" and listed:
            outcome = "expected failure"
        elif outcome == "passed" and listed:
            outcome = "passed but listed as expected failure"
        counts[outcome] += 1
        if outcome == "failed":
            failing.append((name, why))
        if outcome == "passed":
            sources.update(src)
    print(f"{len(results)} node cases in {time.time() - t0:.0f} s")
    outcomes = ("passed", "failed", "expected failure", "unclaimed")
    for k in (*outcomes, "passed but listed as expected failure"):
        print(f"  {k:<40} {counts.get(k, 0)}")
    by_source = ", ".join(f"{k}={v}" for k, v in sources.most_common())
    print(f"  nodes in passing cases by source: {by_source}")
    for name, why in failing:
        print(f"FAIL {name}: {why}")
    if args.v:
        for name, outcome, why, _ in results:
            if outcome == "unclaimed":
                print(f"UNCLAIMED {name}: {why}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([dict(zip(("name", "outcome", "why", "sources"), r)) for r in results], f)
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
