"""Plugin discovery: entry points of group `turnout`, loaded as pluggy hook modules.

A plugin that fails to import, or whose hook raises, is recorded in `broken_plugins()` with its
error and skipped; the others load. `TURNOUT_DISABLE_PLUGINS=name1,name2` skips plugins by
entry-point name (`*` disables all of them).
"""

from __future__ import annotations

import importlib
import os
import threading
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, cast

import pluggy

from turnout.graph.errors import InvalidArgument
from turnout.graph.logs import logger
from turnout.sdk import hookspecs
from turnout.sdk.op_sets import install
from turnout.sdk.provider import (
    CONTRACT_VERSION,
    SUPPORTED_CONTRACTS,
    Availability,
    ProviderFactory,
)

__all__ = [
    "BrokenPlugin",
    "ProviderRegistry",
    "broken_plugins",
    "graph_passes",
    "register_provider",
    "registry",
]

ENTRY_POINT_GROUP = "turnout"

# plugins that are part of turnout, registered by module name before the installed ones (as
# pytest registers its own): the CPU provider, the fallback for every standard op
BUILTIN_PLUGINS = ("turnout.providers.cpu.plugin",)


@dataclass(frozen=True)
class BrokenPlugin:
    """A plugin that could not be loaded, and why."""

    name: str
    error: str


