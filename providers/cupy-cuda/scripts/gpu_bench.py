"""The benchmark set on CuPyExecutionProvider against onnxruntime's CPU provider and PyTorch
eager on the same GPU, interleaved, with each runtime's outputs checked against onnxruntime's.

Models: `turnout_testbed.zoo` bert_like (BERT-base shaped, 4 layers, batch 1, sequence 128),
mlp (batch 64) and resnet18_like (batch 1, 224x224). PyTorch eager runs the same ONNX graph
node by node with torch operations (`TorchEager`, a small interpreter for the ops these models
use), so both GPU runtimes launch one kernel sequence per graph, with the same weights. Every
timed call starts from host numpy inputs and ends with host outputs, for all three runtimes.

    python gpu_bench.py --out DIR [--rounds N] [--dry-run]

--dry-run needs no GPU: it builds the models, runs onnxruntime, checks the torch interpreter on
the CPU against onnxruntime, and says what it would time. Results go to DIR/bench.json and a
table to stdout.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

RTOL, ATOL = 1e-3, 1e-3


def models(small: bool = False) -> list[tuple[str, onnx.ModelProto, dict[str, np.ndarray]]]:
    """The benchmark set; `small` shrinks every model (the tests' dry run)."""
    from turnout_testbed import zoo

    rng = np.random.default_rng(0)
    seq, hidden, size = (16, 64, 32) if small else (128, 768, 224)
    mask = np.ones((1, seq), np.int64)
    mask[:, seq * 3 // 4 :] = 0
    bert = zoo.bert_like(layers=1 if small else 4, hidden=hidden, heads=4 if small else 12, seq=seq)
    return [
        (
            "bert_like",
            bert,
            {"x": rng.standard_normal((1, seq, hidden)).astype(np.float32), "attention_mask": mask},
        ),
        ("mlp", zoo.mlp(batch=64), {"x": rng.standard_normal((64, 784)).astype(np.float32)}),
        (
            "resnet18_like",
            zoo.resnet18_like(batch=1, size=size),
            {"image": rng.standard_normal((1, 3, size, size)).astype(np.float32)},
        ),
    ]


class TorchEager:
    """An ONNX graph run node by node with torch operations on `device` (eager mode)."""

    def __init__(self, model: onnx.ModelProto, device: str) -> None:
        import torch

        self.torch = torch
        self.device = device
        self.graph = model.graph
        self.consts = {
            t.name: torch.from_numpy(numpy_helper.to_array(t).copy()).to(device)
            for t in model.graph.initializer
        }
        self.attrs = [
            {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
            for n in model.graph.node
        ]

    def __call__(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        torch = self.torch
        with torch.inference_mode():
            env = dict(self.consts)
            env.update({k: torch.from_numpy(v).to(self.device) for k, v in feeds.items()})
            for node, attrs in zip(self.graph.node, self.attrs):
                args = [env[x] if x else None for x in node.input]
                env[node.output[0]] = self._op(node.op_type, attrs, args)
            return [env[o.name].cpu().numpy() for o in self.graph.output]

    def _op(self, op: str, a: dict[str, Any], x: list[Any]) -> Any:
        torch, F = self.torch, self.torch.nn.functional
        simple: dict[str, Callable[..., Any]] = {
            "Add": torch.add,
            "Sub": torch.sub,
            "Mul": torch.mul,
            "Div": torch.div,
            "Pow": torch.pow,
            "Sqrt": torch.sqrt,
            "Erf": torch.erf,
            "Relu": torch.relu,
            "MatMul": torch.matmul,
        }
        if op in simple:
            return simple[op](*x)
        if op == "Cast":
            return x[0].to(torch.float32 if a["to"] == onnx.TensorProto.FLOAT else torch.int64)
        if op == "Unsqueeze":
            y = x[0]
            for axis in sorted(int(v) for v in x[1].tolist()):
                y = y.unsqueeze(axis)
            return y
        if op == "ReduceMean":
            return x[0].mean(dim=tuple(a["axes"]), keepdim=bool(a.get("keepdims", 1)))
        if op == "Reshape":
            shape = [x[0].shape[i] if d == 0 else d for i, d in enumerate(x[1].tolist())]
            return x[0].reshape(shape)
        if op == "Transpose":
            return x[0].permute(*a["perm"])
        if op == "Softmax":
            return torch.softmax(x[0], dim=a.get("axis", -1))
        if op == "Conv":
            p = a.get("pads", [0, 0, 0, 0])
            return F.conv2d(x[0], x[1], x[2] if len(x) > 2 else None, a.get("strides", 1), p[:2])
        if op == "BatchNormalization":
            return F.batch_norm(x[0], x[3], x[4], x[1], x[2], False, 0.0, a.get("epsilon", 1e-5))
        if op == "MaxPool":
            p = a.get("pads", [0, 0, 0, 0])
            return F.max_pool2d(x[0], a["kernel_shape"], a.get("strides", 1), p[:2])
        if op == "GlobalAveragePool":
            return x[0].mean(dim=(2, 3), keepdim=True)
        if op == "Flatten":
            return x[0].flatten(a.get("axis", 1))
        if op == "Gemm":
            b = x[1].t() if a.get("transB", 0) else x[1]
            return torch.addmm(x[2], x[0], b)
        raise NotImplementedError(f"TorchEager: no {op}")


def _close(got: list[np.ndarray], want: list[np.ndarray]) -> float:
    err = 0.0
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)
        err = max(err, float(np.max(np.abs(g.astype(np.float64) - w))))
    return err


def _emulated(
    data: bytes, feeds: dict[str, np.ndarray], expected: list[np.ndarray]
) -> dict[str, Any]:
    """The provider's decisions and kernels on the emulated backend (numpy, no CUDA): what a
    GPU session would leave to the CPU, and its outputs against onnxruntime's."""
    import turnout
    from turnout.sdk.plugins import registry
    from turnout_cupy.emulated import EMULATED_NAME, EmulatedFactory

    registry.register(EmulatedFactory())
    try:
        so = turnout.SessionOptions()
        so.fallback = "warn"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sess = turnout.InferenceSession(data, so, providers=[EMULATED_NAME])
            got = sess.run(None, feeds)
        cpu = [a.node for a in sess.partition_report().assignments if a.provider != EMULATED_NAME]
        return {"emulated_max_abs_err": _close(got, expected), "emulated_nodes_on_cpu": cpu}
    finally:
        registry.unregister(EMULATED_NAME)


def _time(fns: dict[str, Callable[[], Any]], rounds: int, warmup: int) -> dict[str, list[float]]:
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):  # interleaved: each round runs every runtime once
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return times


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--dry-run", action="store_true", help="no GPU: check the set up only")
    ap.add_argument("--small", action="store_true", help="small models (the tests' dry run)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    import onnxruntime as ort

    import turnout

    try:
        import torch
    except ImportError:
        torch = None
    torch_cuda = torch is not None and torch.cuda.is_available()
    results: dict[str, Any] = {
        "dry_run": args.dry_run,
        "torch": getattr(torch, "__version__", None),
    }
    rows = []
    for name, model, feeds in models(args.small):
        data = model.SerializeToString()
        ref = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
        expected = ref.run(None, feeds)
        entry: dict[str, Any] = {}
        fns: dict[str, Callable[[], Any]] = {
            "onnxruntime_cpu": lambda r=ref, f=feeds: r.run(None, f)
        }
        if torch is not None:
            eager = TorchEager(model, "cuda" if torch_cuda and not args.dry_run else "cpu")
            entry["torch_max_abs_err"] = _close(eager(feeds), expected)
            if torch_cuda and not args.dry_run:
                fns["torch_eager_cuda"] = lambda e=eager, f=feeds: e(f)
        if args.dry_run:
            entry.update(_emulated(data, feeds, expected))
            entry["skipped"] = "dry run: no CuPy session, nothing timed"
            results[name] = entry
            print(
                f"{name}: onnxruntime ok, torch interpreter ok ({entry.get('torch_max_abs_err')}), "
                f"emulated provider ok ({entry['emulated_max_abs_err']}), nodes it leaves to "
                f"the CPU: {entry['emulated_nodes_on_cpu'] or 'none'}"
            )
            continue
        so = turnout.SessionOptions()
        so.fallback = "warn"
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sess = turnout.InferenceSession(data, so, providers=["CUDAExecutionProvider"])
        entry["create_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        got = sess.run(None, feeds)
        entry["first_run_s"] = time.perf_counter() - t0
        entry["cupy_max_abs_err"] = _close(got, expected)
        report = sess.partition_report().assignments
        entry["nodes_on_cpu"] = sorted(
            a.node for a in report if a.provider != "CuPyExecutionProvider"
        )
        fns["turnout_cupy"] = lambda s=sess, f=feeds: s.run(None, f)
        times = _time(fns, args.rounds, warmup=5)
        med = {k: statistics.median(v) for k, v in times.items()}
        entry["median_s"] = med
        entry["range_s"] = {k: [min(v), max(v)] for k, v in times.items()}
        if "torch_eager_cuda" in med:
            entry["ratio_vs_torch_eager_cuda"] = med["turnout_cupy"] / med["torch_eager_cuda"]
        entry["ratio_vs_onnxruntime_cpu"] = med["turnout_cupy"] / med["onnxruntime_cpu"]
        results[name] = entry
        rows.append(
            f"{name:14s} cupy {med['turnout_cupy'] * 1e3:8.2f} ms  ort-cpu "
            f"{med['onnxruntime_cpu'] * 1e3:8.2f} ms  torch-cuda "
            + (
                f"{med['torch_eager_cuda'] * 1e3:8.2f} ms"
                if "torch_eager_cuda" in med
                else "   -   "
            )
            + f"  cupy/torch {entry.get('ratio_vs_torch_eager_cuda', float('nan')):.2f}"
            + f"  on cpu: {len(entry['nodes_on_cpu'])}"
        )
    (args.out / "bench.json").write_text(json.dumps(results, indent=2, default=str))
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
