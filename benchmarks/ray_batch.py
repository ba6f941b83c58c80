"""Batch scoring on Ray against a plain loop over one session (see docs/batch.md).

    python -m benchmarks.ray_batch [--rows 100000] [--images 10000] [--workers 1,2] [--kill]

For the MLP (a Parquet file of `--rows` rows) and the tiny CNN (a folder of `--images` PNG
files): the plain loop's rows/s (one session, data already in memory, one thread and the
machine's default), then `turnout.tools.ray.run_batch` with each worker count on an embedded
local Ray (files in, Parquet out): time, rows/s, time to the first rows, Ray's startup. Every
run's output must equal the one-thread loop's bit for bit. `--kill` adds an MLP run whose worker
process is SIGKILLed part way; its output must still hold every row exactly once.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchmarks import reexec_clean


def _loop(model: str, feeds: Mapping[str, Any], size: int, threads: int) -> tuple[Any, float]:
    """One session over all rows in calls of `size` (the last padded, as a batch run pads):
    (outputs, seconds of the runs alone)."""
    import numpy as np

    from turnout import InferenceSession, SessionOptions

    options = SessionOptions()
    options.intra_op_num_threads = threads
    session = InferenceSession(model, options)
    rows = len(next(iter(feeds.values())))
    chunks = []
    for start in range(0, rows, size):
        chunk = {}
        for name, values in feeds.items():
            piece = values[start : start + size]
            chunk[name] = np.concatenate([piece, np.repeat(piece[-1:], size - len(piece), 0)])
        chunks.append((chunk, min(size, rows - start)))
    session.run(None, chunks[0][0])  # warm-up
    began = time.perf_counter()
    parts = [session.run(None, chunk)[0][:n] for chunk, n in chunks]
    return np.concatenate(parts), time.perf_counter() - began


def _kill_once_class() -> type:
    """A SessionPredictor that SIGKILLs its own process on the first batch past `at_row`, once
    (a marker file remembers); built here so that this module imports without Ray."""
    from turnout.tools.ray import SessionPredictor

    class KillOnce(SessionPredictor):
        def __init__(self, model: Any, *, marker: str, at_row: int, **kwargs: Any) -> None:
            super().__init__(model, **kwargs)
            self.marker, self.at_row = marker, at_row

        def __call__(self, batch: Mapping[str, Any]) -> dict[str, Any]:
            if batch["row"][-1] >= self.at_row and not os.path.exists(self.marker):
                Path(self.marker).write_text(str(os.getpid()))
                os.kill(os.getpid(), signal.SIGKILL)
            return super().__call__(batch)

    return KillOnce


def _read_column(path: Path, name: str) -> Any:
    import pyarrow.parquet as pq

    column = pq.read_table(path, columns=[name]).column(name).combine_chunks()
    return column.to_numpy_ndarray() if hasattr(column, "to_numpy_ndarray") else column.to_numpy()


def _workers(summary: Any) -> str:
    """Each worker's rows and its rows/s while its session ran them."""
    return "; ".join(
        f"{w.rows:,} at {w.rows / w.busy_seconds:,.0f}/s"
        for w in sorted(summary.per_worker.values(), key=lambda w: -w.rows)
    )


