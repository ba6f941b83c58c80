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
    "ml_dtypes._ml_dtypes_ext",  # ml_dtypes itself is registered, deferred: its code has not run
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


def test_a_float_model_runs_without_ml_dtypes() -> None:
    """ml_dtypes (0.35-0.45 s to import) runs only for a model with its element types."""
    loaded = _modules_after(
        "import numpy as np, turnout\n"
        "from onnx import TensorProto as T, helper as h\n"
        "g = h.make_graph([h.make_node('Cast', ['x'], ['y'], to=T.INT64)], 'g',"
        " [h.make_tensor_value_info('x', T.FLOAT, [2])],"
        " [h.make_tensor_value_info('y', T.INT64, [2])])\n"
        "m = h.make_model(g, opset_imports=[h.make_opsetid('', 21)])\n"
        "s = turnout.InferenceSession(m.SerializeToString(), providers=['CPUExecutionProvider'])\n"
        "assert s.run(None, {'x': np.array([1.5, -2.5], np.float32)})[0].tolist() == [1, -2]\n"
    )
    assert "ml_dtypes._ml_dtypes_ext" not in loaded


def test_a_bfloat16_model_loads_ml_dtypes_when_it_needs_it() -> None:
    loaded = _modules_after(
        "import numpy as np, turnout\n"
        "from onnx import TensorProto as T, helper as h\n"
        "g = h.make_graph([h.make_node('Cast', ['x'], ['y'], to=T.BFLOAT16)], 'g',"
        " [h.make_tensor_value_info('x', T.FLOAT, [2])],"
        " [h.make_tensor_value_info('y', T.BFLOAT16, [2])])\n"
        "m = h.make_model(g, opset_imports=[h.make_opsetid('', 21)])\n"
        "s = turnout.InferenceSession(m.SerializeToString(), providers=['CPUExecutionProvider'])\n"
        "y = s.run(None, {'x': np.array([1.5, -2.0], np.float32)})[0]\n"
        "assert str(y.dtype) == 'bfloat16' and y.astype(np.float32).tolist() == [1.5, -2.0]\n"
    )
    assert "ml_dtypes._ml_dtypes_ext" in loaded


def test_a_deferred_module_loads_once_when_threads_read_it_at_once() -> None:
    _modules_after(
        "import threading, turnout\n"
        "from turnout._deferred_imports import loaded\n"
        "import ml_dtypes, onnx\n"
        "assert not loaded('ml_dtypes') and ml_dtypes.__spec__.name == 'ml_dtypes'\n"
        "seen = []\n"
        "threads = [threading.Thread(target=lambda: seen.append(ml_dtypes.bfloat16))"
        " for _ in range(8)]\n"
        "[t.start() for t in threads]; [t.join() for t in threads]\n"
        "assert len(seen) == 8 and len(set(map(id, seen))) == 1 and loaded('ml_dtypes')\n"
        "from ml_dtypes import finfo\n"
        "assert float(finfo(ml_dtypes.bfloat16).max) > 3e38\n"
        "bf16 = onnx.helper.tensor_dtype_to_np_dtype(onnx.TensorProto.BFLOAT16)\n"
        "assert bf16.name == 'bfloat16'\n"
    )


def test_submodules_read_as_attributes_after_a_bare_import() -> None:
    """Code written when `import turnout` imported everything reads submodules as attributes
    (`turnout.sdk.plugins.registry`, as turnout-opencl's tests do): they import on first read."""
    loaded = _modules_after(
        "import turnout\n"
        "assert turnout.sdk.plugins.registry.find('CPUExecutionProvider') is not None\n"
        "assert turnout.providers.cpu.kernels.load_all\n"
        "assert turnout.graph.contrib.ops is not None\n"
        "try:\n    turnout.sdk.no_such_module\nexcept AttributeError:\n    pass\n"
        "else:\n    raise SystemExit('no AttributeError')\n"
    )
    assert "turnout.sdk.plugins" in loaded


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


# a model of onnx's own ops needs neither the contrib schemas (registering them imports
# onnx.reference, 15-20 ms) nor the measured placement policy (the timing pass and its cache)
NOT_AT_FIRST_SESSION = (
    "onnx.reference",
    "turnout.graph.contrib.spec",
    "turnout.graph.contrib.ops",
    "turnout.engine.placement.measured",
    "turnout.engine.placement.timing",
    "turnout.engine.placement.cache",
)

