"""Render the provider-package template (`turnout new-provider NAME`).

The template lives in `turnout/tools/templates/provider/`. Every file there ends in `.tmpl` (so no
tool mistakes it for code) and is rendered with `string.Template`: `$name`, `${Name}`, `$pkg` and
`$dist` are replaced, `$$` is a literal dollar sign; `__pkg__` in a path becomes the package
name. For NAME=`my_accel`: name `my_accel` (alias and entry point), Name `MyAccel` (so the
provider is `MyAccelExecutionProvider`), pkg `turnout_my_accel`, dist `turnout-my-accel`.

`python -m turnout.tools.scaffold NAME TARGET` renders into TARGET itself; the repository's
`plugin_template/` is `python -m turnout.tools.scaffold example plugin_template`.
"""

from __future__ import annotations

import keyword
import re
import string
import sys
from collections.abc import Iterator
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING

from turnout.graph.errors import InvalidArgument

if TYPE_CHECKING:
    from importlib.abc import Traversable

__all__ = ["render_provider", "render_template", "template_names"]

TEMPLATE_SUFFIX = ".tmpl"
PATH_PLACEHOLDER = "__pkg__"
NAME_PATTERN = re.compile(r"[a-z][a-z0-9_]*")
MAX_NAME_LENGTH = 32
# Names taken by turnout's own distributions and providers (and their aliases).
RESERVED_NAMES = frozenset({"cpu", "cuda", "cupy", "numba", "opencl", "conformance"})


def template_names(name: str) -> dict[str, str]:
    """The placeholder values for NAME, after checking that NAME is usable."""
    if not NAME_PATTERN.fullmatch(name) or name.endswith("_") or "__" in name:
        raise InvalidArgument(
            f"provider name {name!r}: use a short lowercase name of letters, digits and single "
            "underscores, starting with a letter (like 'myaccel' or 'my_accel')"
        )
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidArgument(f"provider name {name!r}: longer than {MAX_NAME_LENGTH} characters")
    if name in RESERVED_NAMES or keyword.iskeyword(name):
        raise InvalidArgument(f"provider name {name!r} is reserved; choose another")
    return {
        "name": name,
        "Name": "".join(part.capitalize() for part in name.split("_")),
        "pkg": f"turnout_{name}",
        "dist": f"turnout-{name.replace('_', '-')}",
    }


def render_provider(name: str, dest: Path) -> Path:
    """Render the template for NAME into `dest/turnout-NAME/` and return that folder."""
    return render_template(name, Path(dest) / template_names(name)["dist"])


def render_template(name: str, target: Path) -> Path:
    """Render the template for NAME into `target` itself (absent or empty); return `target`."""
    values = template_names(name)
    target = Path(target)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise InvalidArgument(f"{target} already exists and is not an empty folder")
    rendered = []
    for rel, source in _template_files():
        out_rel = rel.replace(PATH_PLACEHOLDER, values["pkg"]).removesuffix(TEMPLATE_SUFFIX)
        try:
            text = string.Template(source.read_text(encoding="utf-8")).substitute(values)
        except (KeyError, ValueError) as e:  # a broken template is turnout's bug: name the file
            raise RuntimeError(f"provider template {rel}: bad placeholder: {e}") from e
        rendered.append((target / out_rel, text))
    for path, text in rendered:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode("utf-8"))
    return target


def _template_files() -> list[tuple[str, Traversable]]:
    """(relative path, file) for every template file, sorted by path."""
    root = files("turnout.tools") / "templates" / "provider"
    return sorted(_walk(root, ""), key=lambda x: x[0])


def _walk(folder: Traversable, prefix: str) -> Iterator[tuple[str, Traversable]]:
    for entry in folder.iterdir():
        rel = f"{prefix}{entry.name}"
        if entry.is_dir():
            yield from _walk(entry, rel + "/")
        elif entry.name.endswith(TEMPLATE_SUFFIX):
            yield rel, entry


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m turnout.tools.scaffold NAME TARGET", file=sys.stderr)
        return 2
    print(render_template(args[0], Path(args[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
