"""Providers reach core through public names only.

Every .py under providers/*/src and plugin_template is parsed (not imported) and checked for:
importing an underscore name (or an underscore module) from `turnout`; importing the CPU
provider's kernels or registry (`turnout.providers.cpu.kernels`, `...registry`), whose helpers
are public in `turnout.sdk.semantics` and whose kernels are `turnout.providers.cpu.numpy_kernels()`;
and reading an underscore attribute of a core object: a name imported from `turnout`, or a
parameter or variable annotated with a type imported from `turnout` (`kn: KernelNode` then
`kn._x`), directly or through `getattr(kn, "_x")`. A provider's own objects (`self._x`,
`super()._hook()`, the base-class hooks it overrides) are its business.

The CPU provider's `expected_failures` module stays importable: its reviewed failures are
public data that providers in fallback mode inherit.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CPU_INTERNALS = ("turnout.providers.cpu.kernels", "turnout.providers.cpu.registry")


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _is_turnout(module: str) -> bool:
    return module == "turnout" or module.startswith("turnout.")


def _module_error(module: str) -> str | None:
    if any(_private(part) for part in module.split(".")):
        return f"imports the private module {module}"
    if any(module == m or module.startswith(m + ".") for m in CPU_INTERNALS):
        return (
            f"imports the CPU provider's internals ({module}); use turnout.sdk.semantics or "
            "turnout.providers.cpu.numpy_kernels()"
        )
    return None


def _annotation_names(node: ast.expr | None) -> set[str]:
    """Every bare name an annotation mentions (string annotations parsed)."""
    if node is None:
        return set()
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            node = ast.parse(node.value, mode="eval").body
        except SyntaxError:
            return set()
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


class _Checker(ast.NodeVisitor):
    """Collects (line, message) for each violation in one module."""

    def __init__(self) -> None:
        self.found: list[tuple[int, str]] = []
        self.core_names: set[str] = set()  # names bound to turnout modules and objects
        self.scopes: list[set[str]] = [set()]  # names holding core objects, per function

    def _core_object(self, name: str) -> bool:
        return name in self.core_names or any(name in s for s in self.scopes)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if not _is_turnout(alias.name):
                continue
            error = _module_error(alias.name)
            if error:
                self.found.append((node.lineno, error))
            self.core_names.add(alias.asname or alias.name.split(".")[0])

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level or not _is_turnout(module):
            return
        error = _module_error(module)
        if error:
            self.found.append((node.lineno, error))
        for alias in node.names:
            if _private(alias.name):
                self.found.append(
                    (node.lineno, f"imports the private name {alias.name} from {module}")
                )
            elif not error and (sub_error := _module_error(f"{module}.{alias.name}")):
                self.found.append((node.lineno, sub_error))
            self.core_names.add(alias.asname or alias.name)

    def _visit_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        args = node.args
        typed = {
            a.arg
            for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
            if a is not None and _annotation_names(a.annotation) & self.core_names
        }
        self.scopes.append(typed)
        self.generic_visit(node)
        self.scopes.pop()

    visit_FunctionDef = _visit_function
    visit_AsyncFunctionDef = _visit_function

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if (
            isinstance(node.target, ast.Name)
            and _annotation_names(node.annotation) & self.core_names
        ):
            self.scopes[-1].add(node.target.id)
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        chain = [node.attr]
        root: ast.expr = node.value
        while isinstance(root, ast.Attribute):
            chain.append(root.attr)
            root = root.value
        if isinstance(root, ast.Name) and self._core_object(root.id):
            bad = [a for a in chain if _private(a)]
            if bad:
                path = ".".join([root.id, *reversed(chain)])
                self.found.append((node.lineno, f"reads the private attribute {bad[-1]} ({path})"))
                return  # one report per chain
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        f = node.func
        if (
            isinstance(f, ast.Name)
            and f.id in ("getattr", "setattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[0], ast.Name)
            and self._core_object(node.args[0].id)
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and _private(node.args[1].value)
        ):
            self.found.append(
                (node.lineno, f"reads the private attribute {node.args[1].value} via {f.id}")
            )
        self.generic_visit(node)


def violations(source: str) -> list[tuple[int, str]]:
    """(line, message) for each private reach into core in one module's source."""
    checker = _Checker()
    checker.visit(ast.parse(source))
    return sorted(checker.found)


def _provider_sources() -> Iterator[Path]:
    for pattern in ("providers/*/src/**/*.py", "plugin_template/**/*.py"):
        yield from sorted(ROOT.glob(pattern))


def test_no_provider_reaches_into_core_privates() -> None:
    files = list(_provider_sources())
    assert any("numba" in str(p) for p in files) and any("opencl" in str(p) for p in files)
    report = [
        f"{path.relative_to(ROOT)}:{line}: {message}"
        for path in files
        for line, message in violations(path.read_text(encoding="utf-8"))
    ]
    assert not report, "providers use core's private names:\n" + "\n".join(report)


@pytest.mark.parametrize(
    ("source", "line", "fragment"),
    [
        ("from turnout.providers.cpu.kernels.resize import _cubic\n", 1, "_cubic"),
        ("from turnout.providers.cpu.kernels.conv import conv_geometry\n", 1, "internals"),
        ("\nfrom turnout.providers.cpu.registry import CPU_KERNELS\n", 2, "internals"),
        ("from turnout.providers.cpu import kernels\n", 1, "internals"),
        ("import turnout.providers.cpu.registry as r\n", 1, "internals"),
        ("from turnout.api.capi import _pybind_state\n", 1, "_pybind_state"),
        ("import turnout\nx = turnout.sdk.provider._helper\n", 2, "_helper"),
        (
            "from turnout.sdk.provider import KernelNode\n"
            "def f(kn: KernelNode):\n"
            "    return kn._subgraph_builder\n",
            3,
            "_subgraph_builder",
        ),
        (
            "from turnout.sdk.provider import KernelNode\n"
            "def f(kn: 'KernelNode | None'):\n"
            "    return getattr(kn, '_subgraph_builder')\n",
            3,
            "getattr",
        ),
        (
            "from turnout.sdk.provider import KernelNode\n"
            "def f(x):\n"
            "    kn: KernelNode = x\n"
            "    return kn.node._private\n",
            4,
            "_private",
        ),
    ],
)
def test_checker_finds(source: str, line: int, fragment: str) -> None:
    found = violations(source)
    assert any(n == line and fragment in m for n, m in found), found


@pytest.mark.parametrize(
    "source",
    [
        "from turnout.sdk.semantics import conv_geometry\n",
        "from turnout.providers.cpu import numpy_kernels\n",
        "from turnout.providers.cpu.expected_failures import EXPECTED_FAILURES\n",
        "from .registry import _local\n",  # the provider's own module
        "import numba\nnumba.core._private\n",  # not core
        "from turnout.sdk.provider import ExecutionProvider\n"
        "class P(ExecutionProvider):\n"
        "    def _get_capability(self, g):\n"
        "        return super()._get_capability(g), self._x\n",
        "from turnout.sdk.provider import KernelNode\n"
        "def f(kn: KernelNode, other):\n"
        "    return kn.__class__, other._x\n",
    ],
)
def test_checker_allows(source: str) -> None:
    assert violations(source) == []
