"""`turnout batch MODEL INPUT OUTPUT`: score a Parquet file or a folder of `.npy` files or
images with a model on Ray (an embedded local Ray, or a cluster with --address); Parquet out."""

from __future__ import annotations

import argparse
from typing import Any

from turnout.tools.cli.run import _resolve_model


def _cmd_batch(args: argparse.Namespace) -> int:
    from turnout.tools.ray.job import run_batch

    summary = run_batch(
        _resolve_model(args.model),
        args.input,
        args.output,
        workers=args.workers,
        batch_size=args.batch_size,
        providers=args.providers.split(",") if args.providers else None,
        address=args.address,
        cpus_per_worker=args.cpus_per_worker,
        gpus_per_worker=args.gpus_per_worker,
        progress=not args.quiet,
    )
    print(f"wrote {args.output}")
    for line in summary.lines():
        print(line)
    return 0


def register(sub: Any) -> None:
    from turnout.tools.ray.predictor import DEFAULT_BATCH_SIZE

    b = sub.add_parser(
        "batch",
        help="score a Parquet file or a folder of .npy files or images on Ray; Parquet out",
    )
    b.add_argument("model", help="path to a .onnx file, or a shipped model name (tiny-cnn)")
    b.add_argument("input", help="a .parquet file, or a folder of .parquet, .npy or image files")
    b.add_argument("output", help="the .parquet file to write")
    b.add_argument("--workers", type=int, default=1, help="actors, each with one session")
    b.add_argument(
        "--batch-size",
        type=int,
        default=DEFAULT_BATCH_SIZE,
        help="rows per model call (a model with a fixed batch size uses its own)",
    )
    b.add_argument("--providers", help="comma-separated provider names, in priority order")
    b.add_argument("--address", help="join this Ray cluster (default: an embedded local Ray)")
    b.add_argument("--cpus-per-worker", type=float, default=1.0)
    b.add_argument(
        "--gpus-per-worker", type=float, default=0.0, help="GPU actors use the CuPy provider"
    )
    b.add_argument("--quiet", action="store_true", help="no Ray progress output")
    b.set_defaults(func=_cmd_batch)
