"""Contrib op schemas: what an op takes and gives, declared once per op, and registered with
onnx so that its checker and shape inference know the op."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import onnx
from onnx import helper

from turnout.graph.contrib.domains import DOMAIN, OPSET
from turnout.graph.contrib.inference import InferFn, onnx_inference

__all__ = ["DOMAIN", "OPSET", "Arg", "Attr", "OpSpec", "define", "spec_of", "specs"]

_Schema = onnx.defs.OpSchema
_ATTR_TYPES = {
    "int": _Schema.AttrType.INT,
    "float": _Schema.AttrType.FLOAT,
    "string": _Schema.AttrType.STRING,
    "ints": _Schema.AttrType.INTS,
    "floats": _Schema.AttrType.FLOATS,
    "strings": _Schema.AttrType.STRINGS,
}


@dataclass(frozen=True)
class Arg:
    """A formal input or output. `type` names a type parameter of the op ("T") or is a type
    ("tensor(int64)"); a variadic one that is not `homogeneous` may bind it to a different
    type at each position (QLinearConcat's tensors and scales)."""

    name: str
    type: str
    optional: bool = False
    variadic: bool = False
    homogeneous: bool = True


@dataclass(frozen=True)
class Attr:
    """An attribute: its kind (int, float, string, ints, floats, strings) and default (None:
    no default; the op's kernel decides, as onnxruntime's does)."""

    name: str
    kind: str
    default: Any = None
    required: bool = False


@dataclass(frozen=True)
class OpSpec:
    """One op's schema: formal inputs and outputs, type constraints (parameter -> element
    types, like {"T": ("float", "float16")}, or whole types where a parameter is not a dense
    tensor, like "sparse_tensor(float)"), attributes, and the output inference."""

    name: str
    inputs: tuple[Arg, ...]
    outputs: tuple[Arg, ...]
    types: Mapping[str, tuple[str, ...]]
    infer: InferFn
    attrs: tuple[Attr, ...] = ()
    domain: str = DOMAIN
    since: int = 1
    doc: str = field(default="", compare=False)

    def defaults(self) -> dict[str, Any]:
        return {a.name: a.default for a in self.attrs if a.default is not None}

    def type_strs(self, param: str) -> tuple[str, ...]:
        """The types (onnx's strings: "tensor(float)") type parameter `param` allows."""
        return tuple(t if "(" in t else f"tensor({t})" for t in self.types[param])

    def allowed(self, type_str: str) -> tuple[str, ...]:
        """The element types a formal parameter of type `type_str` allows."""
        if type_str in self.types:
            return self.types[type_str]
        return (type_str.removeprefix("tensor(").removesuffix(")"),)


_SPECS: dict[tuple[str, str], OpSpec] = {}


def define(spec: OpSpec) -> OpSpec:
    """Make `spec` known to turnout and to onnx (its checker and shape inference).

    onnx.reference indexes every registered schema by op name alone when it is first imported,
    and refuses a name two domains share (Gelu, Attention, ...): it is imported here, before
    any contrib schema is registered, so its index holds onnx's own ops only.

    :raises ValueError: the op is defined twice.
    """
    import onnx.reference.op_run  # before the first schema: see above

    key = (spec.domain, spec.name)
    if key in _SPECS:
        raise ValueError(f"contrib op {spec.domain or 'ai.onnx'}::{spec.name} defined twice")
    _SPECS[key] = spec
    if not _onnx_has(spec):  # a schema someone else registered in this process stays
        onnx.defs.register_schema(_onnx_schema(spec))
    return spec


def spec_of(domain: str, op_type: str) -> OpSpec | None:
    return _SPECS.get(("" if domain == "ai.onnx" else domain, op_type))


def specs() -> list[OpSpec]:
    """Every defined contrib op, by domain and name."""
    return [_SPECS[k] for k in sorted(_SPECS)]


def _onnx_has(spec: OpSpec) -> bool:
    try:
        found = onnx.defs.get_schema(spec.name, spec.since, spec.domain)
    except onnx.defs.SchemaError:
        return False
    return found.since_version == spec.since


def _onnx_schema(spec: OpSpec) -> onnx.defs.OpSchema:
    def formal(a: Arg) -> onnx.defs.OpSchema.FormalParameter:
        option = _Schema.FormalParameterOption
        kind = option.Variadic if a.variadic else option.Optional if a.optional else None
        if kind is None:
            return _Schema.FormalParameter(a.name, a.type)
        return _Schema.FormalParameter(
            a.name, a.type, param_option=kind, is_homogeneous=a.homogeneous
        )

    def attribute(a: Attr) -> onnx.defs.OpSchema.Attribute:
        if a.default is not None:
            return _Schema.Attribute(a.name, helper.make_attribute(a.name, a.default), "")
        return _Schema.Attribute(a.name, _ATTR_TYPES[a.kind], "", required=a.required)

    schema = _Schema(
        spec.name,
        spec.domain,
        spec.since,
        spec.doc,
        inputs=[formal(a) for a in spec.inputs],
        outputs=[formal(a) for a in spec.outputs],
        type_constraints=[(param, list(spec.type_strs(param)), "") for param in spec.types],
        attributes=[attribute(a) for a in spec.attrs],
    )
    names = [a.name for a in spec.attrs]
    schema.set_type_and_shape_inference_function(onnx_inference(spec.infer, names, spec.defaults()))
    return schema
