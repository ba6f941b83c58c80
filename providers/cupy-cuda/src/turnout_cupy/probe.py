"""What the CUDA stack on this machine can do, and, when it cannot run, exactly why.

`gather()` reads the facts (can CuPy be imported, can the driver library be loaded, the driver's
and the runtime's CUDA versions, the device count or the error asking for it, each device's
properties); `decide(facts)` turns them into an `Availability` with one of these reasons:

- CuPy is not installed, or fails to import;
- no NVIDIA driver (libcuda cannot be loaded; CuPy's runtime then reports driver version 0 and
  `cudaErrorInsufficientDriver`);
- a driver too old for CuPy's CUDA runtime (`cudaErrorInsufficientDriver` with a driver present);
- no device (`cudaErrorNoDevice`, or a count of 0, e.g. `CUDA_VISIBLE_DEVICES=""`).

The two steps are apart so that tests can feed `decide` the facts of machines they are not.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass, field
from typing import Any

from turnout.sdk.provider import Availability, Device, DeviceEntry

__all__ = [
    "CUDA_ERROR_INSUFFICIENT_DRIVER",
    "CUDA_ERROR_NO_DEVICE",
    "NVIDIA_VENDOR_ID",
    "CudaFacts",
    "DeviceFacts",
    "cuda_version",
    "decide",
    "gather",
]

NVIDIA_VENDOR_ID = 0x10DE
CUDA_ERROR_INSUFFICIENT_DRIVER = 35
CUDA_ERROR_NO_DEVICE = 100
_LIBCUDA = ("libcuda.so.1", "libcuda.so", "nvcuda.dll")


@dataclass(frozen=True)
class DeviceFacts:
    """One visible CUDA device as the runtime describes it."""

    name: str
    compute_capability: tuple[int, int]
    total_memory: int
    pci_bus_id: str = ""


@dataclass(frozen=True)
class CudaFacts:
    """Everything the probe decides from; `import_error` set means nothing else was read."""

    import_error: str | None = None
    cupy_installed: bool = True
    """False when the import failed because there is no `cupy` module at all."""
    cupy_version: str = ""
    libcuda_error: str | None = None
    """Why the driver library could not be loaded (None: it loaded)."""
    runtime_version: int = 0
    driver_version: int = 0
    device_count: int = 0
    count_error: tuple[int, str] | None = None
    """(cudaError_t, message) raised by cudaGetDeviceCount, if it raised."""
    devices: tuple[DeviceFacts, ...] = field(default_factory=tuple)


def cuda_version(v: int) -> str:
    """13020 -> "13.2" (CUDA's encoding: 1000 * major + 10 * minor)."""
    return f"{v // 1000}.{(v % 1000) // 10}"


def _load_libcuda() -> str | None:
    errors = []
    for name in _LIBCUDA:
        try:
            ctypes.CDLL(name)
            return None
        except OSError as e:
            errors.append(str(e))
    return "; ".join(errors)


def gather() -> CudaFacts:
    """Read the facts from this machine (never raises)."""
    try:
        import cupy
    except Exception as e:  # ImportError, or CuPy's own failure to find its CUDA libraries
        missing = isinstance(e, ModuleNotFoundError) and e.name == "cupy"
        return CudaFacts(import_error=f"{type(e).__name__}: {e}", cupy_installed=not missing)
    rt = cupy.cuda.runtime
    facts: dict[str, Any] = {
        "cupy_version": str(cupy.__version__),
        "libcuda_error": _load_libcuda(),
    }
    try:
        facts["runtime_version"] = int(rt.runtimeGetVersion())
        facts["driver_version"] = int(rt.driverGetVersion())
    except Exception as e:
        facts["count_error"] = (int(getattr(e, "status", -1)), str(e))
        return CudaFacts(**facts)
    try:
        count = int(rt.getDeviceCount())
    except Exception as e:  # cupy_backends...CUDARuntimeError carries the cudaError_t
        facts["count_error"] = (int(getattr(e, "status", -1)), str(e))
        return CudaFacts(**facts)
    devices = []
    for i in range(count):
        p = rt.getDeviceProperties(i)
        name = p["name"]
        devices.append(
            DeviceFacts(
                name=name.decode() if isinstance(name, bytes) else str(name),
                compute_capability=(int(p["major"]), int(p["minor"])),
                total_memory=int(p["totalGlobalMem"]),
                pci_bus_id=f"{p.get('pciDomainID', 0):04x}:{p.get('pciBusID', 0):02x}:"
                f"{p.get('pciDeviceID', 0):02x}",
            )
        )
    return CudaFacts(**facts, device_count=count, devices=tuple(devices))


def decide(f: CudaFacts, provider_version: str) -> Availability:
    """The provider's availability on a machine with facts `f`."""
    if f.import_error is not None:
        if not f.cupy_installed:
            why = "CuPy is not installed (pip install 'turnout-cupy[cuda13]' or [cuda12])"
        else:
            why = f"CuPy cannot be imported: {f.import_error}"
        return Availability(False, reason=why)
    runtime = f"CuPy {f.cupy_version} with the CUDA {cuda_version(f.runtime_version)} runtime"
    if f.libcuda_error is not None or f.driver_version == 0:
        detail = f" ({f.count_error[1]})" if f.count_error else ""
        return Availability(
            False,
            reason=f"no NVIDIA driver: libcuda cannot be loaded, so {runtime} finds no GPU{detail}",
        )
    if f.count_error is not None:
        status, message = f.count_error
        if status == CUDA_ERROR_INSUFFICIENT_DRIVER or f.driver_version < f.runtime_version:
            return Availability(
                False,
                reason=f"the NVIDIA driver supports CUDA up to {cuda_version(f.driver_version)}, "
                f"older than {runtime} ({message}): update the driver, or install the CuPy "
                f"wheel for CUDA {f.driver_version // 1000} (cupy-cuda{f.driver_version // 1000}x)",
            )
        if status == CUDA_ERROR_NO_DEVICE:
            return Availability(False, reason=_no_device(f, message))
        return Availability(False, reason=f"CUDA error asking for devices: {message}")
    if f.device_count == 0:
        return Availability(False, reason=_no_device(f, "device count 0"))
    entries = tuple(
        DeviceEntry(
            Device("cuda", i),
            {
                "name": d.name,
                "compute_capability": f"{d.compute_capability[0]}.{d.compute_capability[1]}",
                "global_mem_bytes": str(d.total_memory),
                "pci_bus_id": d.pci_bus_id,
                "driver_cuda_version": cuda_version(f.driver_version),
                "runtime_cuda_version": cuda_version(f.runtime_version),
            },
            {"device_id": i},
            hardware_type="gpu",
            vendor="NVIDIA",
            vendor_id=NVIDIA_VENDOR_ID,
        )
        for i, d in enumerate(f.devices)
    )
    return Availability(
        True, entries, version=f"{provider_version} (CuPy {f.cupy_version}, {runtime})"
    )


def _no_device(f: CudaFacts, message: str) -> str:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    hint = f"; CUDA_VISIBLE_DEVICES={visible!r}" if visible is not None else ""
    return (
        f"no CUDA device: the NVIDIA driver (CUDA {cuda_version(f.driver_version)}) "
        f"is loaded but reports none ({message}){hint}"
    )