_PLAIN_MODEL = (
    "import numpy as np, turnout\n"
    "from onnx import TensorProto as T, helper as h\n"
    "nodes = [h.make_node('Conv', ['x', 'w'], ['c'], pads=[1, 1, 1, 1]),"
    " h.make_node('Relu', ['c'], ['r']), h.make_node('Flatten', ['r'], ['f']),"
    " h.make_node('LayerNormalization', ['f', 's'], ['n'], axis=-1),"  # onnx's own at 17
    " h.make_node('Softmax', ['n'], ['y'])]\n"
    "inits = [h.make_tensor('w', T.FLOAT, [2, 1, 3, 3], [0.1] * 18),"
    " h.make_tensor('s', T.FLOAT, [32], [1.0] * 32)]\n"
    "g = h.make_graph(nodes, 'g', [h.make_tensor_value_info('x', T.FLOAT, [1, 1, 4, 4])],"
    " [h.make_tensor_value_info('y', T.FLOAT, [1, 32])], inits)\n"
    "m = h.make_model(g, opset_imports=[h.make_opsetid('', 17)])\n"
    "so = turnout.SessionOptions()\n"
)


def test_a_plain_model_first_session_loads_no_contrib_schema_nor_measured_placement() -> None:
    loaded = _modules_after(
        _PLAIN_MODEL + "s = turnout.InferenceSession(m.SerializeToString(), so,"
        " providers=['CPUExecutionProvider'])\n"
        "y = s.run(None, {'x': np.ones((1, 1, 4, 4), np.float32)})[0]\n"
        "assert y.shape == (1, 32) and abs(float(y.sum()) - 1) < 1e-5\n"
        "assert not any(a.source == 'onnx.reference' for a in s.partition_report().assignments)\n"
    )
    assert not [m for m in NOT_AT_FIRST_SESSION if m in loaded]
    assert "turnout.engine.placement" in loaded


def test_measured_placement_loads_its_policy_when_asked() -> None:
    loaded = _modules_after(
        _PLAIN_MODEL + "so.placement = 'measured'\n"
        "s = turnout.InferenceSession(m.SerializeToString(), so,"
        " providers=['CPUExecutionProvider'])\n"
        "assert s.partition_report().placement['policy'] == 'measured'\n"
        "y = s.run(None, {'x': np.ones((1, 1, 4, 4), np.float32)})[0]\n"
        "assert y.shape == (1, 32)\n"
    )
    assert "turnout.engine.placement.measured" in loaded


def test_onnx_submodules_a_session_never_uses_load_when_read() -> None:
    """`import onnx` binds compose, utils, gen_proto, ... for its namespace; turnout defers
    them (6-8 ms): a session runs without them, and each loads on its first read."""
    loaded = _modules_after(
        _PLAIN_MODEL + "s = turnout.InferenceSession(m.SerializeToString(), so,"
        " providers=['CPUExecutionProvider'])\n"
        "s.run(None, {'x': np.ones((1, 1, 4, 4), np.float32)})\n"
        "from turnout._deferred_imports import DEFERRED, loaded\n"
        "unused = [d for d in DEFERRED if d.startswith('onnx.') and d != 'onnx._mapping']\n"
        "assert len(unused) == 6 and not [d for d in unused if loaded(d)]\n"
        "import onnx, onnx.utils\n"
        "from onnx import compose, version_converter\n"
        "assert onnx.compose is compose and callable(compose.merge_models)\n"
        "assert callable(onnx.utils.extract_model) and loaded('onnx.utils')\n"
        "from onnx.printer import to_text\n"
        "assert 'Relu' in to_text(m.graph)\n"
        "assert onnx.parser.parse_graph and version_converter.convert_version(m, 18)\n"
    )
    assert "onnx.compose" in loaded


def test_semantics_lazy_table_matches_what_type_checkers_see() -> None:
    """`turnout.sdk.semantics` reads its public names from their submodules on first use;
    its table must list what its `if TYPE_CHECKING:` block imports, and every name resolves."""
    import turnout.sdk.semantics as sem

    tree = ast.parse(Path(sem.__file__).read_text())
    block = next(
        n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"
    )
    seen = {
        alias.name: statement.module.rpartition(".")[2]
        for statement in block.body
        if isinstance(statement, ast.ImportFrom) and statement.module
        for alias in statement.names
    }
    assert seen == sem._LAZY
    assert set(sem.__all__) == set(seen)
    assert all(getattr(sem, name) is not None for name in sem.__all__)
