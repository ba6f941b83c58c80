"""Core's module import graph, read from the source (imports inside functions included,
imports under `if TYPE_CHECKING:` left out: they never run).

Why: the layers of `turnout` are only real if the imports say so. `lint-imports` enforces the
contracts of `.importlinter`; this script measures the graph (cycles, the largest strongly
connected component) and renders the layer picture that docs/architecture.md embeds, from the
code and the contract's layer list, so the picture cannot go stale (CI runs `--check`).

    python tools/import_graph.py            # modules, imports, cycles
    python tools/import_graph.py --scc      # every cycle, by module
    python tools/import_graph.py --picture  # the picture, as markdown
    python tools/import_graph.py --write docs/architecture.md   # refresh the picture there
    python tools/import_graph.py --check docs/architecture.md   # fail when it is stale
"""

from __future__ import annotations

import argparse
import ast
import configparser
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "core" / "src"
PACKAGE = "turnout"


def module_files(root: Path = CORE) -> dict[str, Path]:
    """Every module of the package, by dotted name (a package by its __init__)."""
    found: dict[str, Path] = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        if "templates" in path.relative_to(root).parts:
            continue
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def imports_of(module: str, path: Path, modules: set[str]) -> set[str]:
    """The package modules `module` imports, anywhere in its body (TYPE_CHECKING blocks aside)."""
    tree = ast.parse(path.read_text(), str(path))
    type_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.body:
                type_only.update(id(n) for n in ast.walk(inner))
    targets: set[str] = set()
    is_package = path.name == "__init__.py"
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, is_package, node)
            # a submodule by name, else an attribute of `base` (which runs base's module)
            names = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                for alias in node.names
            ]
        else:
            continue
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != module:
                targets.add(name)
    return targets


def graph(root: Path = CORE) -> dict[str, set[str]]:
    files = module_files(root)
    names = set(files)
    return {name: imports_of(name, path, names) for name, path in files.items()}


def strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components, largest first (iterative: the graph is a few hundred nodes)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = 0
    for start in edges:
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    components.append(sorted(component))
    return sorted(components, key=len, reverse=True)


BEGIN = "<!-- layers: generated by tools/import_graph.py --write; do not edit -->"
END = "<!-- layers: end -->"


def contract_layers(config: Path = ROOT / ".importlinter") -> list[list[str]]:
    """The layers of the layers contract, top first; a layer is one or more packages."""
    parser = configparser.ConfigParser()
    parser.read(config)
    raw = parser["importlinter:contract:layers"]["layers"]
    return [[p.strip() for p in line.split("|")] for line in raw.strip().splitlines()]


def _owner(module: str, layers: list[list[str]]) -> str | None:
    for layer in layers:
        for package in layer:
            if module == package or module.startswith(package + "."):
                return package
    return None


def picture(edges: dict[str, set[str]]) -> str:
    """The layers, top to bottom, with what each holds and the imports between them."""
    layers = contract_layers()
    files = module_files()
    members: dict[str, list[str]] = {p: [] for layer in layers for p in layer}
    for module in files:
        owner = _owner(module, layers)
        if owner is None:
            continue
        rest = module[len(owner) + 1 :].split(".")[0] if module != owner else ""
        if rest and rest not in members[owner]:
            members[owner].append(rest)
    crossing: set[tuple[str, str]] = set()
    for module, targets in edges.items():
        src = _owner(module, layers)
        for target in targets:
            dst = _owner(target, layers)
            if src and dst and src != dst:
                crossing.add((src, dst))
    out = ["```text"]
    for i, layer in enumerate(layers):
        for k, package in enumerate(layer):
            if k:
                out.append("        (and, independent of it, on the same level)")
            out.append(package)
            names = ", ".join(sorted(members[package]))
            out += textwrap.wrap(names, 96, initial_indent="    ", subsequent_indent="    ")
        if i + 1 < len(layers):
            out.append("        |  imports only the layers below")
            out.append("        v")
    out.append("```")
    cycles = [c for c in strongly_connected(edges) if len(c) > 1]
    largest = max((len(c) for c in cycles), default=1)
    order = [p for layer in layers for p in layer]
    out += [
        "",
        f"Import cycles between modules: {len(cycles)}, the largest of {largest} modules.",
        "",
        "Which layer imports which (a row imports the columns marked):",
        "",
        "| | " + " | ".join(f"`{p.split('.')[-1]}`" for p in order) + " |",
        "|---" * (len(order) + 1) + "|",
    ]
    for src in order:
        marks = ["x" if (src, dst) in crossing else "" for dst in order]
        out.append(f"| `{src}` | " + " | ".join(marks) + " |")
    return "\n".join(out)


def _embedded(text: str) -> tuple[int, int]:
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise SystemExit(f"the page has no {BEGIN!r} ... {END!r} block")
    return start + len(BEGIN), end


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scc", action="store_true", help="print the cycles")
    parser.add_argument("--picture", action="store_true", help="print the layer picture")
    parser.add_argument("--write", type=Path, help="refresh the picture in this page")
    parser.add_argument("--check", type=Path, help="fail when this page's picture is stale")
    args = parser.parse_args(argv)
    edges = graph()
    if args.picture:
        print(picture(edges))
        return 0
    if args.write or args.check:
        page = args.write or args.check
        text = page.read_text()
        start, end = _embedded(text)
        fresh = text[:start] + "\n" + picture(edges) + "\n" + text[end:]
        if args.write:
            page.write_text(fresh)
            return 0
        if fresh != text:
            print(
                f"{page}: the layer picture is stale: python tools/import_graph.py --write {page}"
            )
            return 1
        return 0
    cycles = [c for c in strongly_connected(edges) if len(c) > 1]
    print(f"{len(edges)} modules, {sum(map(len, edges.values()))} imports, {len(cycles)} cycles")
    if args.scc:
        for comp in cycles:
            print(len(comp), " ".join(comp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
