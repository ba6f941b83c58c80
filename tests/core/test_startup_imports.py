"""`import turnout` does only what the first use needs (issue 27).

The package root resolves its public names on first access (`turnout/__init__.py`'s `_LAZY`),
so a command-line tool or a worker that starts per job does not pay for onnx, numba or the
optimizer before it asks for them. Checked in fresh interpreters: this test process has
imported everything already.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import turnout

# never at `import turnout`: the heavy dependencies and the layers above the root
NOT_AT_IMPORT = (
    "numba",
    "onnx",
    "onnx.reference",
    "ml_dtypes",
    "ray",
    "turnout.optimizer",
    "turnout.tools.quantization",
    "turnout.engine",
    "turnout.providers",
    "turnout_numba",
)


def _modules_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running `code`."""
    script = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_import_turnout_loads_none_of_the_heavy_modules() -> None:
    loaded = _modules_after("import turnout")
    assert not [m for m in NOT_AT_IMPORT if m in loaded]


def test_a_public_name_loads_its_module_on_first_use() -> None:
    loaded = _modules_after("import turnout\nturnout.InferenceSession")
    assert "turnout.api.session" in loaded
    # providers, the optimizer and their dependencies wait for the first session
    assert not {"numba", "ray", "turnout.optimizer", "turnout_numba"} & loaded


def test_star_import_gives_every_public_name() -> None:
    namespace: dict[str, object] = {}
    exec("from turnout import *", namespace)
    assert set(turnout.__all__) <= set(namespace)


def _imports_for_type_checkers() -> dict[str, str]:
    """name → "module:attribute" (or "module") as the root's `if TYPE_CHECKING:` block says."""
    tree = ast.parse(Path(turnout.__file__).read_text())
    block = next(
        n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"
    )
    names: dict[str, str] = {}
    for statement in block.body:
        assert isinstance(statement, ast.ImportFrom) and statement.module
        for alias in statement.names:
            module = f"{statement.module}.{alias.name}"
            is_module = module in turnout._LAZY.values() or _is_module(module)
            names[alias.asname or alias.name] = (
                module if is_module else f"{statement.module}:{alias.name}"
            )
    return names


def _is_module(dotted: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(dotted) is not None
    except ModuleNotFoundError:
        return False


def test_lazy_table_matches_what_type_checkers_see() -> None:
    assert _imports_for_type_checkers() == turnout._LAZY


@pytest.mark.parametrize("name", sorted(turnout._LAZY))
def test_each_lazy_name_resolves(name: str) -> None:
    assert getattr(turnout, name) is not None
    assert name in dir(turnout)


def test_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        turnout.no_such_name  # noqa: B018
