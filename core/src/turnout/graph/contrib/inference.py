"""Output types and shapes of contrib ops, computed by turnout.

Schemas registered from Python have no inference function of their own, so each `OpSpec`
carries one written against the small types here (`NodeTypes` in, one `TensorType | None` per
output out); `onnx_inference` adapts it to onnx's `InferenceContext`, so `onnx.shape_inference`
(and with it every turnout stage that infers types) runs it like any built-in op's. An output
left `None` stays untyped: the model still runs, its shape known only at run time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from onnx import AttributeProto, TypeProto, helper

from turnout.graph.dims import Dim, declared_shape

if TYPE_CHECKING:
    from onnx.shape_inference import InferenceContext

__all__ = ["Dim", "InferFn", "NodeTypes", "TensorType", "onnx_inference", "same_as"]


@dataclass(frozen=True)
class TensorType:
    """A tensor's element type (onnx.TensorProto enum) and shape (None: rank unknown)."""

    elem_type: int
    shape: tuple[Dim, ...] | None = None

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    def dim(self, axis: int) -> Dim:
        """Size of `axis` (negative counts from the end); None when not known."""
        if self.shape is None or not -len(self.shape) <= axis < len(self.shape):
            return None
        return self.shape[axis]

    def to_proto(self) -> TypeProto:
        return helper.make_tensor_type_proto(self.elem_type, self.shape)

    @staticmethod
    def from_proto(tp: TypeProto | None) -> TensorType | None:
        """A tensor's type, or a sparse tensor's (its dense shape); None for other types."""
        kind = tp.WhichOneof("value") if tp is not None else None
        if tp is None or kind not in ("tensor_type", "sparse_tensor_type"):
            return None
        tt = tp.tensor_type if kind == "tensor_type" else tp.sparse_tensor_type
        if not tt.elem_type:
            return None
        return TensorType(tt.elem_type, declared_shape(tt))


@dataclass(frozen=True)
class NodeTypes:
    """What an inference function sees: the inputs' types (None: absent or untyped), the
    attributes with the schema's defaults filled in, and which outputs the node asks for."""

    inputs: tuple[TensorType | None, ...]
    attrs: Mapping[str, Any]
    outputs: tuple[bool, ...]

    def input(self, index: int) -> TensorType | None:
        return self.inputs[index] if index < len(self.inputs) else None

    def attr(self, name: str, default: Any = None) -> Any:
        value = self.attrs.get(name)
        return default if value is None else value


InferFn = Callable[[NodeTypes], Sequence[TensorType | None]]


def same_as(index: int) -> InferFn:
    """Inference of an op whose (first) output has the type and shape of input `index`."""

    def infer(types: NodeTypes) -> list[TensorType | None]:
        return [types.input(index)]

    return infer


def onnx_inference(
    fn: InferFn, attr_names: Sequence[str], defaults: Mapping[str, Any]
) -> Callable[[InferenceContext], None]:
    """An op's `fn` (`OpSpec.infer`) as an onnx inference function, reading the attributes
    `attr_names` over `defaults`. It never raises: a failure leaves the outputs untyped, and
    the kernel reports bad inputs when the node runs."""

    def infer(ctx: InferenceContext) -> None:
        try:
            attrs = dict(defaults)
            for name in attr_names:
                proto: AttributeProto | None = ctx.get_attribute(name)
                if proto is not None:
                    attrs[name] = _decoded(helper.get_attribute_value(proto))
            inputs = tuple(
                TensorType.from_proto(ctx.get_input_type(i)) if ctx.has_input(i) else None
                for i in range(ctx.get_num_inputs())
            )
            wanted = tuple(ctx.has_output(i) for i in range(ctx.get_num_outputs()))
            found = fn(NodeTypes(inputs, attrs, wanted))
        except Exception:  # inference is best effort; the kernel checks when it runs
            return
        for i, t in enumerate(found):
            if t is not None and i < len(wanted) and wanted[i]:
                ctx.set_output_type(i, t.to_proto())

    return infer


def _decoded(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, list):
        return [_decoded(v) for v in value]
    return value
