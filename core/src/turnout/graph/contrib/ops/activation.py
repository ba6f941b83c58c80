"""Element-wise contrib ops that onnxruntime's transformer optimizer fuses: the Gelu family and
BiasAdd. Each output has the type and shape of the first input."""

from __future__ import annotations

from turnout.graph.contrib.inference import same_as
from turnout.graph.contrib.spec import Arg, Attr, OpSpec, define

_FLOATS = ("float16", "float", "double", "bfloat16")

define(OpSpec("Gelu", (Arg("X", "T"),), (Arg("Y", "T"),), {"T": _FLOATS}, same_as(0)))
define(
    OpSpec(
        "BiasGelu",
        (Arg("A", "T"), Arg("B", "T")),
        (Arg("C", "T"),),
        {"T": _FLOATS},
        same_as(0),
    )
)
define(
    OpSpec(
        "FastGelu",
        (Arg("X", "T"), Arg("bias", "T", optional=True)),
        (Arg("Y", "T"),),
        {"T": _FLOATS},
        same_as(0),
    )
)
define(
    OpSpec(
        "QuickGelu",
        (Arg("X", "T"),),
        (Arg("Y", "T"),),
        {"T": _FLOATS},
        same_as(0),
        attrs=(Attr("alpha", "float", 1.702),),
    )
)
define(
    OpSpec(
        "BiasAdd",
        (Arg("X", "T"), Arg("bias", "T"), Arg("skip", "T")),
        (Arg("Y", "T"),),
        {"T": ("float16", "float")},
        same_as(0),
    )
)
