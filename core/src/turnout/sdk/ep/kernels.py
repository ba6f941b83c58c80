"""Kernels: the function a node runs, the context it is built with, and the table that finds it.

Kernels are declared, not discovered: `KernelTable.register(op_type, since=..., domain=...)`
decorates a *kernel factory*. At session creation the factory is called once per node with a
`KernelNode` (attributes decoded, schema defaults filled in, input/output types known where
inference found them) and returns the *kernel function*: `fn(*inputs) -> tuple(outputs)`.
Missing optional inputs arrive as `None`. Work that depends only on attributes belongs in the
factory, so the kernel function stays lean.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from turnout.graph.ir import KernelNode

if TYPE_CHECKING:
    from turnout.sdk.ep.memory import Allocator, DataTransfer, Stream

__all__ = [
    "KernelContext",
    "KernelDef",
    "KernelFactory",
    "KernelFn",
    "KernelNode",
    "KernelRegistry",
    "KernelTable",
    "SupportsFn",
]


KernelFn = Callable[..., Sequence[Any]]
"""A kernel function: positional input values in, a tuple with one value per node output out.

One per entry of `node.outputs`, exactly: a node may leave its trailing optional outputs out
(return fewer, `outs[: len(node.outputs)]`) and blank others to "" (that slot's value is
dropped; None will do). tests/core/test_optional_outputs.py holds every provider to it."""


@dataclass(frozen=True)
class KernelContext:
    """What a kernel may use besides its node, handed over instead of kept in globals: the
    session's provider (its name), its options as parsed, the thread count it was given (0:
    its default), its allocator and data transfer, a stream (None for providers without
    streams) and the logger to report through.

    A kernel asks for its output buffers with `allocate(shape, dtype)` rather than allocating
    them itself, so they come from the provider's allocator (a device pool) and go back to it
    when the plan says they are dead."""

    provider: str
    options: Mapping[str, Any]
    threads: int
    allocator: Allocator
    data_transfer: DataTransfer
    logger: logging.Logger
    stream: Stream | None = None

    def allocate(self, shape: Sequence[int], dtype: Any) -> Any:
        """A new, uninitialized buffer of `shape` and `dtype` from the provider's allocator."""
        return self.allocator.empty(tuple(shape), np.dtype(dtype))


KernelFactory = Callable[[KernelNode], KernelFn]
SupportsFn = Callable[[KernelNode], "str | None"]
AnyFactory = TypeVar("AnyFactory", bound=Callable[..., KernelFn])
"""A kernel factory: `factory(node)`, or `factory(node, runtime)` in a `runtime=True` table."""


@dataclass(frozen=True)
class KernelDef:
    """A declared kernel: which op, which opset range, which dtypes, and its factory.

    `dtypes` maps schema type-parameter names (like "T") to the allowed ONNX element types;
    `supports(node)` returns a reason string to decline a node (attribute or shape limits).
    `host_inputs`/`host_outputs` list input/output indices that stay in host memory even on a
    device provider (shape-like tensors), so copy insertion can honour them.
    """

    op_type: str
    domain: str
    since: int
    factory: KernelFactory
    until: int | None = None
    dtypes: Mapping[str, frozenset[int]] | None = None
    supports: SupportsFn | None = None
    host_inputs: tuple[int, ...] = ()
    host_outputs: tuple[int, ...] = ()