class ProviderRegistry:
    """All known provider factories: the built-in CPU one plus what plugins contribute."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loaded = False
        self.factories: list[ProviderFactory] = []
        self.broken: list[BrokenPlugin] = []
        self.graph_passes: list[Any] = []
        self._probes: dict[str, Availability] = {}

    def _load(self) -> None:
        with self._lock:
            if self._loaded:
                return
            factories: list[ProviderFactory] = []
            pm = pluggy.PluginManager("turnout")
            pm.add_hookspecs(hookspecs)
            for name in BUILTIN_PLUGINS:  # never disabled: a failure here is turnout's bug
                pm.register(importlib.import_module(name), name=name)
            disabled = {
                x.strip()
                for x in os.environ.get("TURNOUT_DISABLE_PLUGINS", "").split(",")
                if x.strip()
            }
            for ep in entry_points(group=ENTRY_POINT_GROUP):
                if ep.name in disabled or "*" in disabled:
                    continue
                try:
                    _register_checked(pm, ep.load(), ep.name)
                except Exception as e:
                    self.broken.append(BrokenPlugin(ep.name, f"{type(e).__name__}: {e}"))
                    logger.warning("turnout plugin %r failed to load: %s", ep.name, e)
            for impl in pm.hook.turnout_providers.get_hookimpls():
                try:
                    contributed = cast("list[ProviderFactory]", impl.function() or [])
                except Exception as e:
                    self.broken.append(BrokenPlugin(impl.plugin_name, f"{type(e).__name__}: {e}"))
                    continue
                for factory in contributed:
                    refusal = contract_refusal(factory)
                    if refusal is None:
                        factories.append(factory)
                    else:
                        self.broken.append(BrokenPlugin(impl.plugin_name, refusal))
                        logger.warning("turnout plugin %r: %s", impl.plugin_name, refusal)
            self.factories = factories
            self.graph_passes = _collect_graph_passes(pm, self.broken)
            _install_custom_ops(pm, self.broken)
            self._loaded = True

    def register(self, factory: ProviderFactory) -> None:
        """Add a factory in-process (apps and tests); a plugin uses the entry point instead.
        A contract version this turnout does not support is an `InvalidArgument`."""
        refusal = contract_refusal(factory)
        if refusal is not None:
            raise InvalidArgument(refusal)
        self._load()
        with self._lock:
            self.factories = [f for f in self.factories if f.name != factory.name] + [factory]
            self._probes.pop(factory.name, None)

    def unregister(self, name: str) -> None:
        self._load()
        with self._lock:
            self.factories = [f for f in self.factories if f.name != name]
            self._probes.pop(name, None)

    def all(self) -> list[ProviderFactory]:
        self._load()
        return list(self.factories)

    def probe(self, factory: ProviderFactory) -> Availability:
        if factory.name not in self._probes:
            self._probes[factory.name] = factory.probe()
        return self._probes[factory.name]

    def available(self) -> list[ProviderFactory]:
        return sorted(
            (f for f in self.all() if self.probe(f).ok),
            key=lambda f: -f.default_priority,
        )

    def host_providers(self) -> list[ProviderFactory]:
        """Available providers that serve `CPUExecutionProvider` requests, by priority (only
        these are probed: a CPU session never waits on a device probe)."""
        hosts = [f for f in self.all() if f.serves_cpu_requests]
        return sorted((f for f in hosts if self.probe(f).ok), key=lambda f: -f.default_priority)

    def find(self, name: str) -> ProviderFactory | None:
        """The factory for a canonical name or alias, or None."""
        for f in self.all():
            if name == f.name or name in f.aliases:
                return f
        return None

    def resolve(self, name: str) -> ProviderFactory:
        """The factory for a canonical name or alias; unknown names list what is installed."""
        found = self.find(name)
        if found is not None:
            return found
        installed = ", ".join(f.name for f in self.all())
        raise InvalidArgument(f"unknown execution provider {name!r}; installed: {installed}")


registry = ProviderRegistry()


def contract_refusal(factory: ProviderFactory) -> str | None:
    """Why `factory` cannot load here (a provider contract this turnout does not implement),
    or None."""
    version = factory.contract_version
    if version in SUPPORTED_CONTRACTS:
        return None
    supported = ", ".join(str(v) for v in sorted(SUPPORTED_CONTRACTS))
    return (
        f"{factory.name} implements provider contract {version!r}; this turnout "
        f"(contract {CONTRACT_VERSION}) supports {supported}: not loaded"
    )


def _register_checked(pm: pluggy.PluginManager, plugin: Any, name: str) -> None:
    """Register a plugin module; a hook implementation whose name is no turnout hook (a typo
    such as `turnout_provider`) unregisters it and raises, naming the hook."""
    pm.register(plugin, name=name)
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as e:
        pm.unregister(name=name)
        known = ", ".join(sorted(n for n in dir(hookspecs) if n.startswith("turnout_")))
        raise InvalidArgument(f"{e} (turnout's hooks: {known})") from None


def register_provider(factory: ProviderFactory) -> None:
    """Register a provider factory in this process, as if a plugin had contributed it."""
    registry.register(factory)


def broken_plugins() -> list[BrokenPlugin]:
    registry.all()
    return list(registry.broken)


# --- graph passes (turnout_graph_passes hook) --------------------------------------------------
def _collect_graph_passes(pm: pluggy.PluginManager, broken: list[BrokenPlugin]) -> list[Any]:
    """Passes plugins contribute; a hook that raises marks its plugin broken, like providers."""
    out: list[Any] = []
    for impl in pm.hook.turnout_graph_passes.get_hookimpls():
        try:
            out.extend(cast("list[Any]", impl.function() or []))
        except Exception as e:
            broken.append(BrokenPlugin(impl.plugin_name, f"{type(e).__name__}: {e}"))
    return out


def _install_custom_ops(pm: pluggy.PluginManager, broken: list[BrokenPlugin]) -> None:
    """Op sets plugins bring; a hook that raises or returns something else marks its plugin
    broken, like providers."""
    for impl in pm.hook.turnout_custom_ops.get_hookimpls():
        try:
            install(cast("list[Any]", impl.function() or []), f"plugin {impl.plugin_name!r}")
        except Exception as e:
            broken.append(BrokenPlugin(impl.plugin_name, f"{type(e).__name__}: {e}"))


def graph_passes() -> list[Any]:
    """Graph passes contributed by plugins (GraphPass objects or (name, level, fn) tuples)."""
    registry.all()
    return list(registry.graph_passes)
