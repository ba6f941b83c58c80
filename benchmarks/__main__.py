"""`python -m benchmarks [--models a,b] [--threads 1,2] [--repeat N] [--json F] [--markdown F]`."""

from __future__ import annotations

import sys

from benchmarks import reexec_clean

if __name__ == "__main__":
    reexec_clean(["-m", "benchmarks", *sys.argv[1:]])  # before numpy is imported
    from benchmarks.runner import main

    sys.exit(main())
