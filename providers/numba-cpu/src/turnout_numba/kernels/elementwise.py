"""Elementwise and broadcasting ops: each node is a generated group of one (see codegen).

The scalar semantics of every op live in `codegen.EW_OPS`; this module only registers them, so
that a node that is not fused still runs one compiled pass.
"""

from __future__ import annotations

from turnout.sdk.provider import KernelFn, KernelNode

from ..codegen import EW_OPS, compile_group, ew_supports
from ..registry import BuildContext, numba_kernel

__all__: list[str] = []


def _applies(kn: KernelNode) -> str | None:
    return ew_supports(kn.node, kn.since_version)


def _build(kn: KernelNode, ctx: BuildContext) -> KernelFn:
    gk = compile_group([kn.node], [kn.node.outputs[0]], kn.name, parallel=ctx.parallel)
    names = list(kn.node.inputs)
    if tuple(names) == gk.inputs:
        return gk.fn
    # the step passes one value per node input (None for absent ones, repeats for x*x); the
    # kernel takes each distinct input once
    pos = [names.index(x) for x in gk.inputs]
    fn = gk.fn
    return lambda *args: fn(*[args[i] for i in pos])


for _op in EW_OPS:
    numba_kernel(_op, since=1, applies=_applies)(_build)
# the optimizer's Gelu below opset 20 (Erf * 0.5 * x fused): the same op in turnout's domain
numba_kernel("Gelu", since=1, domain="ai.turnout", applies=_applies)(_build)
