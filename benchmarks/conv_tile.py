"""The numba provider's register-tile SGEMM (`turnout_numba.kernels.sgemm_tile`) against
numpy's OpenBLAS, on the conv products of the zoo models.

    PYTHONPATH=. python -m benchmarks.conv_tile [products|shifts|convs|models] [--models a,b]

- `products`: each distinct (M output channels a group, K = C/group*KH*KW, N = the band of
  output pixels the 1-thread conv multiplies at once) of the models' im2col and pointwise
  convs, as the tile and as `cblas.gemm_call` (1 thread), in GMAC/s;
- `shifts`: the stride-1 convs' shifted products (`conv_shift`), one band each: a GEMM per tap
  with beta 1 against one product over all the taps on the tile, in GMAC/s;
- `convs`: each distinct conv as a one-node session (`--threads`, 1 by default;
  CPUExecutionProvider with turnout-numba installed), the tile rule as shipped against BLAS
  everywhere (`conv.TILE_MAX_K = 0`), CPU time per run;
- `models`: whole models the same way.

Timings are CPU time (`time.process_time`; `--clock wall` for wall time), the two sides
interleaved in rounds and the best round kept (other processes share the machine). BLAS runs
on one thread where threadpoolctl is installed (else set OPENBLAS_NUM_THREADS=1).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import helper, shape_inference

from benchmarks import zoo

__all__ = ["conv_shapes", "main"]

MODELS = ("squeezenet", "resnet18_like", "resnet50", "yolo_det_like", "text_cnn_like",
          "crnn_ocr_like", "densenet121", "inception_v2", "shufflenet")  # fmt: skip


def conv_shapes(name: str) -> list[dict[str, Any]]:
    """The distinct Conv nodes of zoo model `name`: input, weight and output shapes,
    attributes, whether there is a bias, and how many nodes share them."""
    model = shape_inference.infer_shapes(zoo.get(name).build())
    dims: dict[str, list[int]] = {}
    for v in [*model.graph.value_info, *model.graph.input, *model.graph.output]:
        shape = v.type.tensor_type.shape.dim
        dims[v.name] = [d.dim_value if d.HasField("dim_value") else 1 for d in shape]
    weights = {i.name: list(i.dims) for i in model.graph.initializer}
    seen: dict[str, dict[str, Any]] = {}
    for node in model.graph.node:
        if node.op_type != "Conv":
            continue
        x, w = dims.get(node.input[0]), weights.get(node.input[1]) or dims.get(node.input[1])
        if x is None or w is None:
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        attrs.pop("kernel_shape", None)
        attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in attrs.items()}
        bias = len(node.input) > 2 and bool(node.input[2])
        case = {"x": x, "w": w, "attrs": attrs, "bias": bias}
        key = repr(case)
        case["y"] = dims.get(node.output[0], x)
        if key in seen:
            seen[key]["count"] += 1
        else:
            seen[key] = {**case, "count": 1}
    return list(seen.values())


CLOCK: Callable[[], float] = time.process_time
"""What `_best` times: CPU time (`--clock cpu`, the default) or wall time (`--clock wall`,
for the 2-thread sessions, whose CPU time also counts the workers' waits)."""


def _best(fns: list[Callable[[], None]], rounds: int) -> list[float]:
    """The least `CLOCK` time of each function over `rounds` interleaved rounds."""
    best = [float("inf")] * len(fns)
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            t = CLOCK()
            fn()
            best[i] = min(best[i], CLOCK() - t)
    return best


def _limit_blas() -> None:
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return
    threadpool_limits(1)


def products(names: list[str], rounds: int, threads: int = 1) -> None:
    """The product table: tile against OpenBLAS in GMAC/s (one thread: `threads` unused)."""
    import numba

    from turnout_numba.cblas import find_gemm, gemm_call
    from turnout_numba.kernels import sgemm_tile
    from turnout_numba.kernels.im2col import tile_rows

    gemm = find_gemm(np.float32)
    if gemm is None or not sgemm_tile.AVAILABLE:
        raise SystemExit("needs numpy's OpenBLAS cblas_sgemm and a host with the tile")
    _limit_blas()

    @numba.njit
    def tile(a: Any, b: Any, c: Any, reps: int) -> None:  # pragma: no cover - numba
        m, k = a.shape
        n = b.shape[1]
        for _ in range(reps):
            a.turnout_sgemm(k, b, n, c, n, m, n, k)

    @numba.njit
    def blas(
        a: Any, b: Any, c: Any, reps: int, address: int, ilp64: bool
    ) -> None:  # pragma: no cover
        m, k = a.shape
        n = b.shape[1]
        for _ in range(reps):
            gemm_call(address, ilp64, m, n, k, a, k, b, n, c, n, 0.0)

    rng = np.random.default_rng(0)
    done: set[tuple[int, int, int]] = set()
    print("| model | M | K | N | OpenBLAS GMAC/s | tile GMAC/s | tile / BLAS |")
    print("|---|---|---|---|---|---|---|")
    for name in names:
        for case in conv_shapes(name):
            w, group = case["w"], int(case["attrs"].get("group", 1))
            mg, k = w[0] // group, int(np.prod(w[1:]))
            if w[1] == 1 and mg <= 4:
                continue  # depthwise: its own kernel, no product
            out = case["y"][2:]
            ow, oh = out[-1], (out[0] if len(out) == 2 else 1)
            n = tile_rows((k + w[0]) * 4, ow, oh) * ow
            if (mg, k, n) in done:
                continue
            done.add((mg, k, n))
            a = rng.standard_normal((mg, k), dtype=np.float32)
            b = rng.standard_normal((k, n), dtype=np.float32)
            c = np.empty((mg, n), np.float32)
            reps = max(1, int(3e7 // (mg * n * k)))
            tile(a, b, c, 1)
            blas(a, b, c, 1, gemm.address, gemm.ilp64)
            t_blas, t_tile = _best(
                [lambda: blas(a, b, c, reps, gemm.address, gemm.ilp64),  # noqa: B023
                 lambda: tile(a, b, c, reps)], rounds,  # noqa: B023
            )  # fmt: skip
            macs = mg * n * k * reps / 1e9
            print(f"| {name} | {mg} | {k} | {n} | {macs / t_blas:.1f} | {macs / t_tile:.1f} "
                  f"| {t_blas / t_tile:.2f} |")  # fmt: skip


def shifts(names: list[str], rounds: int, threads: int = 1) -> None:
    """The shifted-product table (`conv_shift`): each distinct stride-1 conv the models run as
    shifted products, one band of `shift_rows` output rows (Wp wide) at 1 thread, as one GEMM
    per tap accumulating with beta 1 (OpenBLAS, what the BLAS kernel runs) and as one product
    over all the taps on the tile (`turnout_sgemm_rows`), in GMAC/s of the band's products
    (padded columns included)."""
    import numba

    from turnout_numba.cblas import find_gemm, gemm_call
    from turnout_numba.kernels import conv, sgemm_tile
    from turnout_numba.kernels.conv_shift import shift_rows

    gemm = find_gemm(np.float32)
    if gemm is None or not sgemm_tile.AVAILABLE:
        raise SystemExit("needs numpy's OpenBLAS cblas_sgemm and a host with the tile")
    _limit_blas()

    @numba.njit
    def taps(
        wt: Any, xp: Any, acc: Any, n: int, wp: int, reps: int, address: int, ilp64: bool
    ) -> None:  # pragma: no cover - numba
        kh, kw, m, c = wt.shape
        for _ in range(reps):
            beta = 0.0
            for ki in range(kh):
                for kj in range(kw):
                    off = ki * wp + kj
                    gemm_call(address, ilp64, m, n, c, wt[ki, kj], c, xp[:, off:], xp.shape[1],
                              acc, n, beta)  # fmt: skip
                    beta = 1.0

    @numba.njit
    def tile(w2: Any, xp: Any, rows: Any, acc: Any, n: int, reps: int) -> None:  # pragma: no cover
        m, k = w2.shape
        for _ in range(reps):
            w2.turnout_sgemm_rows(k, xp, rows, 0, acc, n, m, n, k)

    rng = np.random.default_rng(0)
    done: set[tuple[int, ...]] = set()
    print("| model | C | M | out | rows x Wp | OpenBLAS GMAC/s | tile GMAC/s | tile / BLAS |")
    print("|---|---|---|---|---|---|---|---|")
    for name in names:
        for case in conv_shapes(name):
            w, attrs = case["w"], case["attrs"]
            if len(w) != 4 or w[2:] == [1, 1] or any(s != 1 for s in attrs.get("strides", [1])):
                continue
            if any(d != 1 for d in attrs.get("dilations", [1])) or attrs.get("group", 1) != 1:
                continue
            oh, ow = case["y"][2:]
            wide = conv._tile_applies(np.dtype(np.float32), w[0], int(np.prod(w[1:])), 1 << 30)
            if not conv._shift_applies(w, 1, [1, 1], np.dtype(np.float32), ow, 1, wide):
                continue
            m, c, kh, kw = w
            wp = ow + kw - 1
            rows = shift_rows((c + m) * 4, wp, oh, 1)
            key = (m, c, kh, kw, rows, wp)
            if key in done:
                continue
            done.add(key)
            n = rows * wp
            length = (rows + kh - 1) * wp + kw - 1
            xp = rng.standard_normal((c, length), dtype=np.float32)
            wt = rng.standard_normal((kh, kw, m, c), dtype=np.float32)
            w2 = np.ascontiguousarray(wt.transpose(2, 3, 0, 1)).reshape(m, -1)
            ki, kj = np.indices((kh, kw))
            offs = (np.arange(c)[:, None] * length + (ki * wp + kj).ravel()).ravel()
            offs = offs.astype(np.int64)
            acc = np.empty((m, n), np.float32)
            reps = max(1, int(3e7 // (m * n * c * kh * kw)))
            taps(wt, xp, acc, n, wp, 1, gemm.address, gemm.ilp64)
            tile(w2, xp, offs, acc, n, 1)
            t_blas, t_tile = _best(
                [lambda: taps(wt, xp, acc, n, wp, reps, gemm.address, gemm.ilp64),  # noqa: B023
                 lambda: tile(w2, xp, offs, acc, n, reps)], rounds,  # noqa: B023
            )  # fmt: skip
            macs = m * n * c * kh * kw * reps / 1e9
            print(f"| {name} | {c} | {m} | {oh}x{ow} | {rows}x{wp} | {macs / t_blas:.1f} "
                  f"| {macs / t_tile:.1f} | {t_blas / t_tile:.2f} |")  # fmt: skip


def _session(model: onnx.ModelProto, tile_max_k: int | None, threads: int = 1) -> Any:
    """A `threads`-thread CPUExecutionProvider session (numba's kernels, compiled tier waited for)
    whose convs plan with `conv.TILE_MAX_K = tile_max_k` (None: as shipped), run once."""
    import turnout
    from turnout_numba.kernels import conv

    shipped = conv.TILE_MAX_K
    if tile_max_k is not None:
        conv.TILE_MAX_K = tile_max_k
    try:
        so = turnout.SessionOptions()
        so.intra_op_num_threads = threads
        so.add_session_config_entry("session.turnout.wait_for_compiled_tier", "1")
        sess = turnout.InferenceSession(
            model.SerializeToString(), so, providers=["CPUExecutionProvider"]
        )
        return sess
    finally:
        conv.TILE_MAX_K = shipped


def _ab(
    model: onnx.ModelProto, feeds: dict[str, Any], rounds: int, runs: int, threads: int
) -> tuple[float, float]:
    """(shipped, BLAS-only) CPU ms per run, interleaved."""
    from turnout_numba.kernels import conv

    shipped = conv.TILE_MAX_K
    sessions = []
    for limit in (None, 0):
        sess = _session(model, limit, threads)
        conv.TILE_MAX_K = shipped if limit is None else limit
        try:
            sess.run(None, feeds)  # plans at this rule
        finally:
            conv.TILE_MAX_K = shipped
        sessions.append(sess)

    def timed(sess: Any) -> Callable[[], None]:
        def go() -> None:
            for _ in range(runs):
                sess.run(None, feeds)

        return go

    best = _best([timed(s) for s in sessions], rounds)
    return best[0] * 1e3 / runs, best[1] * 1e3 / runs


def convs(names: list[str], rounds: int, threads: int) -> None:
    """One-node sessions: each distinct conv, shipped rule against BLAS only."""
    rng = np.random.default_rng(0)
    print("| model | X | W | attrs | BLAS ms | shipped ms | BLAS / shipped |")
    print("|---|---|---|---|---|---|---|")
    for name in names:
        for case in conv_shapes(name):
            x = rng.standard_normal(case["x"]).astype(np.float32)
            w = (rng.standard_normal(case["w"]) * 0.1).astype(np.float32)
            inits = [onnx.numpy_helper.from_array(w, "w")]
            ins = ["x", "w"]
            if case["bias"]:
                inits.append(onnx.numpy_helper.from_array(np.zeros(w.shape[0], np.float32), "b"))
                ins.append("b")
            node = helper.make_node("Conv", ins, ["y"], **case["attrs"])
            graph = helper.make_graph(
                [node], "conv",
                [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, list(x.shape))],
                [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)], inits,
            )  # fmt: skip
            model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
            model.ir_version = 8
            macs = w.size * x.shape[-1] * x.shape[-2] / 1e6
            runs = max(1, int(20 / max(macs, 0.01)))
            shipped, blas = _ab(model, {"x": x}, rounds, min(runs, 200), threads)
            attrs = ",".join(f"{k}={v}" for k, v in case["attrs"].items() if k != "pads")
            print(f"| {name} | {list(x.shape)} | {list(w.shape)} | {attrs} | {blas:.3f} "
                  f"| {shipped:.3f} | {blas / shipped:.2f} |")  # fmt: skip


def models(names: list[str], rounds: int, threads: int) -> None:
    """Whole models: shipped rule against BLAS only."""
    print("| model | BLAS ms | shipped ms | BLAS / shipped |")
    print("|---|---|---|---|")
    for name in names:
        model = zoo.get(name).build()
        feeds = zoo.model_feeds(name, model)
        shipped, blas = _ab(model, feeds, rounds, 3, threads)
        print(f"| {name} | {blas:.2f} | {shipped:.2f} | {blas / shipped:.2f} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.conv_tile", description=__doc__)
    parser.add_argument("what", choices=["products", "shifts", "convs", "models"], nargs="?",
                        default="products")  # fmt: skip
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--clock", choices=["cpu", "wall"], default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="sessions' intra_op_num_threads")
    args = parser.parse_args(argv)
    names = [n for n in args.models.split(",") if n]
    global CLOCK
    CLOCK = time.perf_counter if args.clock == "wall" else time.process_time
    {"products": products, "shifts": shifts, "convs": convs, "models": models}[args.what](
        names, args.rounds, args.threads
    )


if __name__ == "__main__":
    main()
