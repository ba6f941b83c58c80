"""onnxruntime.quantization.static_quantize_runner on turnout: quantize_static from the command
line, calibrated on the model's own test data.

    python -m turnout.tools.quantization.static_quantize_runner -i model.onnx -o model.qdq.onnx \\
        --activation_type quint8 --weight_type qint8 --per_channel

The calibration feeds are the ONNX test-data layout beside the model (as the ONNX model zoo ships
it): every folder `test_data_set_*` next to `model.onnx` is one feed, its `input_<i>.pb` the
TensorProto of the model's i-th input. The options are onnxruntime's, by the same names; each
becomes the argument or extra option of `quantize` with a `StaticQuantConfig` that onnxruntime's
runner passes, so an option turnout does not implement fails the same way there
(docs/quantization.md).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from turnout.tools.quantization.calibrate import CalibrationDataReader
from turnout.tools.quantization.quantize import StaticQuantConfig, quantize
from turnout.tools.quantization.types import CalibrationMethod, QuantFormat, QuantType

__all__ = [
    "OnnxModelCalibrationDataReader",
    "get_tensor_quant_overrides",
    "main",
    "parse_arguments",
]

_TYPES = {
    "qint8": QuantType.QInt8,
    "quint8": QuantType.QUInt8,
    "qint16": QuantType.QInt16,
    "quint16": QuantType.QUInt16,
    "qint4": "QInt4",  # refused by quantize_static, naming the type
    "quint4": "QUInt4",
    "qfloat8e4m3fn": QuantType.QFLOAT8E4M3FN,
}
_METHODS = {
    "minmax": CalibrationMethod.MinMax,
    "entropy": CalibrationMethod.Entropy,
    "percentile": CalibrationMethod.Percentile,
    "distribution": CalibrationMethod.Distribution,
}
_FORMATS = {"qdq": QuantFormat.QDQ, "qoperator": QuantFormat.QOperator}

# command-line switch -> the extra option it sets (to the switch's value)
_SWITCHES = {
    "enable_subgraph": "EnableSubgraph",
    "force_quantize_no_input_check": "ForceQuantizeNoInputCheck",
    "matmul_const_b_only": "MatMulConstBOnly",
    "add_qdq_pair_to_weight": "AddQDQPairToWeight",
    "dedicated_qdq_pair": "DedicatedQDQPair",
    "calib_tensor_range_symmetric": "CalibTensorRangeSymmetric",
    "calib_moving_average": "CalibMovingAverage",
    "use_qdq_contrib_ops": "UseQDQContribOps",
    "qdq_keep_removable_activations": "QDQKeepRemovableActivations",
    "qdq_disable_weight_adjust_for_int32_bias": "QDQDisableWeightAdjustForInt32Bias",
}


class OnnxModelCalibrationDataReader(CalibrationDataReader):
    """One feed per `test_data_set_*` folder beside `model_path`: `input_<i>.pb` is the value
    of the model's i-th input (initializers that are also graph inputs are not inputs here)."""

    def __init__(self, model_path: str | Path) -> None:
        path = Path(model_path)
        graph = onnx.load(str(path), load_external_data=False).graph
        constants = {t.name for t in graph.initializer}
        names = [i.name for i in graph.input if i.name not in constants]
        folders = sorted(d for d in path.parent.glob("test_data_set_*") if d.is_dir())
        self._feeds: Iterator[dict[str, np.ndarray]] = iter(
            [
                {name: _read_tensor(d / f"input_{i}.pb") for i, name in enumerate(names)}
                for d in folders
            ]
        )

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._feeds, None)


def _read_tensor(path: Path) -> np.ndarray:
    tensor = onnx.TensorProto()
    tensor.ParseFromString(path.read_bytes())
    return numpy_helper.to_array(tensor)


def parse_arguments(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """onnxruntime's runner's options (`argv`: default sys.argv[1:])."""
    p = argparse.ArgumentParser(description="Static quantization of an ONNX model on turnout")
    p.add_argument("-i", "--input_model_path", required=True, help="the float model")
    p.add_argument("-o", "--output_quantized_model_path", required=True, help="where to write")
    for which, default in (("activation_type", "quint8"), ("weight_type", "qint8")):
        p.add_argument(f"--{which}", choices=list(_TYPES), default=default)
    for switch in _SWITCHES:
        p.add_argument(f"--{switch}", action="store_true", help=f"extra option {_SWITCHES[switch]}")
    p.add_argument("--disable_quantize_bias", action="store_true", help="QuantizeBias=False")
    p.add_argument("--op_types_to_exclude_output_quantization", nargs="+", default=[])
    p.add_argument("--calibration_method", choices=list(_METHODS), default="minmax")
    p.add_argument("--quant_format", choices=list(_FORMATS), default="qdq")
    p.add_argument("--minimum_real_range", type=float, default=0.0001)
    p.add_argument("--per_channel", action="store_true")
    p.add_argument("--nodes_to_quantize", nargs="+", default=None)
    p.add_argument("--nodes_to_exclude", nargs="+", default=None)
    p.add_argument(
        "--op_per_channel_axis",
        nargs=2,
        action="append",
        metavar=("OP_TYPE", "PER_CHANNEL_AXIS"),
        default=[],
        help="the weight's channel axis for an op type (with --per_channel)",
    )
    p.add_argument("--tensor_quant_overrides", help="a JSON file of TensorQuantOverrides")
    return p.parse_args(argv)


def get_tensor_quant_overrides(file: str | None) -> dict[str, list[dict[str, Any]]]:
    """The TensorQuantOverrides in JSON `file` ({tensor: [{"scale": s, "zero_point": z}, ...]})
    with scales as float32 and zero points as numpy arrays; {} without a file."""
    if not file:
        return {}
    overrides: dict[str, list[dict[str, Any]]] = json.loads(Path(file).read_text())
    for encodings in overrides.values():
        for enc in encodings:
            enc["scale"] = np.array(enc["scale"], dtype=np.float32)
            enc["zero_point"] = np.array(enc["zero_point"])
    return overrides


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_arguments(argv)
    extra: dict[str, Any] = {option: getattr(args, s) for s, option in _SWITCHES.items()}
    extra.update(
        OpTypesToExcludeOutputQuantization=args.op_types_to_exclude_output_quantization,
        QDQOpTypePerChannelSupportToAxis=dict(args.op_per_channel_axis),
        QuantizeBias=not args.disable_quantize_bias,
        MinimumRealRange=args.minimum_real_range,
        TensorQuantOverrides=get_tensor_quant_overrides(args.tensor_quant_overrides),
    )
    config = StaticQuantConfig(
        calibration_data_reader=OnnxModelCalibrationDataReader(args.input_model_path),
        calibrate_method=_METHODS[args.calibration_method],
        quant_format=_FORMATS[args.quant_format],
        activation_type=_TYPES[args.activation_type],
        weight_type=_TYPES[args.weight_type],
        nodes_to_quantize=args.nodes_to_quantize,
        nodes_to_exclude=args.nodes_to_exclude,
        per_channel=args.per_channel,
        extra_options=extra,
    )
    quantize(args.input_model_path, args.output_quantized_model_path, config)


if __name__ == "__main__":
    main()
