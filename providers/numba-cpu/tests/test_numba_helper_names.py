"""Every function a compiled GEMM kernel defines has a name of its own (`cache.distinct_helper`).

numba names a compiled function by module, qualified name, a counter of the compiling process
and argument types, and a kernel calls its helpers by those names. Where two helpers differ
only by that counter (closures of one factory), kernels cached by different processes can
name different helpers alike, and a process that loads both links one kernel's calls to the
other's helper: CI saw QLinearMatMul's rows 1-3 of every tile come out of the one-row tile.
Inspecting a kernel's LLVM IR needs it compiled, not loaded, so each check compiles in a
subprocess with an empty cache."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter

import pytest

_COMPILE = """
import json, re, sys
import numpy as np
from turnout_numba.kernels import quant_gemm, quant_vnni
from turnout_numba.registry import BuildContext

kernels = [quant_gemm.IntGemm(BuildContext(parallel=True), "int", np.int32).kernel]
if sys.argv[1] == "vnni":
    kernels = [quant_vnni.VnniGemm(BuildContext(parallel=True), "int", np.int32).kernel]
names = []
for kernel in kernels:
    for disp in (kernel.serial, kernel.parallel):
        for ir in disp.inspect_llvm().values():
            names.append(re.findall(r'^define [^@]*@"?([^"(\\s]+)', ir, re.M))
print(json.dumps(names))
"""


def _without_counter(name: str) -> str:
    """`name` less numba's per-process counter (the ABI tag `v<digits>`, mangled `B<len>v..`)."""
    return re.sub(r"B(\d+)(v\d+)", lambda m: "" if int(m[1]) == len(m[2]) else m[0], name)


def _defined_names(which: str, cache: str) -> list[list[str]]:
    env = {**os.environ, "TURNOUT_CACHE_DIR": cache}
    done = subprocess.run(
        [sys.executable, "-c", _COMPILE, which],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    names: list[list[str]] = json.loads(done.stdout.strip().splitlines()[-1])
    return names


def _assert_distinct(libraries: list[list[str]]) -> None:
    assert libraries and all(libraries), "no functions found in the kernels' LLVM IR"
    for defined in libraries:
        alike = [n for n, c in Counter(map(_without_counter, defined)).items() if c > 1]
        assert not alike, f"functions named alike but for numba's counter: {alike}"


def test_counter_is_what_is_removed() -> None:
    name = "_ZN5tiles4implB3v11B5c8tJTE5ArrayIsLi1E"
    assert _without_counter(name) == "_ZN5tiles4implB5c8tJTE5ArrayIsLi1E"
    assert _without_counter(name.replace("v11", "v12")) == _without_counter(name)


def test_int16_gemm_helpers_distinct(tmp_path: os.PathLike[str]) -> None:
    libraries = _defined_names("int16", str(tmp_path))
    assert any("turnout_i16_tile" in n for lib in libraries for n in lib)
    _assert_distinct(libraries)


def test_vnni_gemm_helpers_distinct(tmp_path: os.PathLike[str]) -> None:
    from turnout_numba.kernels import quant_vnni

    if not quant_vnni.AVAILABLE:
        pytest.skip("this host has no AVX-512 VNNI (or numba compiles for another CPU)")
    libraries = _defined_names("vnni", str(tmp_path))
    assert any("turnout_vnni_tile" in n for lib in libraries for n in lib)
    _assert_distinct(libraries)
