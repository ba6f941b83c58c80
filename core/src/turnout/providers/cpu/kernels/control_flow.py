"""Control flow: If, Loop, Scan and SequenceMap, running their bodies as nested plans.

The body graphs are partitioned and planned by the session like any graph (so their nodes can run
on any provider); these kernels only drive them. Values the bodies read from enclosing scopes
arrive as the node's trailing implicit inputs, and go on to the body positionally: a body is
bound once to the node's implicit inputs (`_body`), so an iteration (or an If) calls the body's
plan directly, with no dict of outer values per call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from turnout.graph.errors import InvalidArgument
from turnout.providers.cpu.registry import cpu_kernel
from turnout.sdk.provider import KernelFn, KernelNode

__all__: list[str] = []


Body = Callable[..., Sequence[Any]]


def _body(node: KernelNode, attr: str) -> Body:
    """The graph in attribute `attr` as `f(*inputs, *implicit_values)`, the implicit values in
    the order of the node's implicit inputs (how the plan passes them to this kernel)."""
    runner = node.subgraph(attr)
    implicit = node.node.implicit_inputs
    bind = getattr(runner, "bind", None)
    if bind is not None:
        bound: Body = bind(implicit)
        return bound
    n_outer = len(implicit)

    def call(*args: Any) -> Sequence[Any]:  # a runner without `bind`: its dict form
        split = len(args) - n_outer
        return runner(list(args[:split]), dict(zip(implicit, args[split:])))

    return call


@cpu_kernel("If", since=1)
def if_kernel(node: KernelNode) -> KernelFn:
    then_run = _body(node, "then_branch")
    else_run = _body(node, "else_branch")
    n_out = len(node.node.outputs)

    def run(cond: Any, *rest: Any) -> Sequence[Any]:
        if type(cond) is np.ndarray and cond.size == 1:
            take_then = cond.item()
        elif cond is None or np.size(cond) != 1:
            raise InvalidArgument(f"{node.name}: If condition must hold exactly one element")
        else:
            take_then = bool(np.asarray(cond).reshape(()))
        outs = then_run(*rest) if take_then else else_run(*rest)
        if len(outs) != n_out:
            raise InvalidArgument(
                f"{node.name}: branch produced {len(outs)} outputs, node declares {n_out}"
            )
        return outs

    return run


def _stack(items: list[Any], info: Any) -> np.ndarray:
    if items:
        return np.stack([np.asarray(x) for x in items])
    dtype = info.dtype if info is not None and info.dtype is not None else np.float32
    return np.empty((0,), dtype=dtype)


@cpu_kernel("Loop", since=1)
def loop_kernel(node: KernelNode) -> KernelFn:
    body = _body(node, "body")
    n_explicit = len(node.node.inputs)
    n_carried = n_explicit - 2
    out_infos = node.outputs

    def run(*args: Any) -> list[Any]:
        trip, cond = args[0], args[1]
        carried = list(args[2:n_explicit])
        outer = args[n_explicit:]
        max_trip = None if trip is None else int(np.asarray(trip).reshape(()))
        keep_going = True if cond is None else bool(np.asarray(cond).reshape(()))
        scans: list[list[Any]] | None = None
        i = 0
        while keep_going and (max_trip is None or i < max_trip):
            outs = body(np.array(i, dtype=np.int64), np.array(keep_going), *carried, *outer)
            keep_going = (
                True if cond is None and outs[0] is None else bool(np.asarray(outs[0]).reshape(()))
            )
            carried = list(outs[1 : 1 + n_carried])
            if scans is None:
                scans = [[] for _ in outs[1 + n_carried :]]
            for acc, v in zip(scans, outs[1 + n_carried :]):
                acc.append(v)
            i += 1
        n_scan = len(node.node.outputs) - n_carried
        if scans is None:
            scans = [[] for _ in range(n_scan)]
        stacked = [_stack(acc, out_infos[n_carried + k]) for k, acc in enumerate(scans)]
        return [*carried, *stacked]

    return run


