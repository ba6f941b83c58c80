"""`turnout new-provider NAME [--dir D]`: render a provider package to start from."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def _cmd_new_provider(args: argparse.Namespace) -> int:
    from turnout.tools.scaffold import render_provider, template_names

    target = render_provider(args.name, Path(args.dir))
    names = template_names(args.name)
    print(f"created {names['dist']} in {target}:")
    for path in sorted(p for p in target.rglob("*") if p.is_file()):
        print(f"  {path.relative_to(target).as_posix()}")
    print(
        "\nnext steps:\n"
        f"  pip install -e {target}\n"
        f"  turnout providers                      # lists {names['Name']}ExecutionProvider\n"
        f"  pytest {target / 'tests'}\n"
        f"  turnout conformance --provider {names['name']}\n"
        "then replace the example kernels with yours (see the package's README.md and "
        "docs/provider-guide.md)."
    )
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("new-provider", help="create a provider package from the template")
    p.add_argument("name", help="short lowercase provider name, like 'myaccel'")
    p.add_argument(
        "--dir", default=".", help="folder to create turnout-NAME/ in (default: current folder)"
    )
    p.set_defaults(func=_cmd_new_provider)
