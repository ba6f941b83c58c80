"""The compile-only check: every generated CUDA kernel compiles for sm_80 and sm_90 with the
nvcc of this machine (or NVRTC from its pip wheel), without a GPU; a kernel that does not
compile makes it fail with the compiler's message."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest

from turnout_cupy import check
from turnout_cupy.codegen import GroupProgram, Step, Variant


def _nvrtc_reason() -> str | None:
    try:
        from cupy_backends.cuda.libs import nvrtc

        nvrtc.getVersion()
    except Exception as e:
        return f"NVRTC is not usable here ({type(e).__name__}: {e})"
    return None


needs_compiler = pytest.mark.skipif(
    check._nvcc() is None and _nvrtc_reason() is not None,
    reason="needs nvcc (CUDA toolkit) or NVRTC (pip install nvidia-cuda-nvrtc)",
)


@needs_compiler
def test_compile_only_compiles_every_generated_kernel() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "turnout_cupy.check", "--compile-only"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    m = re.search(r"compiled (\d+) kernels \((\d+) generated sources\) for sm_80, sm_90", r.stdout)
    assert m, r.stdout
    kernels, sources = int(m.group(1)), int(m.group(2))
    assert kernels >= 60 and sources >= kernels


def _broken() -> str:
    program = GroupProgram(
        "broken",
        [("a", np.dtype(np.float32))],
        [Step("Exp", {}, ("a",), "y")],
        ["y"],
        np.float32,
    )
    return program.source(Variant(0, (True,))).replace("exp(x0)", "exp(x0, x0, x0)")


@needs_compiler
def test_a_kernel_that_does_not_compile_fails_with_the_compiler_message() -> None:
    tu, names = check.translation_unit([_broken()])
    assert len(names) == 1
    with pytest.raises(RuntimeError, match=r"(nvcc|NVRTC) -arch=sm_80 failed:[\s\S]*exp"):
        check.compile_sources(tu)


@pytest.mark.skipif(_nvrtc_reason() is not None, reason=str(_nvrtc_reason()))
def test_nvrtc_compiles_when_nvcc_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(check, "_nvcc", lambda: None)
    program = GroupProgram(
        "g", [("a", np.dtype(np.float64))], [Step("Tanh", {}, ("a",), "y")], ["y"], np.float64
    )
    tu, _ = check.translation_unit([program.source(Variant(2, (False,)))])
    assert check.compile_sources(tu).startswith("NVRTC ")
    with pytest.raises(RuntimeError, match="NVRTC -arch=sm_80 failed"):
        check.compile_sources(check.translation_unit([_broken()])[0])


def test_sources_must_share_the_prelude() -> None:
    with pytest.raises(ValueError, match="shared prelude"):
        check.translation_unit(["__global__ void k() {}"])
