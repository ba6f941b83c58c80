"""CUDA C for row kernels over the last axis: LayerNormalization, with the residual Add before
it fused in (the epilogue of a transformer block: y = LayerNorm(x + r)), and Softmax and
LogSoftmax; one launch each instead of one per reduction and elementwise step.

One block per row (grid-stride over rows), threads striding the row: a tree reduction in shared
memory for the mean, a second pass for the variance (two passes: no cancellation in E[x^2] -
E[x]^2), then the normalized row times the scale plus the bias. The sum x + r, when something
else reads it too, is written out on the first pass. Float32 rows accumulate in float, float64
rows in double, as the unfused kernels do.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from .codegen import CTYPES, DEVICE_PRELUDE, MAX_GRID, Variant

__all__ = ["ROW_BLOCK", "LayerNormProgram", "SoftmaxProgram"]

ROW_BLOCK = 256
"""Threads per row (a power of two, for the tree reduction)."""


class LayerNormProgram:
    """One (residual +) LayerNorm kernel: its float type and which optional parts it has."""

    def __init__(self, dtype: Any, residual: bool, bias: bool, write_sum: bool) -> None:
        self.dtype = np.dtype(dtype)
        self.ctype = CTYPES[self.dtype.name]
        self.residual, self.bias, self.write_sum = residual, bias, write_sum and residual

    def kernel_name(self, v: Variant | None = None) -> str:
        text = repr((self.ctype, self.residual, self.bias, self.write_sum))
        return f"tn_layernorm_{hashlib.sha1(text.encode()).hexdigest()[:8]}"

    def params(self) -> list[str]:
        t = self.ctype
        ps = [f"const {t}* __restrict__ x"]
        ps += [f"const {t}* __restrict__ r"] if self.residual else []
        ps += [f"const {t}* __restrict__ g"]
        ps += [f"const {t}* __restrict__ b"] if self.bias else []
        ps += [f"{t}* __restrict__ y"]
        ps += [f"{t}* __restrict__ s"] if self.write_sum else []
        return [*ps, "const long long rows", "const long long h", "const double eps"]

    def function(self, v: Variant | None = None) -> str:
        load = "xr[j] + rr[j]" if self.residual else "xr[j]"
        rrow = "    const T* rr = r + row * h;\n" if self.residual else ""
        srow = "    T* sr = s + row * h;\n" if self.write_sum else ""
        store_sum = "      sr[j] = v;\n" if self.write_sum else ""
        bias = " + b[j]" if self.bias else ""
        reduce = _block_reduce("red[threadIdx.x] += red[threadIdx.x + k]")
        params = ",\n    ".join(self.params())
        return (
            f'extern "C" __global__ void {self.kernel_name()}(\n    {params}) {{\n'
            f"  typedef {self.ctype} T;\n"
            f"  __shared__ T red[{ROW_BLOCK}];\n"
            "  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {\n"
            "    const T* xr = x + row * h;\n"
            f"{rrow}{srow}"
            "    T* yr = y + row * h;\n"
            "    T acc = T(0);\n"
            "    for (long long j = threadIdx.x; j < h; j += blockDim.x) {\n"
            f"      const T v = {load};\n{store_sum}"
            "      acc += v;\n    }\n"
            f"{reduce}"
            "    const T mean = red[0] / T(h);\n    __syncthreads();\n"
            "    acc = T(0);\n"
            "    for (long long j = threadIdx.x; j < h; j += blockDim.x) {\n"
            f"      const T d = {load} - mean;\n"
            "      acc += d * d;\n    }\n"
            f"{reduce}"
            "    const T inv = T(1) / sqrt(red[0] / T(h) + T(eps));\n    __syncthreads();\n"
            "    for (long long j = threadIdx.x; j < h; j += blockDim.x) {\n"
            f"      yr[j] = ({load} - mean) * inv * g[j]{bias};\n"
            "    }\n  }\n}\n"
        )

    def source(self, v: Variant | None = None) -> str:
        return DEVICE_PRELUDE + "\n" + self.function(v)

    def launch(self, rows: int) -> tuple[int, int]:
        """(grid, block): a block per row, the grid capped (the row loop strides)."""
        return min(max(rows, 1), MAX_GRID), ROW_BLOCK


def _block_reduce(combine: str) -> str:
    """Tree reduction of `red[]` over the block; `combine` updates red[t] from red[t + k]."""
    return (
        "    red[threadIdx.x] = acc;\n    __syncthreads();\n"
        "    for (int k = blockDim.x / 2; k > 0; k >>= 1) {\n"
        f"      if (threadIdx.x < k) {combine};\n"
        "      __syncthreads();\n    }\n"
    )


class SoftmaxProgram:
    """Softmax or LogSoftmax over the last axis: one block per row, the row's max and the sum
    of exponentials by block reductions (NaN propagates through the max, as in numpy)."""

    def __init__(self, dtype: Any, log: bool) -> None:
        self.dtype = np.dtype(dtype)
        self.ctype = CTYPES[self.dtype.name]
        self.log = log

    def kernel_name(self, v: Variant | None = None) -> str:
        return f"tn_{'log' if self.log else ''}softmax_{self.ctype}"

    def function(self, v: Variant | None = None) -> str:
        t = self.ctype
        out = "(xr[j] - top) - log(total)" if self.log else "exp(xr[j] - top) / total"
        return (
            f'extern "C" __global__ void {self.kernel_name()}(\n'
            f"    const {t}* __restrict__ x,\n    {t}* __restrict__ y,\n"
            "    const long long rows,\n    const long long h) {\n"
            f"  typedef {t} T;\n"
            f"  __shared__ T red[{ROW_BLOCK}];\n"
            "  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {\n"
            "    const T* xr = x + row * h;\n    T* yr = y + row * h;\n"
            "    T acc = xr[0];\n"
            "    for (long long j = threadIdx.x; j < h; j += blockDim.x)\n"
            "      acc = tn_max(acc, xr[j]);\n"
            + _block_reduce("red[threadIdx.x] = tn_max(red[threadIdx.x], red[threadIdx.x + k])")
            + "    const T top = red[0];\n    __syncthreads();\n"
            "    acc = T(0);\n"
            "    for (long long j = threadIdx.x; j < h; j += blockDim.x)\n"
            "      acc += exp(xr[j] - top);\n"
            + _block_reduce("red[threadIdx.x] += red[threadIdx.x + k]")
            + "    const T total = red[0];\n    __syncthreads();\n"
            "    for (long long j = threadIdx.x; j < h; j += blockDim.x)\n"
            f"      yr[j] = {out};\n"
            "  }\n}\n"
        )

    def source(self, v: Variant | None = None) -> str:
        return DEVICE_PRELUDE + "\n" + self.function(v)

    def launch(self, rows: int) -> tuple[int, int]:
        return min(max(rows, 1), MAX_GRID), ROW_BLOCK
