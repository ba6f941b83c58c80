"""Quantized models made by onnxruntime's tools, run on turnout and on onnxruntime, 1 thread.

Each benchmark model is quantized with onnxruntime's own tools (`quantize_dynamic`,
`quantize_static` in QDQ and QOperator formats, `MatMulNBitsQuantizer` at 4 bits), then run
interleaved on onnxruntime's CPU provider and on a turnout session asking for
`CPUExecutionProvider` (the host: turnout-numba when installed). Each row gives both medians,
their ratio (turnout / onnxruntime), the parity gap (max |difference| / output range) and
onnxruntime's own gap between its optimized run and its unoptimized one (ORT_DISABLE_ALL): a
quantized graph is discontinuous, and where onnxruntime's fusions round differently from the
unfused graph, that gap is the tolerance onnxruntime itself meets.

    python -m benchmarks.quantized_models [--repeat 30] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from . import zoo

MODELS = ("mlp", "resnet18_like", "bert_like", "crnn_ocr_like")


class _Reader:
    """onnxruntime's CalibrationDataReader protocol over a few seeded feeds."""

    def __init__(self, feeds: list[dict[str, np.ndarray]]) -> None:
        self._it = iter(feeds)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._it, None)


def _small(name: str) -> onnx.ModelProto:
    """The benchmark models at sizes a quantization sweep can afford."""
    from turnout_testbed import zoo as builders

    if name == "resnet18_like":
        return builders.resnet18_like(size=64)
    if name == "bert_like":
        return builders.bert_like(layers=2, hidden=256, heads=4, seq=64)
    return zoo.get(name).build()


def _variants(name: str, src: Path, work: Path) -> dict[str, Path]:
    """The quantized forms of one model that onnxruntime's tools produce for it."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_dynamic, quantize_static

    model = onnx.load(src)
    feeds = [zoo.model_feeds(name, model, seed) for seed in range(8)]
    out: dict[str, Path] = {}

    def attempt(tag: str, make: Callable[[Path], None]) -> None:
        path = work / f"{name}.{tag}.onnx"
        try:
            make(path)
            out[tag] = path
        except Exception as e:  # a tool that cannot handle this model: say so, go on
            print(f"  {name} {tag}: onnxruntime's tool failed: {type(e).__name__}: {e}")

    attempt("dynamic", lambda p: quantize_dynamic(str(src), str(p), weight_type=QuantType.QInt8))
    for fmt in ("QDQ", "QOperator"):
        attempt(
            f"static-{fmt}",
            lambda p, fmt=fmt: quantize_static(
                str(src),
                str(p),
                _Reader(feeds),
                quant_format=getattr(QuantFormat, fmt),
                activation_type=QuantType.QUInt8,
                weight_type=QuantType.QInt8,
            ),
        )

    def nbits(p: Path) -> None:
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

        q = MatMulNBitsQuantizer(onnx.load(src), block_size=32, is_symmetric=True)
        q.process()
        if not any(n.op_type == "MatMulNBits" for n in q.model.model.graph.node):
            raise ValueError("no MatMul became MatMulNBits")
        q.model.save_model_to_file(str(p))

    attempt("matmulnbits-4bit", nbits)
    return out


def _time(run: Callable[[], Any], repeat: int) -> list[float]:
    samples = []
    for _ in range(repeat):
        t = time.perf_counter()
        run()
        samples.append(time.perf_counter() - t)
    return samples


def _gap(want: list[Any], got: list[Any]) -> float:
    """The largest difference over the outputs, as a fraction of each expected output's range."""
    gap = 0.0
    for w, g in zip(want, got):
        w, g = np.asarray(w, np.float64), np.asarray(g, np.float64)
        span = float(w.max() - w.min()) if w.size else 0.0
        gap = max(gap, float(np.abs(w - g).max()) / (span or 1.0))
    return gap


def measure(name: str, tag: str, path: Path, repeat: int) -> dict[str, Any]:
    import onnxruntime as ort

    import turnout

    feeds = zoo.model_feeds(name, onnx.load(path, load_external_data=False), 100)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    ref = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    to = turnout.SessionOptions()
    to.intra_op_num_threads = 1
    sess = turnout.InferenceSession(str(path), to, providers=["CPUExecutionProvider"])
    want, got = ref.run(None, feeds), sess.run(None, feeds)
    plain = ort.SessionOptions()
    plain.intra_op_num_threads = 1
    plain.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    unopt = ort.InferenceSession(str(path), plain, providers=["CPUExecutionProvider"])
    gap, self_gap = _gap(want, got), _gap(want, unopt.run(None, feeds))
    for _ in range(3):
        ref.run(None, feeds)
        sess.run(None, feeds)
    t_ref: list[float] = []
    t_trn: list[float] = []
    for _ in range(repeat):  # interleaved: the machine's load hits both alike
        t_ref += _time(lambda: ref.run(None, feeds), 1)
        t_trn += _time(lambda: sess.run(None, feeds), 1)
    ort_ms = float(np.median(t_ref)) * 1e3
    trn_ms = float(np.median(t_trn)) * 1e3
    return {
        "model": name, "variant": tag, "ort_ms": ort_ms, "turnout_ms": trn_ms,
        "ratio": trn_ms / ort_ms, "gap": gap, "ort_self_gap": self_gap,
        "placed": sess.partition_report().counts(),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--repeat", type=int, default=30)
    p.add_argument("--json")
    args = p.parse_args(argv)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="turnout-quantized-") as tmp:
        work = Path(tmp)
        for name in [n.strip() for n in args.models.split(",") if n.strip()]:
            src = work / f"{name}.onnx"
            onnx.save(_small(name), src)
            for tag, path in _variants(name, src, work).items():
                try:
                    rows.append(measure(name, tag, path, args.repeat))
                except Exception as e:
                    rows.append(
                        {"model": name, "variant": tag, "error": f"{type(e).__name__}: {e}"}
                    )
                print(json.dumps(rows[-1]), file=sys.stderr)
    head = "| model | variant | onnxruntime ms | turnout ms | turnout/ort | parity gap"
    print(f"{head} | ort self-gap |")
    print("|---|---|---:|---:|---:|---:|---:|")
    ratios = []
    for r in rows:
        if "error" in r:
            print(f"| {r['model']} | {r['variant']} | | | error: {r['error']} | | |")
            continue
        ratios.append(r["ratio"])
        print(f"| {r['model']} | {r['variant']} | {r['ort_ms']:.3f} | {r['turnout_ms']:.3f} | "
              f"{r['ratio']:.2f} | {r['gap']:.1e} | {r['ort_self_gap']:.1e} |")  # fmt: skip
    if ratios:
        geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        print(f"\ngeomean turnout/onnxruntime over {len(ratios)} quantized models: {geo:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
