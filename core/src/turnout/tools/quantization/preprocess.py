"""Preparing a float model for quantization, without onnxruntime.

onnxruntime advises running its `quant_pre_process` first; this is turnout's: the graph
optimizer's BASIC level (standard ops only: BatchNormalization folded into Conv, constants and
shapes folded, MatMul + Add as Gemm, dead nodes removed), then ONNX shape inference, so that the
quantizers see one Conv where there were two ops and know the element type of every tensor.
"""

from __future__ import annotations

import onnx
from onnx import shape_inference

from turnout.tools.quantization.graph import ModelInput, load_model, save_model

__all__ = ["quant_pre_process"]


def quant_pre_process(
    input_model: ModelInput,
    output_model_path: ModelInput | None = None,
    *,
    skip_optimization: bool = False,
    save_as_external_data: bool = False,
) -> onnx.ModelProto:
    """Optimize `input_model` (a path or ModelProto) at turnout's BASIC level and add inferred
    shapes; the result is written to `output_model_path` when given, and returned.
    Folding BatchNormalization into Conv before quantizing saves a Q/DQ pair per layer
    and quantizes the folded weights, as a runtime would run them."""
    from turnout.engine.evaluate import optimize
    from turnout.optimizer import Level

    model = load_model(input_model)
    if not skip_optimization:
        model, _ = optimize(model, Level.BASIC)
    model = shape_inference.infer_shapes(model)
    onnx.checker.check_model(model)
    save_model(model, output_model_path, save_as_external_data)
    return model
