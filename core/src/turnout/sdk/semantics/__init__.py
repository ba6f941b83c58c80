"""Op semantics every provider shares: what a node means, apart from how a kernel computes it.

A provider's kernel for Conv, a pool, Resize, a fused op, Attention or a loss op derives its
geometry, tap tables, activation and input checks from here, not from another provider's
kernels, so that every provider computes the same output shape and raises the same
`InvalidArgument` for the same malformed node. The CPU provider's numpy kernels are built on
these too.

- `shape`: axis normalisation and Split's chunk sizes.
- `defaults`: the ai.onnx ops' attribute defaults, read from onnx's schemas.
- `geometry`: strides, dilations, pads and output sizes of sliding-window ops (per auto_pad).
- `resize`: Resize's output sizes, source coordinates, nearest indices and filter taps.
- `activations`: the fused ops' activation table and numpy reference functions.
- `numerics`: erf and an overflow-free sigmoid, exact to the dtype they are given; MLAS's
  sigmoid and tanh approximations, for the kernels that follow onnxruntime to the bit (the
  Sigmoid and Tanh ops' float32 results: `sigmoid`, `tanh`).
- `attention`: Attention's input-shape checks.
- `loss`: the loss ops' input-shape checks, class weighting and reduction.
- `recurrent`: RNN/GRU/LSTM attributes (directions, layout, activations) and input checks.
- `rotary`, `linear_attention`, `causal_conv`, `flex_attention`: those ops' sizes, attributes
  and input checks.
- `batch_norm`: whether a BatchNormalization node trains (per opset).
- `spectral`: DFT's and STFT's axis, length and frames; MelWeightMatrix's filter edges.
- `nms`, `tensor_scatter`, `deform_conv`, `optimizers`: NonMaxSuppression's thresholds,
  TensorScatter's cache update, DeformConv's geometry, the training optimizers' step scalars.
- `constants`: which inputs are constants a kernel may prepare once.
- `sampling`: GridSample's and RoiAlign's sample taps, AffineGrid's base grid.
- `unfold`: ConvTranspose, Col2Im and MaxUnpool output geometry; where each kernel tap lands.
- `indexing`: the gather/scatter ops' axis, reduction and indices/updates shape checks.
- `normalization`: LpNormalization, MeanVarianceNormalization and LRN attributes.
- `linalg`: Einsum's equation and Det's input check.
- `windows`: the Hann/Hamming/Blackman windows' coefficients and period.
- `quant`: linear quantization's attributes, scale/zero-point layouts and integer ranges;
  DynamicQuantizeLinear's scale and zero point.
- `pad`: Pad's and CenterCropPad's plans (crops, output shapes, source positions).
- `literal`: a Constant node's value from its attributes.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from turnout._submodules import submodule

if TYPE_CHECKING:  # the names as type checkers and readers see them; _LAZY must agree
    from turnout.sdk.semantics.activations import (
        ACTIVATION_DEFAULTS,
        activation,
        activation_of,
        gelu,
        gelu_tanh,
    )
    from turnout.sdk.semantics.attention import AttentionShapes, attention_shapes
    from turnout.sdk.semantics.constants import constant_input, constant_value
    from turnout.sdk.semantics.geometry import (
        check_conv_channels,
        conv_geometry,
        conv_kernel_shape,
        pool_kernel_shape,
        spatial_attrs,
    )
    from turnout.sdk.semantics.loss import check_loss_shapes
    from turnout.sdk.semantics.numerics import (
        MLAS_LOGISTIC,
        MLAS_TANH,
        MlasRational,
        erf,
        logistic,
        mlas_logistic,
        mlas_tanh,
        sigmoid,
        tanh,
        typed_constants,
    )
    from turnout.sdk.semantics.quant import (
        attr_dtype,
        compute_dtype,
        dynamic_quant_params,
        dynamic_quant_range,
        expand_param,
        int_range,
        quant_axis_block,
    )
    from turnout.sdk.semantics.resize import (
        COORDINATE_MODES,
        KEEP_ASPECT_RATIO_POLICIES,
        MODES,
        NEAREST_MODES,
        cubic_weights,
        extrapolation_fill,
        filter_taps,
        nearest_indices,
        outside_roi,
        resize_attr_error,
        resize_targets,
        source_coordinates,
    )

_LAZY = {
    "ACTIVATION_DEFAULTS": "activations",
    "activation": "activations",
    "activation_of": "activations",
    "gelu": "activations",
    "gelu_tanh": "activations",
    "AttentionShapes": "attention",
    "attention_shapes": "attention",
    "constant_input": "constants",
    "constant_value": "constants",
    "check_conv_channels": "geometry",
    "conv_geometry": "geometry",
    "conv_kernel_shape": "geometry",
    "pool_kernel_shape": "geometry",
    "spatial_attrs": "geometry",
    "check_loss_shapes": "loss",
    "MLAS_LOGISTIC": "numerics",
    "MLAS_TANH": "numerics",
    "MlasRational": "numerics",
    "erf": "numerics",
    "logistic": "numerics",
    "mlas_logistic": "numerics",
    "mlas_tanh": "numerics",
    "sigmoid": "numerics",
    "tanh": "numerics",
    "typed_constants": "numerics",
    "attr_dtype": "quant",
    "compute_dtype": "quant",
    "dynamic_quant_params": "quant",
    "dynamic_quant_range": "quant",
    "expand_param": "quant",
    "int_range": "quant",
    "quant_axis_block": "quant",
    "COORDINATE_MODES": "resize",
    "KEEP_ASPECT_RATIO_POLICIES": "resize",
    "MODES": "resize",
    "NEAREST_MODES": "resize",
    "cubic_weights": "resize",
    "extrapolation_fill": "resize",
    "filter_taps": "resize",
    "nearest_indices": "resize",
    "outside_roi": "resize",
    "resize_attr_error": "resize",
    "resize_targets": "resize",
    "source_coordinates": "resize",
}
"""Each public name -> the submodule that defines it, imported on first read: a kernel
module that needs `geometry` does not pay for `resize`, `quant` or `attention`
(`tests/core/test_startup_imports.py` checks this table against the block above)."""

__all__ = [
    "ACTIVATION_DEFAULTS",
    "COORDINATE_MODES",
    "KEEP_ASPECT_RATIO_POLICIES",
    "MLAS_LOGISTIC",
    "MLAS_TANH",
    "MODES",
    "NEAREST_MODES",
    "AttentionShapes",
    "MlasRational",
    "activation",
    "activation_of",
    "attr_dtype",
    "attention_shapes",
    "check_conv_channels",
    "check_loss_shapes",
    "compute_dtype",
    "constant_input",
    "constant_value",
    "conv_geometry",
    "conv_kernel_shape",
    "cubic_weights",
    "dynamic_quant_params",
    "dynamic_quant_range",
    "erf",
    "expand_param",
    "extrapolation_fill",
    "filter_taps",
    "gelu",
    "gelu_tanh",
    "int_range",
    "logistic",
    "mlas_logistic",
    "mlas_tanh",
    "nearest_indices",
    "outside_roi",
    "pool_kernel_shape",
    "quant_axis_block",
    "resize_attr_error",
    "resize_targets",
    "sigmoid",
    "source_coordinates",
    "spatial_attrs",
    "tanh",
    "typed_constants",
]


def __getattr__(name: str) -> Any:
    """A public name from its submodule, or a submodule, imported on first read (see
    `turnout._submodules`)."""
    module = _LAZY.get(name)
    if module is not None:
        return getattr(importlib.import_module(f"{__name__}.{module}"), name)
    return submodule(__name__, name)
