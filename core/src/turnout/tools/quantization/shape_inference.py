"""`quant_pre_process` under onnxruntime's module name and signature: turnout's
pre-processing (its optimizer's BASIC level, then ONNX shape inference), which has no separate
symbolic shape pass; `skip_symbolic_shape` and the other onnxruntime arguments are accepted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnx

from turnout.tools.quantization.graph import ModelInput
from turnout.tools.quantization.preprocess import quant_pre_process as _pre_process

__all__ = ["quant_pre_process"]


def quant_pre_process(
    input_model: ModelInput | None = None,
    output_model_path: str | Path | None = None,
    skip_optimization: bool = False,
    skip_onnx_shape: bool = False,
    skip_symbolic_shape: bool = False,
    auto_merge: bool = False,
    int_max: int = 2**31 - 1,
    guess_output_rank: bool = False,
    verbose: int = 0,
    save_as_external_data: bool = False,
    all_tensors_to_one_file: bool = False,
    external_data_location: str | None = None,
    external_data_size_threshold: int = 1024,
    **deprecated_kwargs: Any,
) -> onnx.ModelProto:
    """Optimize `input_model` for quantization and write it to `output_model_path`; the model
    is also returned (onnxruntime's returns None). `input_model_path=` (onnxruntime's old
    name) is accepted."""
    if input_model is None:
        input_model = deprecated_kwargs.pop("input_model_path", None)
    if input_model is None:
        raise ValueError("quant_pre_process needs input_model")
    return _pre_process(
        input_model,
        output_model_path,
        skip_optimization=skip_optimization,
        save_as_external_data=save_as_external_data,
    )