class KernelTable:
    """Op-by-op kernels of one provider, keyed by (domain, op type), sorted by since-version.

    The one registration type: a provider declares its table once at module level and
    decorates each kernel factory with `register`; its `ExecutionProvider` sets `kernels` to
    it. The base provider's `get_capability` matches nodes against it.

    A kernel that needs the session's runtime (a device context, a backend) to be built or
    to decide whether it applies lives in a table made with `runtime=True`: its factories
    are called as `factory(node, runtime)` and its `supports` as `supports(node, runtime)`,
    and each session uses `table.bind(runtime)`, a plain table over the same kernels."""

    def __init__(self, provider_name: str, *, runtime: bool = False) -> None:
        self.provider_name = provider_name
        self.runtime = runtime
        self._defs: dict[tuple[str, str], list[KernelDef]] = {}

    def bind(self, runtime: Any, provider_name: str | None = None) -> KernelTable:
        """This `runtime=True` table for one session: the same kernels, their factories and
        `supports` given `runtime` as their second argument."""
        if not self.runtime:
            raise TypeError(f"{self.provider_name}: bind() is for tables made with runtime=True")
        bound = KernelTable(provider_name or self.provider_name)
        for key, defs in self._defs.items():
            bound._defs[key] = [_bound(d, runtime) for d in defs]
        return bound

    def register(
        self,
        op_type: str,
        since: int = 1,
        *,
        domain: str = "",
        until: int | None = None,
        dtypes: Mapping[str, Iterable[int]] | None = None,
        supports: Callable[..., str | None] | None = None,
        host_inputs: tuple[int, ...] = (),
        host_outputs: tuple[int, ...] = (),
    ) -> Callable[[AnyFactory], AnyFactory]:
        """Decorator: register `factory` for `op_type` from opset `since` (to `until`)."""

        def deco(factory: AnyFactory) -> AnyFactory:
            d = KernelDef(
                op_type=op_type,
                domain=domain,
                since=since,
                factory=factory,
                until=until,
                dtypes={k: frozenset(v) for k, v in dtypes.items()} if dtypes else None,
                supports=supports,
                host_inputs=host_inputs,
                host_outputs=host_outputs,
            )
            defs = self._defs.setdefault((domain, op_type), [])
            if any(x.since == since for x in defs):
                raise ValueError(
                    f"{self.provider_name}: kernel {domain or 'ai.onnx'}::{op_type} "
                    f"since {since} registered twice"
                )
            defs.append(d)
            defs.sort(key=lambda x: x.since)
            return factory

        return deco

    def ops(self) -> list[tuple[str, str]]:
        """(domain, op_type) pairs that have at least one kernel."""
        return sorted(self._defs)

    def lookup(self, domain: str, op_type: str, since_version: int) -> KernelDef | None:
        """The kernel whose since is the highest not above the node's schema `since_version`
        (in a `runtime=True` table not bound yet, its factory still takes the runtime)."""
        best = None
        for d in self._defs.get((domain, op_type), ()):
            if d.since <= since_version and (d.until is None or since_version <= d.until):
                best = d
        return best

    def match(self, kn: KernelNode) -> tuple[KernelDef | None, str | None]:
        """(kernel, None) when a kernel runs this node, else (None, reason)."""
        if self.runtime:
            raise TypeError(f"{self.provider_name}: match nodes on the session's bind(runtime)")
        d = self.lookup(kn.domain, kn.op_type, kn.since_version)
        if d is None:
            if (kn.domain, kn.op_type) in self._defs:
                have = ", ".join(str(x.since) for x in self._defs[(kn.domain, kn.op_type)])
                return None, f"no kernel for opset version {kn.since_version} (have since {have})"
            return None, f"no kernel for {kn.domain or 'ai.onnx'}::{kn.op_type}"
        if d.dtypes:
            reason = _check_dtypes(kn, d.dtypes)
            if reason:
                return None, reason
        if d.supports is not None:
            reason = d.supports(kn)
            if reason:
                return None, reason
        return d, None


def _bound(d: KernelDef, runtime: Any) -> KernelDef:
    """`d` with `runtime` given to its factory and its `supports` as their second argument."""
    factory, supports = d.factory, d.supports

    def bound_factory(kn: KernelNode) -> KernelFn:
        return factory(kn, runtime)  # type: ignore[call-arg]

    def bound_supports(kn: KernelNode) -> str | None:
        return supports(kn, runtime)  # type: ignore[call-arg,misc]

    return replace(d, factory=bound_factory, supports=bound_supports if supports else None)


def _check_dtypes(kn: KernelNode, allowed: Mapping[str, frozenset[int]]) -> str | None:
    """Check the node's known input/output element types against the type parameters."""
    from turnout.graph.ir import schema_type_params

    params = schema_type_params(kn.domain, kn.op_type, kn.opset)
    infos = list(kn.inputs) + list(kn.outputs)
    for info, param in zip(infos, params[0] + params[1]):
        if info is None or param not in allowed or info.elem_type is None:
            continue
        if info.elem_type not in allowed[param]:
            from turnout.graph.dtypes import ELEM_TYPE_NAMES

            name = ELEM_TYPE_NAMES.get(info.elem_type, str(info.elem_type))
            return f"dtype {name} of {info.name!r} not supported for {param}"
    return None


# --------------------------------------------------------------------------------------------
# Capabilities and compilation


KernelRegistry = KernelTable
"""The table's name before contract 2's split (kept: third-party providers import it)."""
