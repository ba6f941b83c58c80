"""onnxruntime's enums that turnout's core classes do not define themselves, same names and values.

The device enums describe where an `OrtDevice` or `OrtMemoryInfo` points. `OrtSparseFormat`,
what `SparseTensor.format` holds, is defined with it in `turnout.graph.sparse`.
"""

from __future__ import annotations

import enum

from turnout.graph.sparse import OrtSparseFormat

__all__ = ["OrtDeviceMemoryType", "OrtDeviceVendorId", "OrtMemoryInfoDeviceType", "OrtSparseFormat"]


class OrtMemoryInfoDeviceType(enum.IntEnum):
    CPU = 0
    GPU = 1
    FPGA = 2
    NPU = 3


class OrtDeviceMemoryType(enum.IntEnum):
    DEFAULT = 0
    HOST_ACCESSIBLE = 5


class OrtDeviceVendorId(enum.IntEnum):
    """PCI vendor ids, as onnxruntime names them."""

    NONE = 0
    AMD = 0x1002
    NVIDIA = 0x10DE
    ARM = 0x13B5
    MICROSOFT = 0x1414
    HUAWEI = 0x19E5
    QUALCOMM = 0x5143
    INTEL = 0x8086
