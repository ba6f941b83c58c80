"""Many threads on ONE session, per provider: every output must equal the single-thread result.

    python benchmarks/thread_stress.py --provider numba --model tiny_cnn --threads 8 --runs 1000
    python benchmarks/thread_stress.py --provider opencl --runs 150 --switch-interval 1e-5

Prints one JSON line (runs, mismatches, errors, wall time) and exits 1 on any mismatch or
error. Run it in a subprocess of its own: a crash in a device runtime (a segfault, an abort)
then ends this process with that signal instead of the caller's.
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib.resources import files
from typing import Any

import numpy as np

import turnout
from turnout.tools.concurrency import run_from_threads
from turnout_testbed import zoo

# model name -> (model bytes, input name, shapes of the feeds: batches of different sizes)
MODELS: dict[str, Any] = {
    "small_classifier": lambda: (
        zoo.small_classifier().SerializeToString(),
        "x",
        [(1, 32), (2, 32), (3, 32), (4, 32)],
    ),
    "mlp": lambda: (
        zoo.mlp(batch=4).SerializeToString(),
        "x",
        [(4, 784)],
    ),
    "tiny_cnn": lambda: (
        files("turnout.tools.models").joinpath("tiny_cnn.onnx").read_bytes(),
        "image",
        [(1, 1, 28, 28), (2, 1, 28, 28), (3, 1, 28, 28)],
    ),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--provider", default="cpu", help="provider name or alias (cpu, numba, ...)")
    ap.add_argument("--model", choices=sorted(MODELS), default="tiny_cnn")
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--runs", type=int, default=1000, help="runs per thread")
    ap.add_argument("--switch-interval", type=float, default=None)
    args = ap.parse_args(argv)
    data, name, shapes = MODELS[args.model]()
    opts = turnout.SessionOptions()
    opts.fallback = "allow"
    sess = turnout.InferenceSession(data, opts, providers=[args.provider])
    rng = np.random.default_rng(1)
    feeds = [
        {name: rng.standard_normal(shapes[i % len(shapes)]).astype(np.float32) * (i + 1)}
        for i in range(args.threads)
    ]
    result = run_from_threads(sess, feeds, args.threads, args.runs, args.switch_interval)
    counts = sess.partition_report().counts()
    print(
        json.dumps(
            {"provider": args.provider, "model": args.model, "placed": counts, **result.to_dict()}
        )
    )
    return 0 if result.clean else 1


if __name__ == "__main__":
    sys.exit(main())
