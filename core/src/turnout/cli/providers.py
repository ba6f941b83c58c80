"""`turnout providers`: installed providers, their devices, and why any is unavailable."""

from __future__ import annotations

import argparse
from typing import Any


def _cmd_providers(args: argparse.Namespace) -> int:
    from ..ep_devices import hardware_of
    from ..plugins import broken_plugins, registry

    for f in registry.all():
        a = registry.probe(f)
        status = "available" if a.ok else f"unavailable: {a.reason}"
        devices = ", ".join(f"{d.device} ({hardware_of(d).type.name})" for d in a.devices) or "-"
        aliases = ", ".join(f.aliases)
        serves = "  serves CPUExecutionProvider requests" if f.serves_cpu_requests else ""
        print(
            f"{f.name:<28} {status:<12} devices: {devices:<10} version: {a.version or '-'}"
            f"  aliases: {aliases}{serves}"
        )
    for b in broken_plugins():
        print(f"plugin {b.name!r} failed to load: {b.error}")
    return 0


def register(sub: Any) -> None:
    pr = sub.add_parser("providers", help="list installed providers and whether they can run here")
    pr.set_defaults(func=_cmd_providers)
