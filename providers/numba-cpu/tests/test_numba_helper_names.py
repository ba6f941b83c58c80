"""Every function a compiled GEMM kernel defines has a name of its own (`cache.distinct_helper`).

numba names a compiled function by module, qualified name, a counter of the compiling process
and argument types, and a kernel calls its helpers by those names. Where two helpers differ
only by that counter (closures of one factory), kernels cached by different processes can
name different helpers alike, and a process that loads both links one kernel's calls to the
other's helper: CI saw QLinearMatMul's rows 1-3 of every tile come out of the one-row tile.
Inspecting a kernel's LLVM IR needs it compiled, not loaded, so each check compiles in a
subprocess with an empty cache. numba's counter itself starts at a random point in each process
and each forked child, for the closures this provider does not name (numba's own)."""

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

ctx = BuildContext(parallel=True)
kernels = [quant_gemm.IntGemm(ctx, "int", np.int32).kernel]
if sys.argv[1] == "vnni":  # the driver calls the tiles
    kernels = [quant_vnni.VnniGemm(ctx, "int", np.int32, transposed=False).driver]
defined, called = [], []
for kernel in kernels:
    for disp in (kernel.serial, kernel.parallel):
        for ir in disp.inspect_llvm().values():
            defined.append(re.findall(r'^define [^@]*@"?([^"(\\s]+)', ir, re.M))
            called.append(re.findall(r'call [^@]*@"?([^"(\\s]+)', ir))
print(json.dumps([defined, called]))
"""


def _without_counter(name: str) -> str:
    """`name` less numba's per-process counter (the ABI tag `v<digits>`, mangled `B<len>v..`)."""
    return re.sub(r"B(\d+)(v\d+)", lambda m: "" if int(m[1]) == len(m[2]) else m[0], name)


def _compiled_names(which: str, cache: str) -> tuple[list[list[str]], list[list[str]]]:
    """Per compiled library of the kernels: the functions it defines, and those it calls."""
    env = {**os.environ, "TURNOUT_CACHE_DIR": cache}
    done = subprocess.run(
        [sys.executable, "-c", _COMPILE, which],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    defined, called = json.loads(done.stdout.strip().splitlines()[-1])
    return defined, called


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
    libraries, _ = _compiled_names("int16", str(tmp_path))
    assert any("turnout_i16_tile" in n for lib in libraries for n in lib)
    _assert_distinct(libraries)


def test_vnni_gemm_helpers_distinct(tmp_path: os.PathLike[str]) -> None:
    from turnout_numba.kernels import quant_vnni

    if not quant_vnni.AVAILABLE:
        pytest.skip("this host has no AVX-512 VNNI (or numba compiles for another CPU)")
    libraries, called = _compiled_names("vnni", str(tmp_path))
    if not any("turnout_vnni_tile" in n for lib in libraries for n in lib):
        # LLVM may inline the tiles into the driver (seen on a Zen 5): then no kernel calls a
        # tile by name, which is what must hold, and the driver runs their VNNI instructions
        assert not any("turnout_vnni_tile" in n for lib in called for n in lib)
        assert any("vpdpbusd" in n for lib in called for n in lib), "no tile found, inlined or not"
    _assert_distinct(libraries)


_COUNTERS = """
import os
from numba.core import bytecode
import turnout_numba.cache

first = next(bytecode.FunctionIdentity._unique_ids)
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    os.write(write, str(next(bytecode.FunctionIdentity._unique_ids)).encode())
    os._exit(0)
os.waitpid(pid, 0)
print(first, next(bytecode.FunctionIdentity._unique_ids), os.read(read, 64).decode())
"""


def test_function_counters_start_apart() -> None:
    """Two processes, and a parent and its forked child, do not count their functions alike."""
    runs = [
        subprocess.run(
            [sys.executable, "-c", _COUNTERS], capture_output=True, text=True, timeout=120
        )
        for _ in range(2)
    ]
    assert all(r.returncode == 0 for r in runs), runs[0].stderr[-2000:]
    (a, a_parent, a_child), (b, _, _) = (map(int, r.stdout.split()) for r in runs)
    assert a_parent == a + 1  # the parent keeps counting
    assert abs(a_child - a_parent) > 1_000_000, "a forked child counts on from its parent"
    assert abs(a - b) > 1_000_000, "two processes count from the same point"