@cpu_kernel("Scan", since=9)
def scan_kernel(node: KernelNode) -> KernelFn:
    body = _body(node, "body")
    n_scan_in = int(node.attr("num_scan_inputs"))
    n_explicit = len(node.node.inputs)
    n_state = n_explicit - n_scan_in
    n_scan_out = len(node.node.outputs) - n_state
    in_axes = node.attr("scan_input_axes") or [0] * n_scan_in
    in_dirs = node.attr("scan_input_directions") or [0] * n_scan_in
    out_axes = node.attr("scan_output_axes") or [0] * n_scan_out
    out_dirs = node.attr("scan_output_directions") or [0] * n_scan_out

    def run(*args: Any) -> list[Any]:
        state = list(args[:n_state])
        scans_in = [np.moveaxis(x, ax, 0) for x, ax in zip(args[n_state:n_explicit], in_axes)]
        outer = args[n_explicit:]
        lengths = {x.shape[0] for x in scans_in}
        if len(lengths) > 1:
            raise InvalidArgument(
                f"{node.name}: scan inputs differ in length along the scan axis: {sorted(lengths)}"
            )
        steps = lengths.pop() if lengths else 0
        acc: list[list[Any]] = [[] for _ in range(n_scan_out)]
        for t in range(steps):
            # a slice's element must stay an array (x[t] of a 1-D x is a numpy scalar)
            xs = [np.asarray(x[steps - 1 - t] if d else x[t]) for x, d in zip(scans_in, in_dirs)]
            outs = body(*state, *xs, *outer)
            state = list(outs[:n_state])
            for a, v in zip(acc, outs[n_state:]):
                a.append(v)
        results = []
        for k, a in enumerate(acc):
            if out_dirs[k]:
                a = a[::-1]
            stacked = _stack(a, node.outputs[n_state + k])
            ax = out_axes[k]
            results.append(np.moveaxis(stacked, 0, ax if ax >= 0 else ax + stacked.ndim))
        return [*state, *results]

    return run


@cpu_kernel("Scan", since=8)
def scan8_kernel(node: KernelNode) -> KernelFn:
    """Opset 8 Scan: a leading batch axis, optional sequence_lens, scan axis 1."""
    body = _body(node, "body")
    n_scan_in = int(node.attr("num_scan_inputs"))
    n_explicit = len(node.node.inputs)
    n_state = n_explicit - 1 - n_scan_in
    dirs = node.attr("directions") or [0] * n_scan_in

    def run(*args: Any) -> list[Any]:
        seq_lens = args[0]
        states = args[1 : 1 + n_state]
        scans = args[1 + n_state : n_explicit]
        outer = args[n_explicit:]
        batch = (states[0] if states else scans[0]).shape[0]
        per_batch: list[list[Any]] = []
        for b in range(batch):
            state = [s[b] for s in states]
            xs_all = [x[b] for x in scans]
            steps = xs_all[0].shape[0] if xs_all else 0
            if seq_lens is not None:
                steps = int(seq_lens[b])
            acc: list[list[Any]] = []
            for t in range(steps):
                xs = [np.asarray(x[steps - 1 - t] if d else x[t]) for x, d in zip(xs_all, dirs)]
                outs = body(*state, *xs, *outer)
                state = list(outs[:n_state])
                if not acc:
                    acc = [[] for _ in outs[n_state:]]
                for a, v in zip(acc, outs[n_state:]):
                    a.append(v)
            per_batch.append([*state, *[np.stack(a) for a in acc]])
        return [np.stack([pb[k] for pb in per_batch]) for k in range(len(node.node.outputs))]

    return run


@cpu_kernel("SequenceMap", since=17)
def sequence_map_kernel(node: KernelNode) -> KernelFn:
    body = _body(node, "body")
    n_explicit = len(node.node.inputs)
    n_out = len(node.node.outputs)

    def run(*args: Any) -> list[Any]:
        explicit = args[:n_explicit]
        outer = args[n_explicit:]
        length = len(explicit[0])
        for x in explicit[1:]:
            if isinstance(x, list) and len(x) != length:
                raise InvalidArgument(f"{node.name}: input sequences differ in length")
        results: list[list[Any]] = [[] for _ in range(n_out)]
        for i in range(length):
            ins = [x[i] if isinstance(x, list) else x for x in explicit]
            for acc, v in zip(results, body(*ins, *outer)):
                acc.append(v)
        return results

    return run
