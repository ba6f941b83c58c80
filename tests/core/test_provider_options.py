"""Typed provider options: parsing onnxruntime's strings and Python values alike, defaults,
errors that name the provider and option, dynamic options, and the CLI's option table."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import numpy as np
import pytest

import turnout
from turnout.engine.provider_creation import create_provider
from turnout.graph.errors import InvalidArgument
from turnout.sdk.provider_options import ProviderOption, parse_bool
from turnout.tools.models import shipped_model

THREADS = ProviderOption("threads", (int,), 0, "thread count", minimum=0, dynamic=True)
KIND = ProviderOption("kind", (str,), "all", "device kind", choices=("all", "cpu", "gpu"))
WHICH = ProviderOption("which", (int, str), None, "index or name", minimum=0)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(True, True), ("1", True), ("TRUE", True), ("off", False), (0, False), ("maybe", None)],
)
def test_bools_come_as_python_values_or_strings(raw: Any, expected: bool | None) -> None:
    assert parse_bool(raw) is expected


@pytest.mark.parametrize(
    ("option", "raw", "expected"),
    [
        (THREADS, "4", 4),
        (THREADS, 4, 4),
        (KIND, "GPU", "gpu"),
        (WHICH, "1", 1),
        (WHICH, "Portable", "Portable"),
    ],
)
def test_values_parse_to_the_declared_type(option: ProviderOption, raw: Any, expected: Any) -> None:
    assert option.parse("P", raw) == expected


@pytest.mark.parametrize(
    ("option", "raw", "message"),
    [
        (THREADS, "-1", "P: option 'threads' must be int >= 0, not '-1'"),
        (THREADS, True, "must be int >= 0, not True"),
        (THREADS, "two", "must be int >= 0"),
        (KIND, "tpu", "option 'kind' must be str: all | cpu | gpu, not 'tpu'"),
    ],
)
def test_bad_values_name_provider_option_and_type(
    option: ProviderOption, raw: Any, message: str
) -> None:
    with pytest.raises(InvalidArgument) as e:
        option.parse("P", raw)
    assert message in str(e.value)


def test_create_fills_defaults_and_parses() -> None:
    cpu = turnout.sdk.plugins.registry.resolve("CPUExecutionProvider")
    provider = create_provider(cpu, {"intra_op_num_threads": "2", "use_arena": "0"})
    assert provider.options == {
        "intra_op_num_threads": 2,
        "arena_extend_strategy": "knextpoweroftwo",
        "use_arena": False,
    }
    assert {"intra_op_num_threads", "use_arena"} <= cpu.option_names


def _session() -> turnout.InferenceSession:
    return turnout.InferenceSession(str(shipped_model("tiny_cnn")), providers=["cpu"])


def test_dynamic_option_changes_a_live_session() -> None:
    sess = _session()
    cpu = sess._engine.providers[-1]
    sess.set_ep_dynamic_options({"intra_op_num_threads": "1"})
    assert cpu.options["intra_op_num_threads"] == 1
    x = np.random.default_rng(0).random((1, 1, 28, 28), np.float32)
    before = sess.run(None, {sess.get_inputs()[0].name: x})[0]
    sess.set_ep_dynamic_options({"intra_op_num_threads": "0"})
    after = sess.run(None, {sess.get_inputs()[0].name: x})[0]
    np.testing.assert_array_equal(before, after)


def test_a_bad_dynamic_value_changes_nothing() -> None:
    sess = _session()
    with pytest.raises(InvalidArgument, match="intra_op_num_threads"):
        sess.set_ep_dynamic_options({"intra_op_num_threads": "many"})
    assert sess._engine.providers[-1].options["intra_op_num_threads"] == 0


def test_keys_no_provider_takes_warn_by_name() -> None:
    with pytest.warns(UserWarning, match="dynamic option\\(s\\) ep.dynamic.workload_type"):
        _session().set_ep_dynamic_options({"ep.dynamic.workload_type": "Efficient"})


def test_options_that_are_not_dynamic_are_refused_at_run_time_too() -> None:
    # use_arena is not dynamic: the key is not taken (a warning), and nothing changes
    sess = _session()
    with pytest.warns(UserWarning, match="use_arena"):
        sess.set_ep_dynamic_options({"use_arena": "0"})
    assert sess._engine.providers[-1].options["use_arena"] is True


def test_cli_prints_the_option_table() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "turnout", "providers", "--options", "cpu"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "CPUExecutionProvider options:" in out
    row = next(line for line in out.splitlines() if "intra_op_num_threads" in line)
    assert "int >= 0" in row and " yes " in row
