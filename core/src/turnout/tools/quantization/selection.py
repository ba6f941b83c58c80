"""Which nodes a quantizer touches: the user's op types and node lists, checked against what the
quantizer supports, so a typo or an unsupported op is an error instead of a silent no-op."""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping
from typing import Any

import onnx

from turnout.graph import errors
from turnout.graph.errors import InvalidArgument

__all__ = ["NothingToQuantize", "check_extra_options", "nothing_done", "selected_nodes"]

_log = logging.getLogger("turnout.tools.quantization")


class NothingToQuantize(InvalidArgument):
    """No node of the model can be quantized with the given options. onnxruntime then writes
    the model unchanged, and so do the quantizers (they log `nothing_done`'s reasons); the
    class stays for code that catches it."""


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
    wanted = set(op_types or default_ops)  # None or [] mean the default set, as in ORT
    unsupported = sorted(wanted - set(supported_ops))
    if unsupported:  # onnxruntime leaves such ops float too
        _log.warning(
            "op_types_to_quantize: turnout.tools.quantization leaves %s float; it quantizes %s",
            unsupported,
            sorted(supported_ops),
        )
    names = {n.name for n in graph.node}
    include = set(nodes_to_quantize) if nodes_to_quantize else None  # [] means all, as in ORT
    exclude = set(nodes_to_exclude or ())
    for what, given in (("nodes_to_quantize", include or set()), ("nodes_to_exclude", exclude)):
        missing = sorted(given - names)
        if missing:  # onnxruntime ignores them; say so in the log
            _log.warning("%s names nodes the graph does not have (ignored): %s", what, missing)
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
    error. A key turnout does not read is logged and ignored, as onnxruntime ignores it."""
    options = dict(known)
    for key, value in (extra_options or {}).items():
        if fixed is not None and key in fixed:
            if value != fixed[key]:
                raise errors.NotImplemented(
                    f"extra_options[{key!r}]={value!r}: turnout.tools.quantization supports only "
                    f"{fixed[key]!r}"
                )
            continue
        if key not in known:  # onnxruntime ignores keys it does not read; so does turnout
            _log.warning("extra_options[%r] is not used by turnout.tools.quantization", key)
            continue
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
