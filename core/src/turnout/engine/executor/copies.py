"""Copy insertion: explicit transfer steps where a value crosses devices.

After partitioning every value has a home device (its producer's, or the host for graph inputs,
initializers and a kernel's declared host outputs). A consumer on another device reads a copy:
one copy per (value, device), shared by all consumers there. Initializers needed on a device
are transferred once, when the plan is built. Graph outputs come back to the host unless the
caller keeps them on their device (IO binding). A copy of a value that already lives on the
target device (an IO-bound device input) passes it through untouched.

When the device's transfer is `batched` (contract 2), the values one step needs from one device
travel in one copy step: it allocates each destination (the device's allocator, or a host
array) and makes one `copy_tensors` call on the owning provider's stream. Copies to the host
on a provider with a stream are enqueued right after the step that made the values, and
an event recorded there is waited for just before the first host reader (`EventWait`), so the
device keeps working while the host runs other nodes. A value that another provider reads on
the same device, without a copy, passes an `EventWait` too when its maker has a stream that is
not the reader's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from turnout.engine.executor.plan import Step
from turnout.sdk.provider import (
    COMPLETE,
    CPU,
    Allocator,
    DataTransfer,
    Device,
    ExecutionProvider,
    Stream,
)

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


def _batched_copy(
    transfer: DataTransfer,
    allocator: Allocator | None,
    device: Device,
    stream: Stream | None,
    record: bool,
) -> Callable[..., tuple[Any, ...]]:
    """A copy step's function over a batch: each value moved into a buffer allocated for it
    (`allocator` for a device destination, a host array when `allocator` is None), all pairs
    in one `copy_tensors` call on `stream`; with `record`, an event recorded on the stream
    after them ends the tuple."""
    to_host = allocator is None

    def copy(*values: Any) -> tuple[Any, ...]:
        out = list(values)
        pairs = []
        for i, v in enumerate(values):
            on_device = transfer.is_device_value(v)
            if v is None or on_device != to_host:  # already where it is going
                continue
            if isinstance(v, np.generic):
                v = np.asarray(v)
            if to_host:
                if not hasattr(v, "shape"):  # a sequence or map held by the device
                    out[i] = transfer.to_host(v)
                    continue
                dst: Any = np.empty(tuple(v.shape), v.dtype)
            elif isinstance(v, np.ndarray):
                dst = allocator.empty(v.shape, v.dtype)  # type: ignore[union-attr]
            else:  # not a host tensor (another context's buffer, a sequence): one by one
                out[i] = transfer.to_device(v, device)
                continue
            pairs.append((v, dst))
            out[i] = dst
        if pairs:
            transfer.copy_tensors(pairs, stream)
        if record:
            out.append(stream.record() if pairs and stream is not None else COMPLETE)
        return tuple(out)

    return copy


def _sync(producer: Stream, consumer: Stream | None) -> Callable[[Any], tuple[Any]]:
    """An `EventWait` step between two providers on one device: an event recorded on the
    producer's stream, waited for on the consumer's (or on the host); the value passes."""

    def sync(value: Any) -> tuple[Any]:
        event = producer.record()
        if consumer is not None:
            consumer.wait_event(event)
        else:
            event.wait()
        return (value,)

    return sync


def _must_sync(maker: ExecutionProvider, reader: ExecutionProvider, where: Device | None) -> bool:
    """Whether `reader` waits for a value `maker` made on `where`: another provider's value on
    its device (not a host output), made on a stream that is not the reader's."""
    if maker is reader or maker.stream is None or maker.stream is reader.stream:
        return False
    return where == maker.device


def _host_wait(*values: Any) -> tuple[Any, ...]:
    """An `EventWait` step on the host: block on the event (last), pass the values through."""
    values[-1].wait()
    return values[:-1]


