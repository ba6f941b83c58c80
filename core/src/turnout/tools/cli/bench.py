"""`turnout bench`: the benchmark suite (turnout vs onnxruntime vs onnx.reference) of the repo.

The suite lives in the repository's `benchmarks/` package, not in the installed wheel
(onnxruntime, turnout-numba and turnout-testbed are its dependencies, not the runtime's); this
command finds it from a source checkout and says what is missing before it starts.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from typing import Any

from turnout.graph.errors import TurnoutError


def _repo_root() -> Path | None:
    """The checkout holding `benchmarks/runner.py`: the current directory or this file's repo."""
    here = Path(__file__).resolve()
    for root in (Path.cwd(), *here.parents):
        if (root / "benchmarks" / "runner.py").is_file():
            return root
    return None


def _load_runner() -> Any:
    root = _repo_root()
    if root is None:
        raise TurnoutError(
            "turnout bench needs the benchmarks/ package of a turnout source checkout; run it "
            "from the repository root (or use `python -m benchmarks` there)"
        )
    # what the harness times and builds its models with: say so before it starts
    needs = {"turnout_numba": "./providers/numba-cpu", "turnout_testbed": "./testbed"}
    needs["onnxruntime"] = "onnxruntime"
    missing = [where for module, where in needs.items() if importlib.util.find_spec(module) is None]
    if missing:
        raise TurnoutError(
            f"turnout bench needs {', '.join(missing)} installed: pip install {' '.join(missing)} "
            f"(from {root})"
        )
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    import benchmarks

    # numpy is loaded already in this process: restart without the BLAS overrides if set
    if sys.argv[1:2] == ["bench"]:
        benchmarks.reexec_clean(["-m", "turnout", *sys.argv[1:]])
    from benchmarks import runner

    return runner


def _cmd_bench(args: argparse.Namespace) -> int:
    return int(_load_runner().run_from_args(args))


def register(sub: Any) -> None:
    b = sub.add_parser(
        "bench", help="benchmark turnout against onnxruntime and onnx.reference (repo checkout)"
    )
    # the runner owns the options; it is imported only when `bench` runs (needs the checkout)
    b.add_argument("--models", help="comma-separated model names (default: the whole zoo)")
    b.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    b.add_argument("--repeat", type=int, default=10, help="interleaved rounds per model")
    b.add_argument("--reference-repeat", type=int, default=3, help="rounds for onnx.reference")
    b.add_argument(
        "--reference-limit",
        type=float,
        default=60.0,
        help="skip onnx.reference where one run takes longer (seconds)",
    )
    b.add_argument(
        "--runtimes",
        default="turnout_cpu,turnout_cpu_numpy,turnout_numba,onnxruntime,reference",
        help="comma-separated subset",
    )
    b.add_argument(
        "--settle",
        type=float,
        default=0.3,
        help="pause before each block of runs (s): spinning threads sleep",
    )
    b.add_argument("--memory", action="store_true", help="peak RSS (a process per runtime+model)")
    b.add_argument("--no-creation", action="store_true", help="skip cold/warm creation children")
    b.add_argument("--profile", action="store_true", help="per-op times of the numba session")
    b.add_argument("--json", help="write the full report (every sample) as JSON here")
    b.add_argument("--markdown", help="write the Markdown table here")
    b.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    b.set_defaults(func=_cmd_bench)
