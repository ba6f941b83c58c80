"""Providers' tests hold their kernels to the numpy kernels, never to a plain CPU request.

A `CPUExecutionProvider` request runs on an installed host provider (turnout-numba serves CPU
requests), so a reference built as `turnout.InferenceSession(model)` or with
`providers=["CPUExecutionProvider"]` compares numba with itself: a test that cannot fail. The
root conftest's `TURNOUT_CPU_NUMPY_ONLY` hid that everywhere except in tests marked
`cpu_means_host` and runs outside the repository's pytest configuration.

Every .py under providers/*/tests and plugin_template/tests is parsed (not imported) and each
turnout session whose first requested provider is the CPU (or that names no providers) is
flagged, unless its options are a variable on which the same function set the numpy-only key
(`CPU_NUMPY_ONLY_KEY` or its text) to "1". The reference to use is
`turnout.tools.testing.cpu_session(model)`. Scripts inside strings (run in subprocesses) are not
scanned.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from turnout.engine.provider_selection import CPU_NUMPY_ONLY_KEY, CPU_PROVIDER

ROOT = Path(__file__).resolve().parents[2]
SESSION_FACTORIES = {"InferenceSession": (2, "providers"), "provider_session": (1, "provider")}
CONSTANTS = {"CPU_NUMPY_ONLY_KEY": CPU_NUMPY_ONLY_KEY, "CPU_PROVIDER": CPU_PROVIDER}
ADVICE = "use turnout.tools.testing.cpu_session(model), which keeps the numpy kernels"


def _is_turnout(module: str) -> bool:
    return module == "turnout" or module.startswith("turnout.")


def _dotted(node: ast.expr) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


class _Checker(ast.NodeVisitor):
    """Collects (line, message) for each CPU-request session in one module."""

    def __init__(self) -> None:
        self.found: list[tuple[int, str]] = []
        self.modules: set[str] = set()  # local names bound to turnout modules
        self.factories: dict[str, str] = {}  # local name -> InferenceSession | provider_session
        self.strings: dict[str, str] = {}  # module-level NAME = "text"
        self.numpy_only: list[set[str]] = [set()]  # options variables with the key, per function

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if _is_turnout(alias.name):
                self.modules.add(alias.asname or alias.name.split(".")[0])

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level or not _is_turnout(module):
            return
        for alias in node.names:
            if alias.name in SESSION_FACTORIES:
                self.factories[alias.asname or alias.name] = alias.name
            elif alias.name in CONSTANTS:
                self.strings[alias.asname or alias.name] = CONSTANTS[alias.name]

    def visit_Assign(self, node: ast.Assign) -> None:
        if (
            len(self.numpy_only) == 1
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            self.strings[node.targets[0].id] = node.value.value
        self.generic_visit(node)

    def _visit_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        keyed = {
            call.func.value.id
            for call in ast.walk(node)
            if isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and call.func.attr == "add_session_config_entry"
            and isinstance(call.func.value, ast.Name)
            and len(call.args) == 2
            and self._text(call.args[0]) == CPU_NUMPY_ONLY_KEY
            and self._text(call.args[1]) == "1"
        }
        self.numpy_only.append(keyed)
        self.generic_visit(node)
        self.numpy_only.pop()

    visit_FunctionDef = _visit_function
    visit_AsyncFunctionDef = _visit_function

    def _text(self, node: ast.expr) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        name = _dotted(node)
        if name is None:
            return None
        root, _, last = name.rpartition(".")
        if root and root.split(".")[0] in self.modules:  # turnout.engine.provider_selection.CPU_...
            return CONSTANTS.get(last)
        return self.strings.get(name)

    def _factory(self, func: ast.expr) -> str | None:
        """'InferenceSession' or 'provider_session' when `func` is turnout's, else None."""
        name = _dotted(func)
        if name is None:
            return None
        if name in self.factories:
            return self.factories[name]
        root, _, last = name.rpartition(".")
        if last in SESSION_FACTORIES and root.split(".")[0] in self.modules:
            return last
        return None

    def _first_provider(self, node: ast.expr) -> ast.expr | None:
        """The first entry of a literal providers list, a spec's name when it is a tuple."""
        if not isinstance(node, (ast.List, ast.Tuple)) or not node.elts:
            return None
        first = node.elts[0]
        if isinstance(first, ast.Tuple) and first.elts:
            return first.elts[0]
        return first

    def visit_Call(self, node: ast.Call) -> None:
        self.generic_visit(node)
        factory = self._factory(node.func)
        if factory is None:
            return
        position, keyword = SESSION_FACTORIES[factory]
        words = {k.arg: k.value for k in node.keywords}
        given = words.get(keyword, node.args[position] if len(node.args) > position else None)
        if factory == "provider_session":
            cpu = given is not None and self._text(given) == CPU_PROVIDER
        elif given is None:
            cpu = True
        else:
            first = self._first_provider(given)
            cpu = first is not None and self._text(first) == CPU_PROVIDER
        if not cpu:
            return
        options = words.get("sess_options", node.args[1] if len(node.args) > 1 else None)
        if isinstance(options, ast.Name) and options.id in self.numpy_only[-1]:
            return
        what = "names no providers" if given is None else "requests CPUExecutionProvider"
        self.found.append(
            (node.lineno, f"a turnout session that {what} runs on numba where it is installed; "
             f"as a reference it compares a provider with itself: {ADVICE}")
        )  # fmt: skip


