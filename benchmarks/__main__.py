"""`python -m benchmarks [--models a,b] [--threads 1,2] [--repeat N] [--json F] [--markdown F]`;
`python -m benchmarks startup ...` times fresh processes instead (benchmarks/startup.py);
`python -m benchmarks alone ...` times each runtime alone, quiet and beside a busy process
(benchmarks/alone.py); `python -m benchmarks placement ...` compares measured placement with
priority and the CPU path (benchmarks/placement.py, issue 33).

`--import-torch` is handled here, before the runner (numpy, numba, turnout) is imported; so is
the child processes' equivalent (their spec's `import_torch`).
"""

from __future__ import annotations

import json
import sys

from benchmarks import import_torch, reexec_clean


def _wants_torch(argv: list[str]) -> bool:
    if argv[:1] == ["--child"]:
        return bool(len(argv) > 1 and json.loads(argv[1]).get("import_torch"))
    return "--import-torch" in argv


if __name__ == "__main__":
    reexec_clean(["-m", "benchmarks", *sys.argv[1:]])  # before numpy is imported
    if _wants_torch(sys.argv[1:]):
        try:
            import_torch()
        except ImportError as e:
            print(f"benchmarks: error: {e}", file=sys.stderr)
            sys.exit(2)
    if sys.argv[1:2] == ["startup"]:
        from benchmarks.startup import main as startup

        sys.exit(startup(sys.argv[2:]))
    if sys.argv[1:2] == ["alone"]:
        from benchmarks.alone import main as alone

        sys.exit(alone(sys.argv[2:]))
    if sys.argv[1:2] == ["placement"]:
        from benchmarks.placement import main as placement

        sys.exit(placement(sys.argv[2:]))
    from benchmarks.runner import main

    sys.exit(main())
