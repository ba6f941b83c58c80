"""Shape arithmetic run once per input shape: chains of Shape/Size and small integer ops become
one memoized step of the generated run.

Exporters write dynamic dimensions as node chains that run at every inference although their
values change only with the shapes of the tensors they look at: PyTorch's `squeeze(dim)` as
Shape -> Gather -> Equal -> If, a view as Shape -> Gather -> Unsqueeze -> Concat -> Reshape. Each
node costs a kernel call (0.5-1 us); a small model runs dozens of them.

A chain starts at a Shape or Size node and takes every later node whose inputs are all shape
values or initializers (`ARITHMETIC` ops only, on a host provider, none producing a graph
output). It runs at the place of its first node. Its key is the shapes of the tensors its Shape
and Size nodes read, and the bytes of the shape values it reads from an earlier chain; a new
key runs the chain's own kernels in order and keeps what they produce, read-only as
initializers are (the session copies a read-only value before handing it out). The profiled
run times every node as before.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from turnout.engine.executor.step import Step

__all__ = ["CHAIN_OP", "memoize_shape_chains"]

CHAIN_OP = "ShapeChain"  # op_type of the step that runs a chain
SOURCES = frozenset({"Shape", "Size"})
# deterministic ops whose outputs, on shape values, stay as small as their inputs
ARITHMETIC = frozenset(
    {
        "Abs", "Add", "And", "Cast", "Concat", "Div", "Equal", "FusedGroup", "Gather",
        "Greater", "GreaterOrEqual", "Identity", "Less", "LessOrEqual", "Max", "Min", "Mod",
        "Mul", "Neg", "Not", "Or", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceSum",
        "Reshape", "Slice", "Squeeze", "Sub", "Unsqueeze", "Where", "Xor",
    }
)  # fmt: skip
MAX_KEYS = 64  # distinct input shapes remembered per chain; past that the memo starts again

Explain = Callable[[int, Exception], Exception]


@dataclass
class _Chain:
    position: int  # index of its first node: where it runs
    members: list[int] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)  # tensors whose shapes it reads
    foreign: list[str] = field(default_factory=list)  # shape values of earlier chains it reads


def memoize_shape_chains(
    steps: Sequence[Step],
    constants: Mapping[str, Any],
    outputs: Sequence[str],
    host_providers: frozenset[str],
    explain: Explain,
) -> list[Step]:
    """`steps` with each chain of two or more shape nodes replaced by one memoized step.
    `explain(i, e)`: the error naming step `i` (an index into `steps`) for its failure `e`."""
    chains = _find_chains(steps, constants, frozenset(outputs), host_providers)
    if not chains:
        return list(steps)
    at = {c.position: c for c in chains}
    merged = {i for c in chains for i in c.members}
    readers: dict[str, set[int]] = {}
    for i, st in enumerate(steps):
        for x in st.inputs:
            readers.setdefault(x, set()).add(i)
    out: list[Step] = []
    for i, st in enumerate(steps):
        chain = at.get(i)
        if chain is not None:
            out.append(_chain_step(steps, chain, constants, readers, explain))
        elif i not in merged:
            out.append(st)
    return out


def _find_chains(
    steps: Sequence[Step],
    constants: Mapping[str, Any],
    outputs: frozenset[str],
    host_providers: frozenset[str],
) -> list[_Chain]:
    made_at = {y: i for i, st in enumerate(steps) for y in st.outputs if y}
    owner: dict[str, _Chain] = {}  # shape value -> the chain that makes it
    chains: list[_Chain] = []
    current: _Chain | None = None
    for i, st in enumerate(steps):
        if st.provider not in host_providers or any(y in outputs for y in st.outputs):
            continue
        ins = [x for x in st.inputs if x]
        if (
            current is not None
            and (st.op_type in ARITHMETIC or st.op_type in SOURCES)
            and any(x in owner for x in ins)
            and all(x in owner or x in constants for x in ins)
        ):  # arithmetic on shape values (the Size of a Shape too)
            for x in ins:
                if x in owner and owner[x] is not current and x not in current.foreign:
                    current.foreign.append(x)
        elif st.op_type in SOURCES and len(ins) == 1:
            src = ins[0]
            if current is None or made_at.get(src, -1) >= current.position:
                current = _Chain(i)
                chains.append(current)
            if src not in current.sources:
                current.sources.append(src)
        else:
            continue
        current.members.append(i)
        for y in st.outputs:
            if y:
                owner[y] = current
    return [c for c in chains if len(c.members) > 1]


def _chain_step(
    steps: Sequence[Step],
    chain: _Chain,
    constants: Mapping[str, Any],
    readers: dict[str, set[int]],
    explain: Explain,
) -> Step:
    """One step computing `chain`'s values read outside it, memoized on its key."""
    members = set(chain.members)
    produced = [y for i in chain.members for y in steps[i].outputs if y]
    wanted = tuple(y for y in produced if readers.get(y, set()) - members)
    names = (*chain.sources, *chain.foreign)
    n_sources = len(chain.sources)
    body = [(i, steps[i]) for i in chain.members]
    fixed = {x: constants[x] for _, st in body for x in st.inputs if x in constants}
    memo: dict[Any, tuple[Any, ...]] = {}

    def compute(args: tuple[Any, ...]) -> tuple[Any, ...]:
        env = {**fixed, **dict(zip(names, args))}
        for i, st in body:
            ins = [env[x] if x else None for x in st.inputs]
            try:
                outs = st.fn(*ins)
            except Exception as e:
                raise explain(i, e) from e
            env.update((y, v) for y, v in zip(st.outputs, outs) if y)
        return tuple(env[y] for y in wanted)

    def key_of(args: tuple[Any, ...]) -> Any:
        if n_sources == len(args) == 1:
            return args[0].shape  # the common chain: one tensor's shape
        return (
            tuple([a.shape for a in args[:n_sources]]),
            tuple([(f.dtype.str, f.shape, f.tobytes()) for f in args[n_sources:]]),
        )

    def run(*args: Any) -> tuple[Any, ...]:
        try:
            key = key_of(args)
        except AttributeError:  # not arrays: nothing to key on
            return compute(args)
        found = memo.get(key)
        if found is not None:
            return found
        values = compute(args)
        if all(type(v) is np.ndarray for v in values):
            for v in values:
                v.flags.writeable = False
            if len(memo) >= MAX_KEYS:
                memo.clear()
            memo[key] = values
        return values

    first = steps[chain.position]
    return Step(
        name=f"{first.name} (shape chain of {len(body)} nodes)",
        op_type=CHAIN_OP,
        provider=first.provider,
        fn=run,
        inputs=names,
        outputs=wanted,
    )
