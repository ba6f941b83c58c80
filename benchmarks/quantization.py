"""turnout.tools.quantization beside onnxruntime.quantization on the benchmark models.

    python -m benchmarks.quantization [--models mlp,tiny_cnn] [--calib 16] [--eval 64]
                                      [--preprocess] [--numpy-only] [--json FILE]

For each model and method (dynamic; static QDQ MinMax per tensor; static QDQ MinMax per
channel), both tools quantize the same float model with the same options (activations uint8,
weights int8) and, for static, the same calibration feeds (seeds 1000 + i, made by the model's
own feed generator). Every quantized model then runs on onnxruntime over evaluation feeds
(seeds 0 .. eval - 1, none used for calibration), and the table gives:

- size: the serialized model in KB (float / turnout's / onnxruntime's);
- top-1: how often the quantized model's arg-max class equals the float model's (per row, or per
  time step for the OCR model), turnout's / onnxruntime's; `classes` is how many distinct
  classes the float model picked, so that a trivial agreement shows;
- gap: the largest difference between a quantized model run on onnxruntime and the same model
  run on turnout, over the float output's range (the "runs the same on both" check), for
  turnout's model / onnxruntime's model (the second says how far the two runtimes' integer
  kernels differ on a model neither of which turnout wrote);
- err: the largest difference to the float output, over its range, turnout's / onnxruntime's;
- time: seconds to quantize (calibration included), turnout's / onnxruntime's;
- ms: median milliseconds of one run on onnxruntime (one thread) of the float model / turnout's
  quantized model / onnxruntime's (does turnout's Q/DQ placement let onnxruntime fuse as well?).

With --preprocess both tools get the model after turnout.tools.quantization.quant_pre_process
(BatchNormalization folded into Conv, MatMul + Add as Gemm), the step onnxruntime advises.

The models have seeded random weights and the inputs are synthetic, so the numbers compare the
tools with each other, not with a trained model's accuracy. Needs onnxruntime (the oracle).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

__all__ = ["MODELS", "QuantModel", "main", "measure"]


@dataclass(frozen=True)
class QuantModel:
    build: Callable[[], onnx.ModelProto]
    feeds: Callable[[int], dict[str, np.ndarray]]  # seed -> one input batch
    classifier: bool = True  # top-1 over the last axis of the first output makes sense


def _random_feeds(build: Callable[[], onnx.ModelProto]) -> Callable[[int], dict[str, Any]]:
    from benchmarks.zoo import feeds

    model = build()
    return lambda seed: feeds(model, seed)


def _models() -> dict[str, QuantModel]:
    from turnout.tools.models import build_tiny_cnn
    from turnout_testbed import apps, zoo

    def mlp() -> onnx.ModelProto:
        return zoo.mlp(batch=8)

    def resnet() -> onnx.ModelProto:
        return zoo.resnet18_like(size=64)

    def ocr() -> onnx.ModelProto:
        return apps.crnn_ocr_like(width=160)

    def yolo() -> onnx.ModelProto:
        return apps.yolo_det_like(size=160)

    return {
        "mlp": QuantModel(mlp, _random_feeds(mlp)),
        "tiny_cnn": QuantModel(build_tiny_cnn, _random_feeds(build_tiny_cnn)),
        "resnet18_like(64)": QuantModel(resnet, _random_feeds(resnet)),
        "text_cnn_like": QuantModel(apps.text_cnn_like, lambda s: apps.text_cnn_feeds(seed=s)),
        "crnn_ocr_like(160)": QuantModel(ocr, lambda s: apps.crnn_ocr_feeds(160, seed=s)),
        "yolo_det_like(160)": QuantModel(yolo, lambda s: apps.yolo_det_feeds(160, seed=s), False),
    }


MODELS = (
    "mlp",
    "tiny_cnn",
    "resnet18_like(64)",
    "text_cnn_like",
    "crnn_ocr_like(160)",
    "yolo_det_like(160)",
)
METHODS = ("dynamic", "static", "static per-channel")


def _quantize(tool: Any, method: str, model: onnx.ModelProto, calib: list[Any]) -> onnx.ModelProto:
    """`model` quantized by `tool` (turnout.tools.quantization or onnxruntime.quantization)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        src, dst = f"{tmp}/float.onnx", f"{tmp}/quant.onnx"
        onnx.save(model, src)
        if method == "dynamic":
            tool.quantize_dynamic(src, dst, weight_type=tool.QuantType.QInt8)
        else:

            class Reader(tool.CalibrationDataReader):  # type: ignore[misc,name-defined]
                def __init__(self) -> None:
                    self.batches = iter(calib)

                def get_next(self) -> Any:
                    return next(self.batches, None)

            tool.quantize_static(
                src,
                dst,
                Reader(),
                quant_format=tool.QuantFormat.QDQ,
                per_channel=method.endswith("per-channel"),
                activation_type=tool.QuantType.QUInt8,
                weight_type=tool.QuantType.QInt8,
                calibrate_method=tool.CalibrationMethod.MinMax,
            )
        return onnx.load(dst)


