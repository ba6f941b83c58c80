"""`turnout bench` says what it needs before it starts (the harness is not in the wheel)."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

from turnout.graph.errors import TurnoutError
from turnout.tools.cli import bench


def test_a_missing_prerequisite_is_named_with_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        return None if name == "turnout_testbed" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(TurnoutError, match=r"needs .*\./testbed installed: pip install .*testbed"):
        bench._load_runner()


def test_outside_a_checkout_it_says_where_the_suite_lives(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench, "_repo_root", lambda: None)
    with pytest.raises(TurnoutError, match="source checkout"):
        bench._load_runner()