def _violations(source: str) -> list[tuple[int, str]]:
    checker = _Checker()
    checker.visit(ast.parse(source))
    return checker.found


def _test_files() -> list[Path]:
    files = [*ROOT.glob("providers/*/tests/**/*.py"), *ROOT.glob("plugin_template/tests/**/*.py")]
    return sorted(f for f in files if "__pycache__" not in f.parts)


def test_the_scan_finds_providers_tests() -> None:
    names = {f.name for f in _test_files()}
    assert {"test_numba_conv_gemm.py", "test_numba_turnout_gelu.py"} <= names


@pytest.mark.parametrize("path", _test_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_provider_tests_take_their_reference_from_the_numpy_kernels(path: Path) -> None:
    found = _violations(path.read_text())
    assert not found, "\n".join(f"{path.relative_to(ROOT)}:{line}: {msg}" for line, msg in found)


FLAGGED = {
    "no providers": "import turnout\ndef f(m):\n    turnout.InferenceSession(m).run(None, {})\n",
    "CPU by name": (
        "import turnout\n"
        "def f(m, so):\n"
        '    turnout.InferenceSession(m, so, providers=["CPUExecutionProvider"])\n'
    ),
    "CPU spec, imported name, positional": (
        "from turnout.api.session import InferenceSession as S\n"
        'CPU = "CPUExecutionProvider"\n'
        "def f(m, so):\n"
        "    S(m, so, [(CPU, {})])\n"
    ),
    "provider_session on the CPU": (
        "from turnout.tools.testing import provider_session\n"
        'def f(m):\n    provider_session(m, "CPUExecutionProvider")\n'
    ),
    "key set to 0": (
        "import turnout\n"
        "def f(m):\n"
        "    so = turnout.SessionOptions()\n"
        '    so.add_session_config_entry("session.turnout.cpu_numpy_only", "0")\n'
        "    turnout.InferenceSession(m, so)\n"
    ),
    "key set in another function": (
        "import turnout\n"
        "from turnout.engine.provider_selection import CPU_NUMPY_ONLY_KEY\n"
        "def g(so):\n    so.add_session_config_entry(CPU_NUMPY_ONLY_KEY, '1')\n"
        "def f(m, so):\n    turnout.InferenceSession(m, so)\n"
    ),
}

ALLOWED = {
    "numba by name": (
        "import turnout\n"
        'def f(m):\n    turnout.InferenceSession(m, providers=["NumbaExecutionProvider"])\n'
    ),
    "CPU behind the provider under test": (
        "import turnout\n"
        'def f(m):\n    turnout.InferenceSession(m, providers=["OpenCL", "CPUExecutionProvider"])\n'
    ),
    "onnxruntime": (
        "import onnxruntime as ort\n"
        'def f(m):\n    ort.InferenceSession(m, providers=["CPUExecutionProvider"])\n'
    ),
    "numpy-only key by name": (
        "import turnout\n"
        "from turnout.engine.provider_selection import CPU_NUMPY_ONLY_KEY\n"
        "def f(m):\n"
        "    so = turnout.SessionOptions()\n"
        '    so.add_session_config_entry(CPU_NUMPY_ONLY_KEY, "1")\n'
        '    turnout.InferenceSession(m, so, providers=["CPUExecutionProvider"])\n'
    ),
    "numpy-only key as text": (
        "import turnout\n"
        "def f(m):\n"
        "    so = turnout.SessionOptions()\n"
        '    so.add_session_config_entry("session.turnout.cpu_numpy_only", "1")\n'
        "    turnout.InferenceSession(m, sess_options=so)\n"
    ),
    "cpu_session": (
        "from turnout.tools.testing import cpu_session\n"
        "def f(m):\n    cpu_session(m).run(None, {})\n"
    ),
}


@pytest.mark.parametrize("name", sorted(FLAGGED))
def test_the_check_flags_a_cpu_request(name: str) -> None:
    assert len(_violations(FLAGGED[name])) == 1


@pytest.mark.parametrize("name", sorted(ALLOWED))
def test_the_check_lets_numpy_references_and_named_providers_pass(name: str) -> None:
    assert _violations(ALLOWED[name]) == []