@dataclass
class _Batch:
    """Values copied from `src` to `dst` by one step (materialized once all are known)."""

    src: Device
    dst: Device
    owner: ExecutionProvider
    first: str  # the value that opened the batch: names its event before the batch is full
    values: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        first = f"{self.first}@{self.dst}"
        return first if len(self.values) == 1 else f"{first}+{len(self.values) - 1}"

    @property
    def waited(self) -> bool:
        """Whether readers wait for an event: copies to the host from a provider with a
        stream (a copy to the device is read on the same stream, after it in order)."""
        return self.owner.stream is not None and self.dst == CPU

    def pending(self, value: str) -> str:
        """The copy step's name for `value` before its event is waited for."""
        return f"{value}@{self.dst}~" if self.waited else ""

    @property
    def event(self) -> str:
        return f"{self.first}@{self.dst}#event"

    def step(self) -> Step:
        p = self.owner
        host = self.dst == CPU
        alloc = None if host else p.allocator
        fn = _batched_copy(p.data_transfer, alloc, self.dst, p.stream, self.waited)
        outs = tuple(self.pending(v) or f"{v}@{self.dst}" for v in self.values)
        if self.waited:
            outs += (self.event,)
        op = "MemcpyToHost" if host else "MemcpyFromHost"
        free = p.allocator.free if not host and p.allocator.pools else None
        return Step(self.name, op, p.name, fn, tuple(self.values), outs, free)


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
    # The plan in pieces: the next step joins the last one; a hoisted copy joins the piece
    # that ends with the step that made its value.
    slots: list[list[Step | _Batch]] = [[]]
    slot_of: dict[str, int] = {}  # value -> piece of the step that made it
    batch_of: dict[str, tuple[_Batch, str]] = {}  # a batched copy's name -> (batch, value)
    hoisted: dict[tuple[int, Device, Device], _Batch] = {}
    made_by: dict[str, ExecutionProvider] = {}  # value -> the provider whose step made it
    synced: dict[tuple[str, str], str] = {}  # (value, reading provider) -> the synced name

    def transfer(device: Device) -> DataTransfer | None:
        p = by_device.get(device)
        return p.data_transfer if p is not None else None

    def batchable(src: Device, dst: Device) -> ExecutionProvider | None:
        """The provider whose batched transfer makes this copy, or None (one value, legacy)."""
        if (src == CPU) == (dst == CPU):
            return None  # device to device goes through the host, one value at a time
        owner = by_device.get(dst if src == CPU else src)
        return owner if owner is not None and owner.data_transfer.batched else None

    def copy_of(value: str, dst: Device, consumer: str, batch: dict[Any, _Batch]) -> str:
        src = home.get(value, CPU)
        key = (value, dst)
        consumers.setdefault(key, []).append(consumer)
        if key in made:
            return made[key]
        name = f"{value}@{dst}"
        made[key] = name
        home[name] = dst
        owner = batchable(src, dst)
        if value in constants and src == CPU:
            dst_t = transfer(dst)
            assert dst_t is not None
            constants[name] = dst_t.to_device(constants[value], dst)
        elif owner is not None:
            hoist = owner.stream is not None and dst == CPU and value in slot_of
            bkey = (slot_of[value], src, dst) if hoist else (src, dst)
            table: dict[Any, _Batch] = hoisted if hoist else batch
            b = table.get(bkey)
            if b is None:
                b = table[bkey] = _Batch(src, dst, owner, value)
                slots[slot_of[value] if hoist else -1].append(b)
            b.values.append(value)
            batch_of[name] = (b, value)
            if not b.waited:
                made_by[name] = owner
        else:
            fn = _copy_fn(src, dst, transfer(src), transfer(dst))
            legacy = by_device[dst] if dst != CPU else by_device.get(src)
            op = "MemcpyToHost" if dst == CPU else "MemcpyFromHost"
            slots[-1].append(
                Step(name, op, legacy.name if legacy else HOST_PROVIDER, fn, (value,), (name,))
            )
        return name

    waited: set[str] = set()

    def wait_for(names: Sequence[str]) -> None:
        """An `EventWait` step before the reader of `names`, for those copies still pending."""
        by_batch: dict[int, list[str]] = {}
        for n in names:
            b, value = batch_of.get(n, (None, ""))
            if b is not None and n not in waited and b.pending(value):
                waited.add(n)
                by_batch.setdefault(id(b), []).append(n)
        for ns in by_batch.values():
            b = batch_of[ns[0]][0]
            ins = (*[b.pending(batch_of[n][1]) for n in ns], b.event)
            wait = f"{ns[0]}#wait"
            slots[-1].append(Step(wait, "EventWait", HOST_PROVIDER, _host_wait, ins, tuple(ns)))

    def sync_for(names: list[str], reader: ExecutionProvider) -> list[str]:
        """`names` as `reader` reads them: a device value another provider made on a stream
        other than the reader's passes an `EventWait` step first (once per reader)."""
        out = []
        for x in names:
            maker = made_by.get(x)
            if maker is None or not _must_sync(maker, reader, home.get(x)):
                out.append(x)
                continue
            key = (x, reader.name)
            if key not in synced:
                synced[key] = f"{x}#{reader.name}"
                owner = reader.name if reader.stream is not None else HOST_PROVIDER
                assert maker.stream is not None
                fn = _sync(maker.stream, reader.stream)
                slots[-1].append(Step(f"{x}#sync", "EventWait", owner, fn, (x,), (synced[key],)))
            out.append(synced[key])
        return out

    for st in steps:
        reader = providers[st.provider]
        device = reader.device
        io = host_io.get(st.name, HostIO())
        inputs = []
        batch: dict[Any, _Batch] = {}
        for i, x in enumerate(st.inputs):
            want = CPU if i in io.inputs else device
            if x and home.get(x, CPU) != want:
                x = copy_of(x, want, st.name, batch)
            inputs.append(x)
        wait_for(inputs)
        inputs = sync_for(inputs, reader)
        slots[-1].append(replace(st, inputs=tuple(inputs)))
        slots.append([])
        for j, y in enumerate(st.outputs):
            if y:
                home[y] = CPU if j in io.outputs else device
                slot_of[y] = len(slots) - 2
                made_by[y] = reader
    final = []
    batch = {}
    for y in outputs:
        if home.get(y, CPU) != CPU and y not in device_outputs:
            y = copy_of(y, CPU, "<graph output>", batch)
        final.append(y)
    wait_for(final)
    out = [s if isinstance(s, Step) else s.step() for slot in slots for s in slot]
    copies = [
        Copy(v, str(home.get(v, CPU)), str(d), tuple(consumers[(v, d)]), made[(v, d)] in constants)
        for (v, d) in made
    ]
    return out, constants, final, copies