def _batch_runs(
    label: str,
    model: str,
    source: Path,
    output_name: str,
    expected: Any,
    loop_seconds: float,
    args: argparse.Namespace,
    batch_size: int,
    tmp: Path,
) -> list[str]:
    import numpy as np

    from turnout.tools.ray import run_batch

    rows = len(expected)
    lines = []
    for workers in args.workers:
        out = tmp / f"{label}-{workers}.parquet"
        s = run_batch(model, source, out, workers=workers, batch_size=batch_size, progress=False)
        same = np.array_equal(_read_column(out, output_name), expected)
        lines.append(
            f"| {label} | Ray, {workers} worker{'s' if workers > 1 else ''} | {s.seconds:.2f} "
            f"| {rows / s.seconds:,.0f} | {_workers(s)} | {s.first_rows_seconds:.2f} "
            f"| {s.startup_seconds:.2f} | {s.seconds / loop_seconds:.1f}x "
            f"| {'yes' if same else 'NO'} |"
        )
        print(lines[-1], flush=True)
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000, help="MLP rows (Parquet)")
    ap.add_argument("--images", type=int, default=10_000, help="tiny CNN images (PNG folder)")
    ap.add_argument("--workers", default="1,2", help="worker counts to run")
    ap.add_argument("--kill", action="store_true", help="add a run with a worker killed")
    args = ap.parse_args(argv)
    args.workers = [int(w) for w in args.workers.split(",")]

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image

    from turnout.tools.models import shipped_model
    from turnout.tools.ray.batching import InputSpec
    from turnout.tools.ray.readers import load_image
    from turnout_testbed.zoo import mlp

    header = [
        "| model | how | time (s) | rows/s | each worker: rows, rows/s while busy "
        "| first rows (s) | Ray startup (s) | vs loop, 1 thread | identical |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    print("\n".join(header), flush=True)
    lines = list(header)
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        rng = np.random.default_rng(0)

        model = str(tmp / "mlp.onnx")
        Path(model).write_bytes(mlp(batch=64).SerializeToString())
        x = rng.random((args.rows, 784), dtype=np.float32)
        source = tmp / "mlp.parquet"
        column = pa.FixedSizeListArray.from_arrays(x.ravel(), 784)
        pq.write_table(pa.table({"x": column}), source, row_group_size=10_000)
        expected, one = _loop(model, {"x": x}, 64, 1)
        _, default = _loop(model, {"x": x}, 64, 0)
        for how, seconds in (("loop, 1 thread", one), ("loop, default threads", default)):
            lines.append(
                f"| MLP | {how} | {seconds:.2f} | {args.rows / seconds:,.0f} | | | | "
                f"{seconds / one:.1f}x | |"
            )
            print(lines[-1], flush=True)
        lines += _batch_runs("MLP", model, source, "logits", expected, one, args, 512, tmp)
        if args.kill:
            lines.append(_kill_run(model, source, expected, tmp))
            print(lines[-1], flush=True)

        cnn = str(shipped_model("tiny_cnn"))
        folder = tmp / "images"
        folder.mkdir()
        pixels = rng.integers(0, 256, (args.images, 28, 28), dtype=np.uint8)
        for i, p in enumerate(pixels):
            Image.fromarray(p).save(folder / f"{i:06}.png")
        spec = InputSpec("image", np.dtype(np.float32), ("batch", 1, 28, 28))
        images = np.stack([load_image(p, spec) for p in sorted(folder.iterdir())])
        expected, one = _loop(cnn, {"image": images}, 128, 1)
        _, default = _loop(cnn, {"image": images}, 128, 0)
        for how, seconds in (("loop, 1 thread", one), ("loop, default threads", default)):
            lines.append(
                f"| tiny CNN | {how} | {seconds:.2f} | {args.images / seconds:,.0f} | | | | "
                f"{seconds / one:.1f}x | |"
            )
            print(lines[-1], flush=True)
        lines += _batch_runs(
            "tiny CNN", cnn, folder, "probabilities", expected, one, args, 128, tmp
        )
    print("\n" + "\n".join(lines))
    return 0


def _kill_run(model: str, source: Path, expected: Any, tmp: Path) -> str:
    """Two workers, one SIGKILLed at the middle row; the output must hold every row once."""
    import numpy as np
    import ray.cloudpickle

    from turnout.tools.ray import run_batch

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    rows = len(expected)
    marker = tmp / "killed"
    out = tmp / "mlp-killed.parquet"
    kill_once = _kill_once_class()
    began = time.perf_counter()
    s = run_batch(
        model,
        source,
        out,
        workers=2,
        batch_size=512,
        progress=False,
        predictor=kill_once,
        predictor_kwargs={"marker": str(marker), "at_row": rows // 2},
    )
    ids = _read_column(out, "row")
    once = len(ids) == rows and np.array_equal(np.sort(ids), np.arange(rows))
    same = np.array_equal(_read_column(out, "logits"), expected)
    assert marker.exists(), f"no worker was killed ({time.perf_counter() - began:.1f} s)"
    return (
        f"| MLP | Ray, 2 workers, one killed at row {rows // 2} | {s.seconds:.2f} "
        f"| {rows / s.seconds:,.0f} | {_workers(s)} | {s.first_rows_seconds:.2f} "
        f"| {s.startup_seconds:.2f} | | {'yes' if same else 'NO'}, every row once: "
        f"{'yes' if once else 'NO'} |"
    )


if __name__ == "__main__":
    reexec_clean(["-m", "benchmarks.ray_batch", *sys.argv[1:]])
    sys.exit(main())
