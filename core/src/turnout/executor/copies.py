"""Copy insertion: explicit transfer steps where a value crosses devices.

After partitioning every value has a home device (its producer's, or the host for graph inputs,
initializers and a kernel's declared host outputs). A consumer on another device reads a copy:
one copy step per (value, device), shared by all consumers there. Initializers needed on a device
are transferred once, when the plan is built. Graph outputs come back to the host unless the
caller keeps them on their device (IO binding). A copy of a value that already lives on the
target device (an IO-bound device input) passes it through untouched.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..provider import CPU, DataTransfer, Device, ExecutionProvider
from .plan import Step

__all__ = ["Copy", "HostIO", "insert_copies"]

HOST_PROVIDER = "CPUExecutionProvider"


@dataclass(frozen=True)
class HostIO:
    """Input/output indices of a step that stay in host memory even on a device provider."""

    inputs: frozenset[int] = frozenset()
    outputs: frozenset[int] = frozenset()


@dataclass(frozen=True)
class Copy:
    """One inserted copy: `value` moved from `src` to `dst` for `consumers`. `once`: an
    initializer uploaded when the session is built, not a copy made on every run."""

    value: str
    src: str
    dst: str
    consumers: tuple[str, ...]
    once: bool = False


def _copy_fn(
    src: Device, dst: Device, src_t: DataTransfer | None, dst_t: DataTransfer | None
) -> Any:
    if dst == CPU:
        assert src_t is not None

        def to_host(v: Any) -> tuple[Any]:
            return (src_t.to_host(v) if src_t.is_device_value(v) else v,)

        return to_host
    assert dst_t is not None
    if src == CPU:

        def to_device(v: Any) -> tuple[Any]:
            return (v if dst_t.is_device_value(v) else dst_t.to_device(v, dst),)

        return to_device
    assert src_t is not None

    def across(v: Any) -> tuple[Any]:
        if dst_t.is_device_value(v):
            return (v,)
        return (dst_t.to_device(src_t.to_host(v), dst),)

    return across


def insert_copies(
    steps: Sequence[Step],
    providers: Mapping[str, ExecutionProvider],
    host_io: Mapping[str, HostIO],
    constants: dict[str, Any],
    host_values: Sequence[str],
    outputs: Sequence[str],
    device_outputs: frozenset[str] = frozenset(),
) -> tuple[list[Step], dict[str, Any], list[str], list[Copy]]:
    """Steps with copies, constants (plus device copies), output names to return, copies made."""
    by_device: dict[Device, ExecutionProvider] = {}
    for p in providers.values():
        by_device.setdefault(p.device, p)
    home: dict[str, Device] = {name: CPU for name in host_values}
    home.update({name: CPU for name in constants})
    constants = dict(constants)
    made: dict[tuple[str, Device], str] = {}
    consumers: dict[tuple[str, Device], list[str]] = {}
    out: list[Step] = []

    def transfer(device: Device) -> DataTransfer | None:
        p = by_device.get(device)
        return p.data_transfer if p is not None else None

    def copy_of(value: str, dst: Device, consumer: str) -> str:
        src = home.get(value, CPU)
        key = (value, dst)
        consumers.setdefault(key, []).append(consumer)
        if key in made:
            return made[key]
        name = f"{value}@{dst}"
        made[key] = name
        if value in constants and src == CPU:
            dst_t = transfer(dst)
            assert dst_t is not None
            constants[name] = dst_t.to_device(constants[value], dst)
        else:
            fn = _copy_fn(src, dst, transfer(src), transfer(dst))
            owner = by_device[dst] if dst != CPU else by_device.get(src)
            op = "MemcpyToHost" if dst == CPU else "MemcpyFromHost"
            out.append(
                Step(name, op, owner.name if owner else HOST_PROVIDER, fn, (value,), (name,))
            )
        home[name] = dst
        return name

    for st in steps:
        device = providers[st.provider].device
        io = host_io.get(st.name, HostIO())
        inputs = []
        for i, x in enumerate(st.inputs):
            want = CPU if i in io.inputs else device
            if x and home.get(x, CPU) != want:
                x = copy_of(x, want, st.name)
            inputs.append(x)
        out.append(Step(st.name, st.op_type, st.provider, st.fn, tuple(inputs), st.outputs))
        for j, y in enumerate(st.outputs):
            if y:
                home[y] = CPU if j in io.outputs else device
    final = []
    for y in outputs:
        if home.get(y, CPU) != CPU and y not in device_outputs:
            y = copy_of(y, CPU, "<graph output>")
        final.append(y)
    copies = [
        Copy(v, str(home.get(v, CPU)), str(d), tuple(consumers[(v, d)]), made[(v, d)] in constants)
        for (v, d) in made
    ]
    return out, constants, final, copies
