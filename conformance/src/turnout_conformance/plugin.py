"""The pytest plugin: `pytest -p turnout_conformance --turnout-provider NAME` turns every
conformance case into a pytest item (unclaimed -> skipped with the decline reasons; listed
expected failures -> strict xfail). Items run in the pytest process: use the `turnout
conformance` command where a crashing kernel must not end the run. In fallback mode a failure
in a node the CPU provider ran, listed in its reviewed list, is an xfail that says it is
inherited."""

from __future__ import annotations

from typing import Any

import pytest

from .cases import Case, collect_cases, parse_kinds
from .expected import FAILING, ExpectedFailures
from .runner import CPU, MODES, execute_case

__all__ = ["ConformanceItem", "pytest_addoption", "pytest_collection_modifyitems"]


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("turnout-conformance", "turnout provider conformance")
    g.addoption(
        "--turnout-provider",
        action="append",
        default=[],
        metavar="NAME",
        help="provider (name or alias) to run the conformance cases on; repeatable",
    )
    g.addoption(
        "--turnout-mode",
        choices=MODES,
        default="isolated",
        help="isolated: only the provider (declined cases skip); fallback: CPU takes the rest",
    )
    g.addoption(
        "--turnout-kinds",
        default=None,
        metavar="KINDS",
        help="comma-separated case kinds "
        "(node,simple,pytorch-converted,pytorch-operator,light,turnout)",
    )


class ConformanceFailure(AssertionError):
    """A claimed case whose session or outputs are wrong."""


class _Provider(pytest.Collector):
    def collect(self) -> list[Any]:  # items are made in pytest_collection_modifyitems
        return []


class ConformanceItem(pytest.Item):
    def __init__(
        self,
        *,
        case: Case,
        provider: str,
        mode: str,
        inherited: ExpectedFailures | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.case = case
        self.provider = provider
        self.mode = mode
        self.inherited = inherited  # the CPU provider's list, in fallback mode

    def runtest(self) -> None:
        out = execute_case(self.case, self.provider, self.mode)
        if out.status == "unclaimed":
            pytest.skip(f"unclaimed: {out.message}")
        if out.status in FAILING and out.culprit == CPU and self.inherited is not None:
            entry = self.inherited.match(self.case.name, self.case.kind)
            if entry is not None:
                pytest.xfail(f"expected failure (inherited from {CPU}: {entry[1]})")
        if out.status != "passed":
            raise ConformanceFailure(out.message)

    def repr_failure(self, excinfo: Any, style: Any = None) -> Any:
        if isinstance(excinfo.value, ConformanceFailure):
            return f"{self.provider} {self.case.name}: {excinfo.value}"
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.path, None, f"{self.provider}::{self.case.kind}/{self.case.name}"


@pytest.hookimpl(tryfirst=True)  # before -k / -m deselect, so they apply to these items
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    names = [n for item in config.getoption("turnout_provider") for n in item.split(",") if n]
    if not names:
        return
    from turnout.sdk.plugins import registry

    mode = config.getoption("turnout_mode")
    cases = collect_cases(parse_kinds(config.getoption("turnout_kinds")))
    cpu = ExpectedFailures(registry.resolve(CPU).expected_failures())
    for name in names:
        factory = registry.resolve(name)
        expected = ExpectedFailures(factory.expected_failures())
        label = f"turnout-conformance[{factory.name}]"
        parent = _Provider.from_parent(session, name=label, nodeid=label)
        made: list[pytest.Item | pytest.Collector] = []
        for case in cases:
            inherits = mode == "fallback" and factory.name != CPU
            item = ConformanceItem.from_parent(
                parent,
                name=case.name,
                case=case,
                provider=factory.name,
                mode=mode,
                inherited=cpu if inherits else None,
            )
            entry = expected.match(case.name, case.kind)
            if entry is not None:
                item.add_marker(pytest.mark.xfail(reason=entry[1], strict=True))
            made.append(item)
            items.append(item)
        # report them as collected, so the terminal's "collected N items" counts them
        config.hook.pytest_collectreport(
            report=pytest.CollectReport(parent.nodeid, "passed", None, made)
        )
