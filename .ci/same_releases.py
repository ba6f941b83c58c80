"""Whether a fresh `pip install --upgrade` would give exactly the releases installed here.

Reads the JSON report of `pip install --dry-run --ignore-installed --upgrade --report FILE ...`
and compares each package it would install with the version this interpreter has. Exit 0 and
list them when every one matches and this environment holds nothing else (CI's run 2, on the
newest releases in a fresh virtual environment, would test what run 1 tested); exit 1 naming
the differences otherwise.
"""

from __future__ import annotations

import json
import re
import sys
from importlib import metadata

_INSTALLER = {"pip", "setuptools", "wheel"}
"""What a new virtual environment may hold besides the packages pip installs into it."""


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def main(report_path: str) -> int:
    with open(report_path, encoding="utf-8") as f:
        report = json.load(f)
    installed = {_key(d.metadata["Name"]): d.version for d in metadata.distributions()}
    wanted = sorted(
        (_key(i["metadata"]["name"]), i["metadata"]["version"]) for i in report["install"]
    )
    if not wanted:
        print("pip's report lists no packages: cannot compare")
        return 1
    differ = [
        f"{n} {v} (here: {installed.get(n, 'absent')})" for n, v in wanted if installed.get(n) != v
    ]
    if differ:
        print("newest releases differ from the pinned ones:", "; ".join(differ))
        return 1
    # a package here that a fresh environment would lack could hide an undeclared dependency,
    # which run 2's fresh virtual environment would catch
    extra = sorted(set(installed) - {n for n, _ in wanted} - _INSTALLER)
    if extra:
        print("this environment also has packages a fresh one would lack:", ", ".join(extra))
        return 1
    print(
        f"newest releases = pinned ({len(wanted)} packages):",
        "; ".join(f"{n} {v}" for n, v in wanted),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
