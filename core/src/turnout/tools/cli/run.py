"""`turnout run MODEL`: run a model on random (or given) inputs; outputs, providers, time."""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np

from turnout.graph.errors import TurnoutError


def _random_input(arg: Any, dims: dict[str, int], rng: np.random.Generator) -> Any:
    from turnout.graph.dtypes import np_dtype

    type_str: str = arg.type
    if not type_str.startswith("tensor("):
        raise TurnoutError(f"input {arg.name!r} has type {type_str}; pass it with --input")
    shape = [d if isinstance(d, int) else dims.get(str(d), 1) for d in arg.shape]
    from onnx import TensorProto

    name = type_str[len("tensor(") : -1]
    code = {
        "float": TensorProto.FLOAT,
        "double": TensorProto.DOUBLE,
        "string": TensorProto.STRING,
    }.get(name, getattr(TensorProto, name.upper(), TensorProto.FLOAT))
    dt = np_dtype(code)
    if dt.kind == "f":
        return rng.standard_normal(shape).astype(dt)
    if dt.kind in "iu":
        return rng.integers(0, 10, shape).astype(dt)
    if dt.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    return np.full(shape, "a", dtype=object)


def _resolve_model(name: str) -> str:
    from turnout.tools.models import shipped_model

    path = shipped_model(name)
    return str(path) if path is not None else name


def _cmd_run(args: argparse.Namespace) -> int:
    from turnout.api.session import InferenceSession

    providers = args.providers.split(",") if args.providers else None
    model = _resolve_model(args.model)
    t0 = time.perf_counter()
    sess = InferenceSession(model, providers=providers)
    t_create = time.perf_counter() - t0
    dims = dict(_pair(x, int) for x in args.dim)
    feeds: dict[str, Any] = {}
    for item in args.input:
        name, path = _pair(item, str)
        feeds[name] = np.load(path, allow_pickle=False)
    rng = np.random.default_rng(args.seed)
    for arg in sess.get_inputs():
        if arg.name not in feeds:
            feeds[arg.name] = _random_input(arg, dims, rng)
    times = []
    outs: list[Any] = []
    for _ in range(max(1, args.repeat)):
        t = time.perf_counter()
        outs = sess.run(None, feeds)
        times.append(time.perf_counter() - t)
    print(f"model: {model}")
    for name, value in feeds.items():
        print(f"input  {name}: {_describe(value)}")
    for arg, value in zip(sess.get_outputs(), outs):
        print(f"output {arg.name}: {_describe(value)}")
        if isinstance(value, np.ndarray) and value.size:
            with np.printoptions(precision=4, suppress=True, threshold=20, edgeitems=5):
                print(f"  {value}")
    report = sess.partition_report()
    serving = f" ({', '.join(report.hosts)} serving CPUExecutionProvider)" if report.hosts else ""
    counts = report.counts()
    print("providers: " + ", ".join(f"{p} ({n} nodes)" for p, n in counts.items()) + serving)
    if report.tier is not None:
        print(f"kernels: {report.tier.describe()}")
    print(
        f"time: session {t_create * 1000:.1f} ms, first run {times[0] * 1000:.2f} ms"
        + (
            f", median of {len(times)} runs {statistics.median(times) * 1000:.3f} ms"
            if len(times) > 1
            else ""
        )
    )
    return 0


def _describe(v: Any) -> str:
    if isinstance(v, np.ndarray):
        return f"{v.dtype} {list(v.shape)}"
    if isinstance(v, list):
        return f"sequence of {len(v)}"
    return type(v).__name__


def _pair(text: str, conv: Any) -> tuple[str, Any]:
    if "=" not in text:
        raise TurnoutError(f"expected NAME=VALUE, got {text!r}")
    k, v = text.split("=", 1)
    return k, conv(v)


def register(sub: Any) -> None:
    r = sub.add_parser("run", help="run a model on random (or given) inputs")
    r.add_argument("model", help="path to a .onnx file, or a shipped model name (tiny-cnn)")
    r.add_argument("--providers", help="comma-separated provider names, in priority order")
    r.add_argument("--input", action="append", default=[], help="NAME=file.npy")
    r.add_argument("--dim", action="append", default=[], help="NAME=VALUE for a symbolic dim")
    r.add_argument("--repeat", type=int, default=10, help="number of timed runs")
    r.add_argument("--seed", type=int, default=0)
    r.set_defaults(func=_cmd_run)
