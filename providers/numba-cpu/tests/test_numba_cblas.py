"""`cblas.gemm_call` through both integer widths of the cblas interface.

numpy's wheels carry an ILP64 OpenBLAS (`scipy_cblas_sgemm64_`, 64-bit sizes); distribution
and conda builds are LP64 (plain names, 32-bit sizes). The LP64 branch is exercised with the
`scipy-openblas32` wheel (the provider's `test` extra), whose library is loaded here only.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from turnout_numba import cblas
from turnout_numba.kernels import pool_matmul as pm


def _lp64() -> tuple[Any, cblas.Gemm]:
    lp = pytest.importorskip(
        "scipy_openblas32", reason="the LP64 OpenBLAS wheel (test extra) is not installed"
    )
    path = next(Path(lp.get_lib_dir()).glob(f"lib{lp.get_library()}.*"))
    dll = ctypes.CDLL(str(path))
    address = ctypes.cast(dll.scipy_cblas_sgemm, ctypes.c_void_p).value
    assert address
    return dll, cblas.Gemm(int(address), ilp64=False)


def _product(gemm: cblas.Gemm, by_columns: bool) -> None:
    rng = np.random.default_rng(5)
    a = rng.standard_normal((70, 90)).astype(np.float32)
    b_full = rng.standard_normal((90, 130)).astype(np.float32)
    b = b_full[:, 10:110]  # a leading dimension wider than the columns
    c = np.full((70, 100), np.nan, np.float32)
    pm._kernel(np.dtype(np.float32))(gemm.address, gemm.ilp64, a, b, c, 3, by_columns)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("by_columns", [True, False], ids=["columns", "rows"])
def test_lp64_library_through_32_bit_sizes(by_columns: bool) -> None:
    dll, gemm = _lp64()
    assert not cblas._config_says_ilp64(dll, "scipy_")
    _product(gemm, by_columns)


@pytest.mark.parametrize("by_columns", [True, False], ids=["columns", "rows"])
def test_numpys_library(by_columns: bool) -> None:
    gemm = cblas.find_gemm("float32")
    if gemm is None:
        pytest.skip("numpy's BLAS is not an OpenBLAS with cblas_sgemm (or threadpoolctl missing)")
    _product(gemm, by_columns)


def test_only_openblas_floats_are_found() -> None:
    assert cblas.find_gemm("float16") is None
    assert cblas.find_gemm("int32") is None
