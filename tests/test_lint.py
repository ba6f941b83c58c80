"""Code quality gates that CI enforces: ruff (lint + format) on the repo, mypy strict on every
package (core, conformance, the providers, the plugin template: the root pyproject's `files`)."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(shutil.which("ruff") is None, reason="ruff is not installed (pip install ruff)")
def test_ruff_check_and_format() -> None:
    check = _run("ruff", "check", ".")
    assert check.returncode == 0, check.stdout + check.stderr
    fmt = _run("ruff", "format", "--check", ".")
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr


def test_mypy_strict_on_every_package() -> None:
    pytest.importorskip("mypy", reason="mypy is not installed (pip install mypy)")
    result = _run(sys.executable, "-m", "mypy")
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
