"""The provider contract's version and hook names: a plugin built for another contract, or
one whose hook name is misspelt, is listed with the reason and not loaded; others load."""

from __future__ import annotations

import types
from typing import Any

import pytest

import turnout
from turnout.graph.errors import InvalidArgument
from turnout.sdk import plugins
from turnout.sdk.provider import CONTRACT_VERSION, SUPPORTED_CONTRACTS, ProviderFactory


class _EntryPoint:
    def __init__(self, name: str, load: Any) -> None:
        self.name = name
        self._load = load

    def load(self) -> Any:
        return self._load()


def _no_provider(self: ProviderFactory, options: dict[str, Any]) -> Any:
    raise AssertionError("not created in these tests")


def _plugin(provider: str, contract: int, hook: str = "turnout_providers") -> Any:
    def load() -> types.ModuleType:
        mod = types.ModuleType(f"{provider}_plugin")
        body = {"name": provider, "contract_version": contract, "_create": _no_provider}
        factory_cls = type("Factory", (ProviderFactory,), body)

        @turnout.hookimpl(specname=None)
        def impl() -> list[ProviderFactory]:
            return [factory_cls()]

        impl.__name__ = hook
        setattr(mod, hook, impl)
        return mod

    return load


def _registry(monkeypatch: pytest.MonkeyPatch, eps: list[_EntryPoint]) -> plugins.ProviderRegistry:
    monkeypatch.setattr(plugins, "entry_points", lambda group: eps)
    return plugins.ProviderRegistry()


def test_in_tree_providers_implement_the_current_contract() -> None:
    for factory in turnout.sdk.plugins.registry.all():
        assert factory.contract_version == CONTRACT_VERSION, factory.name


def test_an_unsupported_contract_is_listed_and_not_loaded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    future = max(SUPPORTED_CONTRACTS) + 1
    reg = _registry(
        monkeypatch,
        [
            _EntryPoint("future", _plugin("FutureExecutionProvider", future)),
            _EntryPoint("old", _plugin("OldExecutionProvider", 1)),
        ],
    )
    assert [f.name for f in reg.all()] == ["CPUExecutionProvider", "OldExecutionProvider"]
    ((name, error),) = [(b.name, b.error) for b in reg.broken]
    assert name == "future"
    assert f"implements provider contract {future}" in error and "not loaded" in error


def test_a_misspelt_hook_fails_loudly_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    reg = _registry(
        monkeypatch,
        [
            _EntryPoint("typo", _plugin("TypoExecutionProvider", 2, hook="turnout_provider")),
            _EntryPoint("good", _plugin("GoodExecutionProvider", 2)),
        ],
    )
    assert [f.name for f in reg.all()] == ["CPUExecutionProvider", "GoodExecutionProvider"]
    ((name, error),) = [(b.name, b.error) for b in reg.broken]
    assert name == "typo"
    assert "unknown hook 'turnout_provider'" in error and "turnout_providers" in error


def test_registering_an_unsupported_contract_in_process_is_refused() -> None:
    body = {"name": "NewExecutionProvider", "contract_version": 0, "_create": _no_provider}
    factory = type("F", (ProviderFactory,), body)
    with pytest.raises(InvalidArgument, match="implements provider contract 0"):
        turnout.register_provider(factory())
    assert turnout.sdk.plugins.registry.find("NewExecutionProvider") is None
