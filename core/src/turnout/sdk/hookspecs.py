"""Plugin hooks: the second file a provider author reads (after provider.py).

A plugin is a module named by an entry point in the `turnout` group:

    [project.entry-points.turnout]
    myaccel = "turnout_myaccel.plugin"

and that module defines functions marked with `turnout.hookimpl`. Every hook is called once per
process, when providers are first discovered; each returns a list (results are concatenated).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from turnout.sdk.provider import ProviderFactory

__all__ = ["hookimpl", "hookspec"]

hookspec = pluggy.HookspecMarker("turnout")
hookimpl = pluggy.HookimplMarker("turnout")


# --- discovery -------------------------------------------------------------------------------
@hookspec
def turnout_providers() -> list[ProviderFactory]:
    """Return the provider factories this plugin contributes.

    Called once when providers are first discovered. Each factory's `probe()` decides whether
    the provider is available here; a factory whose probe fails is listed with its reason.
    """


# --- graph optimization ------------------------------------------------------------------------
@hookspec
def turnout_graph_passes() -> list[Any]:
    """Return graph passes (name, level, function Graph -> Graph) to add to the optimizer.

    Called once when providers are discovered; passes run at their level in every session.
    """


# --- custom operators --------------------------------------------------------------------------
@hookspec
def turnout_custom_ops() -> list[Any]:
    """Return `turnout.sdk.custom_ops.CustomOpSet`s: operator domains beyond the ONNX standard,
    each with a `KernelRegistry` of numpy kernels and the ops' schemas
    (`turnout.graph.contrib.OpSpec`).

    Called once when providers are discovered. Models using the domains then load, type and
    shape inference know the ops, and the CPU provider runs them with these kernels.
    """
