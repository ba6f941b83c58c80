"""Which nodes a quantizer touches: the user's op types and node lists, checked against what the
quantizer supports, so a typo or an unsupported op is an error instead of a silent no-op."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

import onnx

from turnout.graph import errors
from turnout.graph.errors import InvalidArgument

__all__ = ["NothingToQuantize", "check_extra_options", "nothing_done", "selected_nodes"]


class NothingToQuantize(InvalidArgument):
    """No node of the model can be quantized with the given options: writing an unchanged
    copy would look like success, so the quantizer says why each candidate was left float."""


def selected_nodes(
    graph: onnx.GraphProto,
    op_types: Iterable[str] | None,
    default_ops: Collection[str],
    supported_ops: Collection[str],
    nodes_to_quantize: Iterable[str] | None,
    nodes_to_exclude: Iterable[str] | None,
) -> list[onnx.NodeProto]:
    """The nodes of `graph` whose op type is asked for (by default `default_ops`), restricted
    to `nodes_to_quantize` when given, without `nodes_to_exclude`."""
    wanted = set(default_ops if op_types is None else op_types)
    unsupported = sorted(wanted - set(supported_ops))
    if unsupported:
        raise errors.NotImplemented(
            f"op_types_to_quantize: turnout.tools.quantization cannot quantize {unsupported}; "
            f"it quantizes {sorted(supported_ops)}"
        )
    names = {n.name for n in graph.node}
    include = None if nodes_to_quantize is None else set(nodes_to_quantize)
    exclude = set(nodes_to_exclude or ())
    for what, given in (("nodes_to_quantize", include or set()), ("nodes_to_exclude", exclude)):
        missing = sorted(given - names)
        if missing:
            raise InvalidArgument(f"{what} names nodes the graph does not have: {missing}")
    return [
        n
        for n in graph.node
        if n.op_type in wanted
        and (include is None or n.name in include)
        and n.name not in exclude
        and n.domain in ("", "ai.onnx")
    ]


def check_extra_options(
    extra_options: Mapping[str, Any] | None,
    known: Mapping[str, Any],
    fixed: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """`extra_options` over the defaults in `known`. `fixed` holds onnxruntime options whose
    only supported value is turnout's behaviour: passing that value is accepted, another is an
    error; so is a key turnout does not know (onnxruntime would ignore a misspelt key)."""
    options = dict(known)
    for key, value in (extra_options or {}).items():
        if fixed is not None and key in fixed:
            if value != fixed[key]:
                raise errors.NotImplemented(
                    f"extra_options[{key!r}]={value!r}: turnout.tools.quantization supports only "
                    f"{fixed[key]!r}"
                )
            continue
        if key not in known:
            supported = sorted([*known, *(fixed or {})])
            raise errors.NotImplemented(
                f"extra_options[{key!r}] is not supported by turnout.tools.quantization; "
                f"supported keys: {supported}"
            )
        options[key] = value
    return options


def nothing_done(reasons: list[str], graph: onnx.GraphProto) -> NothingToQuantize:
    """The error for a model left unchanged: each candidate's reason, and a word on control
    flow when the model's weighted ops may sit inside If/Loop/Scan bodies."""
    detail = "\n".join(f"  - {r}" for r in reasons) or "  (no node of a quantizable op type)"
    bodies = sorted(
        {
            n.op_type
            for n in graph.node
            if any(a.type == onnx.AttributeProto.GRAPH for a in n.attribute)
        }
    )
    if bodies:
        detail += f"\n  nodes inside {'/'.join(bodies)} bodies are not quantized"
    return NothingToQuantize(f"no node of the model was quantized:\n{detail}")