def _run_ort(model: onnx.ModelProto, feeds: list[dict[str, Any]]) -> tuple[np.ndarray, float]:
    """The first output over all feeds, and the median milliseconds of one run (after one
    warm-up run) on onnxruntime with one thread."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    session = ort.InferenceSession(
        model.SerializeToString(), opts, providers=["CPUExecutionProvider"]
    )
    session.run(None, feeds[0])
    outputs, times = [], []
    for feed in feeds:
        start = time.perf_counter()
        outputs.append(session.run(None, feed)[0])
        times.append(time.perf_counter() - start)
    return np.concatenate(outputs), 1000 * float(np.median(times))


def _run_turnout(
    model: onnx.ModelProto, feeds: list[dict[str, Any]], numpy_only: bool
) -> np.ndarray:
    import turnout

    opts = turnout.SessionOptions()
    if numpy_only:  # turnout.engine.provider_selection's documented switch
        opts.add_session_config_entry("session.turnout.cpu_numpy_only", "1")
    session = turnout.InferenceSession(model.SerializeToString(), opts)
    return np.concatenate([session.run(None, f)[0] for f in feeds])


def _top1(out: np.ndarray) -> np.ndarray:
    return out.reshape(-1, out.shape[-1]).argmax(axis=-1)


def measure(
    name: str,
    spec: QuantModel,
    n_calib: int,
    n_eval: int,
    numpy_only: bool = False,
    preprocess: bool = False,
) -> list[dict[str, Any]]:
    """One row per method for model `name`; with `preprocess`, both tools quantize the model
    after turnout.tools.quantization.quant_pre_process (BatchNormalization folded into Conv)."""
    import onnxruntime.quantization as ort_quant

    import turnout.tools.quantization as our_quant

    model = spec.build()
    if preprocess:
        model = our_quant.quant_pre_process(model)
        name += " pre"
    calib = [spec.feeds(1000 + i) for i in range(n_calib)]
    evals = [spec.feeds(i) for i in range(n_eval)]
    ref, ms_float = _run_ort(model, evals)
    span = float(ref.max() - ref.min()) or 1.0
    rows = []
    for method in METHODS:
        row: dict[str, Any] = {"model": name, "method": method, "size_float": model.ByteSize()}
        row["ms_float"] = ms_float
        for tool, key in ((our_quant, "turnout"), (ort_quant, "ort")):
            start = time.perf_counter()
            try:
                quant = _quantize(tool, method, model, calib)
            except Exception as error:  # a tool that cannot quantize this model: say why
                row[f"error_{key}"] = f"{type(error).__name__}: {str(error).splitlines()[0]}"
                continue
            row[f"time_{key}"] = time.perf_counter() - start
            row[f"size_{key}"] = quant.ByteSize()
            out, row[f"ms_{key}"] = _run_ort(quant, evals)
            row[f"err_{key}"] = float(np.abs(out - ref).max()) / span
            if spec.classifier:
                row[f"top1_{key}"] = float((_top1(out) == _top1(ref)).mean())
            try:
                on_turnout = _run_turnout(quant, evals, numpy_only)
            except Exception as error:
                if key == "turnout":
                    raise
                # onnxruntime's model may use its contrib ops (DynamicQuantizeLSTM, ...)
                row["error_gap_ort"] = f"turnout cannot run it: {str(error).splitlines()[-1]}"
                continue
            row[f"gap_{key}"] = float(np.abs(out - on_turnout).max()) / span
        row["classes"] = int(np.unique(_top1(ref)).size) if spec.classifier else None
        rows.append(row)
    return rows


def _cell(row: dict[str, Any], key: str, fmt: str) -> str:
    value = row.get(key)
    if value is None:
        if f"error_{key}" in row:
            return "not run"
        return "error" if f"error_{key.split('_')[-1]}" in row else "—"
    return format(value, fmt)


def markdown(rows: list[dict[str, Any]]) -> str:
    """The table of docs/quantization.md."""
    lines = [
        "| model | method | size KB float / turnout / ort | top-1 turnout / ort (classes) "
        "| gap turnout / ort | err vs float turnout / ort | time s turnout / ort "
        "| ms on ort float / turnout / ort |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        kb = "{:.0f}".format
        size = " / ".join(
            kb(r[k] / 1024) if k in r else "error"
            for k in ("size_float", "size_turnout", "size_ort")
        )
        top1 = "—"
        if r.get("classes") is not None:
            ours, theirs = _cell(r, "top1_turnout", ".1%"), _cell(r, "top1_ort", ".1%")
            top1 = f"{ours} / {theirs} ({r['classes']})"
        lines.append(
            f"| {r['model']} | {r['method']} | {size} | {top1} "
            f"| {_cell(r, 'gap_turnout', '.2%')} / {_cell(r, 'gap_ort', '.2%')} "
            f"| {_cell(r, 'err_turnout', '.2%')} / {_cell(r, 'err_ort', '.2%')} "
            f"| {_cell(r, 'time_turnout', '.2f')} / {_cell(r, 'time_ort', '.2f')} "
            f"| {_cell(r, 'ms_float', '.2f')} / {_cell(r, 'ms_turnout', '.2f')} "
            f"/ {_cell(r, 'ms_ort', '.2f')} |"
        )
    notes = [
        f"- {r['model']} {r['method']}, {k[6:]}: {v}"
        for r in rows
        for k, v in r.items()
        if k.startswith("error_")
    ]
    return "\n".join(lines + (["", *notes] if notes else []))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated names")
    parser.add_argument("--calib", type=int, default=16, help="calibration batches")
    parser.add_argument("--eval", type=int, default=64, help="evaluation batches")
    parser.add_argument("--json", help="also write the rows as JSON to this file")
    parser.add_argument(
        "--preprocess",
        action="store_true",
        help="quantize after turnout.tools.quantization.quant_pre_process (both tools)",
    )
    parser.add_argument(
        "--numpy-only",
        action="store_true",
        help="run the quantized models on turnout's numpy kernels only (no turnout-numba)",
    )
    args = parser.parse_args(argv)
    import logging

    logging.getLogger().setLevel(logging.ERROR)  # onnxruntime.quantization's advice lines
    specs = _models()
    rows: list[dict[str, Any]] = []
    for name in args.models.split(","):
        if name not in specs:
            parser.error(f"unknown model {name!r}; known: {', '.join(MODELS)}")
        rows += measure(name, specs[name], args.calib, args.eval, args.numpy_only, args.preprocess)
        print(f"{name}: done", flush=True)
    print(markdown(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
