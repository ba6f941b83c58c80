"""Every import path of the package before it was regrouped into layers still works.

`public_names_before_layers.json` lists each module of `turnout` as it was before the layers
(at commit f32db4c) with the names its `__all__` exported. Each must still import, by its old
path, and give the same object as the module's new home; each public name must still be there.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

import turnout
from turnout._moved import MOVED, OUTSIDE, new_name

BEFORE = json.loads((Path(__file__).parent / "public_names_before_layers.json").read_text())


@pytest.mark.parametrize("old", sorted(BEFORE))
def test_old_module_imports_with_its_public_names(old: str) -> None:
    _needs_the_testbed(old)
    module = importlib.import_module(old)
    new = new_name(old)
    if new is not None:
        assert module is importlib.import_module(new), f"{old} is not the module at {new}"
    missing = [name for name in BEFORE[old] if not hasattr(module, name)]
    assert not missing, f"{old} lost {missing}"


def test_old_from_imports_give_the_same_objects() -> None:
    from turnout.capi.onnxruntime_pybind11_state import OrtSyncStream, copy_tensors
    from turnout.provider import ExecutionProvider, KernelNode
    from turnout.session import InferenceSession
    from turnout.values import SparseTensor

    assert InferenceSession is turnout.InferenceSession
    assert SparseTensor is turnout.SparseTensor
    assert copy_tensors is turnout.copy_tensors and OrtSyncStream is turnout.OrtSyncStream
    assert KernelNode is importlib.import_module("turnout.graph.ir").KernelNode
    assert ExecutionProvider is importlib.import_module("turnout.sdk.provider").ExecutionProvider


def test_every_moved_name_has_a_home() -> None:
    for old, new in MOVED.items():
        if old not in OUTSIDE or TESTBED:
            assert importlib.import_module(old) is importlib.import_module(new)


def test_a_module_that_left_the_wheel_says_where_it_went() -> None:
    """Where turnout-testbed is missing (here it is hidden from a child process), its old paths
    fail naming the distribution to install."""
    hide = (
        "import sys, importlib.abc\n"
        "class Hide(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.partition('.')[0] == 'turnout_testbed':\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, Hide())\n"
        "import turnout.models.zoo\n"
    )
    done = subprocess.run([sys.executable, "-c", hide], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "turnout.models.zoo moved to turnout_testbed.zoo" in done.stderr
    assert "turnout-testbed" in done.stderr


TESTBED = importlib.util.find_spec("turnout_testbed") is not None


def _needs_the_testbed(old: str) -> None:
    if old in OUTSIDE and not TESTBED:
        pytest.skip(f"{old} moved to turnout-testbed, which is not installed")


def test_a_module_imported_by_its_old_path_keeps_its_own_spec() -> None:
    """The import system sets the alias's spec on the module; it must get its own back, or
    importlib.resources (and runpy, pickle) would look for it under the old name."""
    from importlib.resources import files

    import turnout.models  # the old path of turnout.tools.models

    assert turnout.models.__spec__.name == "turnout.tools.models"
    assert files("turnout.tools.models").joinpath("tiny_cnn.onnx").read_bytes()


def test_an_unknown_name_under_a_moved_package_is_still_an_import_error() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("turnout.capi.no_such_module")


@pytest.mark.parametrize("old", ["turnout.as_onnxruntime", "turnout.api.as_onnxruntime"])
def test_python_dash_m_runs_old_and_new_paths(old: str, tmp_path: Path) -> None:
    script = tmp_path / "app.py"
    script.write_text("import onnxruntime\nprint(onnxruntime.InferenceSession.__module__)\n")
    done = subprocess.run(
        [sys.executable, "-m", old, str(script)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "turnout.api.session"
