"""`turnout compile MODEL -o OUT.onnx --providers X[,Y]`: a compiled model (what
`ModelCompiler` writes), which loads without compiling anything."""

from __future__ import annotations

import argparse
import time
from typing import Any


def _cmd_compile(args: argparse.Namespace) -> int:
    from turnout.api.compiler import ModelCompiler, OrtCompileApiFlags
    from turnout.api.options import SessionOptions
    from turnout.tools.cli.run import _resolve_model

    options = SessionOptions()
    for name in [p.strip() for p in (args.providers or "").split(",") if p.strip()]:
        options.add_provider(name, {})
    flags = OrtCompileApiFlags.ERROR_IF_NO_NODES_COMPILED if args.require else 0
    start = time.perf_counter()
    compiler = ModelCompiler(
        options, str(_resolve_model(args.model)), embed_compiled_data_into_model=args.embed,
        flags=flags,
    )  # fmt: skip
    compiler.compile_to_file(args.output)
    print(f"wrote {args.output or 'the model path with _ctx.onnx'} in "
          f"{time.perf_counter() - start:.1f} s")  # fmt: skip
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("compile", help="write a compiled model that loads without compiling")
    p.add_argument("model", help="an .onnx file, or the name of a model shipped with turnout")
    p.add_argument("-o", "--output", help="the compiled model (default: MODEL_ctx.onnx)")
    p.add_argument("--providers", help="comma-separated providers (default: the CPU request)")
    p.add_argument("--embed", action="store_true", help="keep compiled blobs inside the model")
    p.add_argument("--require", action="store_true", help="fail when no provider compiled anything")
    p.set_defaults(func=_cmd_compile)
