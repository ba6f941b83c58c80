"""The CPU provider's kernel modules load per op type on first use (issue 27): the op index
(`turnout/providers/cpu/kernel_index.py`) must name, for every op, the module that registers
its kernels, or a session would miss a kernel that importing every module registers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from turnout.providers.cpu import kernels
from turnout.providers.cpu.kernels import render_index


def test_index_file_is_what_importing_every_module_registers() -> None:
    written = Path(kernels.__file__).parent.with_name("kernel_index.py").read_text()
    assert written == render_index(), "run turnout.providers.cpu.kernels.write_index()"


def test_loading_an_ops_module_registers_all_its_kernels() -> None:
    """In a fresh process, each op's kernels as loaded through the index alone equal its
    kernels once every module is imported."""
    script = (
        "import json\n"
        "from turnout.providers.cpu.kernels import load_all\n"
        "from turnout.providers.cpu.registry import CPU_KERNELS as R\n"
        "lazy = {}\n"
        "for key in R.ops():\n"
        "    R.load(*key)\n"
        "    lazy[repr(key)] = [d.factory.__qualname__ for d in R.defs(*key)]\n"
        "load_all()\n"
        "full = {repr(k): [d.factory.__qualname__ for d in R.defs(*k)] for k in R.registered()}\n"
        "print(json.dumps([lazy, full]))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    lazy, full = json.loads(done.stdout)
    assert lazy == full


def test_a_plain_model_loads_only_the_modules_of_its_ops() -> None:
    script = (
        "import json, sys, numpy as np, turnout\n"
        "from onnx import TensorProto as T, helper as h\n"
        "g = h.make_graph([h.make_node('Relu', ['x'], ['y'])], 'g',"
        " [h.make_tensor_value_info('x', T.FLOAT, [2])],"
        " [h.make_tensor_value_info('y', T.FLOAT, [2])])\n"
        "m = h.make_model(g, opset_imports=[h.make_opsetid('', 21)])\n"
        "s = turnout.InferenceSession(m.SerializeToString(), providers=['CPUExecutionProvider'])\n"
        "assert s.run(None, {'x': np.array([1.5, -2.5], np.float32)})[0].tolist() == [1.5, 0]\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    loaded = set(json.loads(done.stdout.splitlines()[-1]))
    prefix = "turnout.providers.cpu.kernels."
    modules = {m.removeprefix(prefix) for m in loaded if m.startswith(prefix)}
    assert "activation" in modules
    assert not {"rnn", "ml_trees", "string", "contrib_attention"} & modules, sorted(modules)
