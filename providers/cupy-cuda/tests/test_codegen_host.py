"""The generated CUDA's arithmetic, checked on the CPU: every kernel the representative graphs
make (`turnout_cupy.representative`, as the compile-only check uses them) is compiled, the same
kernel text, as host C++ for one block of one thread (`codegen.HOST_PRELUDE`: the grid-stride
loops then walk every element and row, the block reductions are trivial), and run in place of
CuPy by the emulated provider; the sessions' outputs are compared with onnxruntime's. What this
cannot check: CUDA's math library, the launch configuration and reductions across threads (the
GPU check does).
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from onnx.reference import ReferenceEvaluator
from onnxruntime.capi.onnxruntime_pybind11_state import NotImplemented as OrtNotImplemented

from turnout.api.options import SessionOptions
from turnout.api.session import InferenceSession
from turnout.sdk.plugins import registry
from turnout.sdk.provider import Availability, Device, ExecutionProvider
from turnout_cupy.backend import Backend
from turnout_cupy.check import collect_generated
from turnout_cupy.codegen import DEVICE_PRELUDE, HOST_PRELUDE
from turnout_cupy.emulated import EmulatedFactory
from turnout_cupy.provider import CuPyExecutionProvider
from turnout_cupy.representative import cases

CXX = shutil.which("g++") or shutil.which("c++")
pytestmark = pytest.mark.skipif(CXX is None, reason="needs a C++ compiler for the host build")
HOST_NAME = "CuPyHostBuildExecutionProvider"


class HostLauncher:
    """Looks up each kernel's host build in one shared library and calls it with ctypes."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.lib = lib
        self.calls = 0

    def build(self, name: str, source: str) -> Any:
        return getattr(self.lib, name)

    def call(self, fn: Any, grid: int, block: int, params: Sequence[Any]) -> None:
        self.calls += 1
        fn(*(_ctype(p) for p in params))


def _ctype(p: Any) -> Any:
    if isinstance(p, np.ndarray):
        return ctypes.c_void_p(p.ctypes.data)
    if isinstance(p, np.float64):
        return ctypes.c_double(float(p))
    return ctypes.c_longlong(int(p))


@pytest.fixture(scope="module")
def host_lib(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    functions: dict[str, str] = {}
    for program, variant in collect_generated():
        source = program.source(variant)
        assert source.startswith(DEVICE_PRELUDE)
        functions.setdefault(program.kernel_name(variant), source[len(DEVICE_PRELUDE) :])
    tmp = tmp_path_factory.mktemp("host")
    src, lib = Path(tmp, "kernels.cpp"), Path(tmp, "kernels.so")
    src.write_text(HOST_PRELUDE + "\n".join(functions.values()))
    cmd = [str(CXX), "-O1", "-std=c++14", "-shared", "-fPIC", "-o", str(lib), str(src)]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return ctypes.CDLL(str(lib))


@pytest.fixture(scope="module")
def launcher(host_lib: ctypes.CDLL) -> Iterator[HostLauncher]:
    launch = HostLauncher(host_lib)

    class HostFactory(EmulatedFactory):
        name = HOST_NAME

        def _probe(self) -> Availability:
            return Availability(True, version="host build of the generated CUDA (tests only)")

        def _create(self, options: dict[str, Any]) -> ExecutionProvider:
            be = Backend(np, Device("cpu", 0), emulated=True, launcher=launch)
            return CuPyExecutionProvider(options, self, be)

    registry.register(HostFactory())
    yield launch
    registry.unregister(HOST_NAME)


CASES = list(cases())


def _expected(model: Any, feeds: dict[str, np.ndarray]) -> tuple[list[np.ndarray], float]:
    """onnxruntime's outputs and the float64 tolerance; onnx.reference's where onnxruntime has
    no kernel (float64 activations), with a float32-level tolerance, as the reference computes
    some of them (Erf, HardSwish's 1/6) in float32."""
    try:
        ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except OrtNotImplemented:
        return list(ReferenceEvaluator(model).run(None, feeds)), 1e-6
    return list(ref.run(None, feeds)), 1e-12


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_generated_kernels_compute_what_onnxruntime_does(case: Any, launcher: HostLauncher) -> None:
    name, model, feeds = case
    so = SessionOptions()
    so.fallback = "warn"  # MatMul etc. run on the emulated kernels; the groups on the host build
    before = launcher.calls
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = InferenceSession(model.SerializeToString(), so, providers=[HOST_NAME])
        got = sess.run(None, feeds)
    assert launcher.calls > before, f"{name}: no generated kernel ran"
    expected, tol64 = _expected(model, feeds)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape
        tol = 1e-5 if e.dtype == np.float32 else tol64
        np.testing.assert_allclose(g, e, rtol=tol, atol=tol * 10)
