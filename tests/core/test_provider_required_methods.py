"""What a provider must implement, and what happens when it does not.

The smallest provider of docs/provider-guide.md ("What you must implement") is read from the
page, run through the conformance runner, and passes. A provider that leaves out a required
method fails where its author sees it: at class definition, naming the method, or (an abstract
`_create`) in `turnout providers`, naming it, while the other providers load.
"""

from __future__ import annotations

import json
import re
import types
from pathlib import Path
from typing import Any

import pytest

import turnout
from turnout.sdk import plugins
from turnout.sdk.ep import (
    Allocator,
    DataTransfer,
    Device,
    ExecutionProvider,
    ProviderFactory,
)
from turnout.tools.cli import main

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "provider-guide.md"


def _guide_provider() -> types.ModuleType:
    """The guide's smallest provider, executed as a module (the page's one python block in
    "What you must implement")."""
    text = GUIDE.read_text()
    section = text.split("## What you must implement", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, re.S)
    module = types.ModuleType("guide_provider")
    exec(compile(code, str(GUIDE), "exec"), module.__dict__)
    return module


def test_the_guides_smallest_provider_passes_conformance(tmp_path: Path) -> None:
    pytest.importorskip("turnout_conformance", reason="pip install ./conformance")
    guide = _guide_provider()
    overridden = {
        name
        for cls, base in (
            (guide.TinyProvider, ExecutionProvider),
            (guide.TinyFactory, ProviderFactory),
        )
        for name, value in vars(cls).items()
        if callable(value) and name in vars(base)
    }
    assert overridden == {"_create"}  # required methods only
    turnout.register_provider(guide.TinyFactory())
    try:
        out = tmp_path / "report.json"
        args = ["conformance", "--provider", "tiny", "-k", "^test_relu$", "--kinds", "node"]
        rc = main([*args, "--json", str(out), "-q"])
        report = json.loads(out.read_text())
    finally:
        plugins.registry.unregister("TinyExecutionProvider")
    assert {r["case"]: r["status"] for r in report["results"]} == {"test_relu": "passed"}
    assert rc == 0


def _plugin(factory_cls: type) -> Any:
    def load() -> types.ModuleType:
        mod = types.ModuleType("half_plugin")

        @turnout.hookimpl(specname="turnout_providers")
        def turnout_providers() -> list[ProviderFactory]:
            return [factory_cls()]

        mod.turnout_providers = turnout_providers  # type: ignore[attr-defined]
        return mod

    return load


class _EntryPoint:
    def __init__(self, name: str, load: Any) -> None:
        self.name = name
        self.load = load


def test_a_factory_without_create_is_listed_by_turnout_providers_naming_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    class HalfFactory(ProviderFactory):
        name = "HalfExecutionProvider"

    eps = [_EntryPoint("half", _plugin(HalfFactory))]
    monkeypatch.setattr(plugins, "entry_points", lambda group: eps)
    monkeypatch.setattr(plugins, "registry", plugins.ProviderRegistry())
    assert main(["providers"]) == 0
    out = capsys.readouterr().out
    assert "CPUExecutionProvider" in out  # the others load
    (line,) = [ln for ln in out.splitlines() if "half" in ln]
    assert "_create" in line, out


@pytest.mark.parametrize(
    ("base", "body", "missing"),
    [
        (ExecutionProvider, {"compiles": True}, "compile_subgraphs"),
        (Allocator, {"pools": True}, "_free"),
        (DataTransfer, {"batched": True}, "copy_tensors or _copy_into"),
        (ProviderFactory, {"device_type": "myaccel"}, "create_allocator and create_data_transfer"),
    ],
)
def test_a_declared_capability_without_its_method_fails_at_class_definition(
    base: type, body: dict[str, Any], missing: str
) -> None:
    body = {"name": "PartExecutionProvider", "_create": lambda self, options: None, **body}
    if base is not ProviderFactory:
        del body["_create"]
    with pytest.raises(TypeError, match=f"does not implement {missing}"):
        type("Part", (base,), body)


@pytest.mark.parametrize(
    ("base", "method", "flag"),
    [
        (ExecutionProvider, "compile_subgraphs", "compiles"),
        (Allocator, "_free", "pools"),
        (DataTransfer, "_copy_into", "batched"),
    ],
)
def test_a_method_without_its_declared_flag_fails_at_class_definition(
    base: type, method: str, flag: str
) -> None:
    with pytest.raises(TypeError, match=f"implements {method} but does not declare {flag} = True"):
        type("Part", (base,), {method: lambda self, *args: None})


def test_a_factory_without_a_name_fails_at_class_definition() -> None:
    with pytest.raises(TypeError, match="declares no name"):
        type("Nameless", (ProviderFactory,), {"_create": lambda self, options: None})


def test_a_device_factory_makes_memory_per_device_without_a_session() -> None:
    made: list[str] = []

    class Transfer(DataTransfer):
        pass

    class DeviceFactory(ProviderFactory):
        name = "PerDeviceExecutionProvider"
        device_type = "myaccel"

        def _create(self, options: dict[str, Any]) -> ExecutionProvider:
            made.append("provider")
            return ExecutionProvider(options, self)

        def create_allocator(self, device: Device) -> Allocator:
            return Allocator(device)

        def create_data_transfer(self, device: Device) -> DataTransfer:
            return Transfer(device)

    transfer = DeviceFactory().data_transfer()
    assert isinstance(transfer, Transfer) and transfer.device == Device("myaccel", 0)
    assert made == []  # no provider was built for a transfer outside a session
