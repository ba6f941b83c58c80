"""`turnout optimize MODEL -O LEVEL -o OUT.onnx [--report]`: run the graph optimizer offline."""

from __future__ import annotations

import argparse
import json
from typing import Any

LEVELS = {"disable": 0, "basic": 1, "extended": 2, "all": 99}


def _cmd_optimize(args: argparse.Namespace) -> int:
    import onnx

    from turnout.engine.evaluate import optimize
    from turnout.graph.model import load_model
    from turnout.sdk.plugins import graph_passes
    from turnout.tools.cli.run import _resolve_model

    model = load_model(_resolve_model(args.model))
    optimized, report = optimize(model, LEVELS[args.level], extra_passes=graph_passes())
    if args.output:
        if args.external_data:
            onnx.save(
                optimized, args.output, save_as_external_data=True,
                all_tensors_to_one_file=True, location=args.external_data,
            )  # fmt: skip
        else:
            onnx.save(optimized, args.output)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    elif args.report or not args.output:
        print(report.format())
        for op in sorted(set(report.ops_before) | set(report.ops_after)):
            a, b = report.ops_before.get(op, 0), report.ops_after.get(op, 0)
            if a != b:
                print(f"  {op:40s} {a:5d} -> {b}")
    if args.output:
        print(f"wrote {args.output}")
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("optimize", help="optimize a model at an onnxruntime level and save it")
    p.add_argument("model", help="path to a .onnx file, or a shipped model name")
    p.add_argument("-O", "--level", choices=sorted(LEVELS), default="all")
    p.add_argument("-o", "--output", help="where to write the optimized model")
    p.add_argument("--report", action="store_true", help="print what each pass changed")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--external-data", help="save initializers to this file beside the output")
    p.set_defaults(func=_cmd_optimize)
