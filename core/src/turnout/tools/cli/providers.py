"""`turnout providers`: installed providers, their devices, and why any is unavailable."""

from __future__ import annotations

import argparse
from typing import Any


def _cmd_options(name: str) -> int:
    """The typed option table of one provider (name or alias)."""
    from turnout.sdk.plugins import registry
    from turnout.sdk.provider_options import schema_table

    factory = registry.find(name)
    if factory is None:
        installed = ", ".join(f.name for f in registry.all())
        print(f"unknown provider {name!r}; installed: {installed}")
        return 2
    rows = schema_table(factory.options)
    untyped = sorted(set(factory.option_names) - {r[0] for r in rows})
    rows += [(n, "-", "-", "no", "(declared without a type)") for n in untyped]
    if not rows:
        print(f"{factory.name} takes no options")
        return 0
    header = ("option", "type", "default", "dynamic", "doc")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    print(f"{factory.name} options:")
    for r in [header, *rows]:
        print("  " + "  ".join(c.ljust(w) for c, w in zip(r[:4], widths)) + "  " + r[4])
    return 0


def _cmd_providers(args: argparse.Namespace) -> int:
    from turnout.api.ep_devices import hardware_of
    from turnout.sdk.plugins import broken_plugins, registry

    if args.options:
        return _cmd_options(args.options)

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
    pr.add_argument(
        "--options", metavar="NAME", help="show one provider's options: type, default, doc"
    )
    pr.set_defaults(func=_cmd_providers)
