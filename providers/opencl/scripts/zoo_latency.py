"""The light models and the benchmark zoo on OpenCL: outputs vs onnxruntime, median latency.

Light models (onnx package backend/test/data/light) get zeros as inputs, as
tests/core/test_model_suites.py does; zoo models (`turnout_testbed.zoo`) get seeded random
inputs. Each model runs with providers=["OpenCLExecutionProvider"] (fallback allowed), on the
CPU provider, and on the numba provider when `turnout_numba` imports; OpenCL outputs are
compared with onnxruntime at the node-test tolerances (rtol 1e-3, atol 1e-7).

    python scripts/zoo_latency.py [--repeat N] [--only REGEX] [--skip REGEX]
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import statistics
import sys
import time
import warnings
from typing import Any

import numpy as np
import onnx

RTOL, ATOL = 1e-3, 1e-7


def _models() -> list[tuple[str, onnx.ModelProto, str]]:
    from turnout_testbed import zoo

    out = []
    light = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    for p in sorted(glob.glob(os.path.join(light, "light_*.onnx"))):
        out.append((os.path.basename(p)[:-5], onnx.load(p), "zeros"))
    out.append(("zoo_mlp", zoo.mlp(), "random"))
    out.append(("zoo_bert_like", zoo.bert_like(layers=2), "random"))
    out.append(("zoo_resnet18_like", zoo.resnet18_like(), "random"))
    out.append(("zoo_tiny_ops_chain", zoo.tiny_ops_chain(), "random"))
    return out


def _feeds(model: onnx.ModelProto, kind: str) -> dict[str, np.ndarray]:
    from onnx import helper

    inits = {i.name for i in model.graph.initializer}
    rng = np.random.default_rng(0)
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else 1 for d in tt.shape.dim]
        dt = helper.tensor_dtype_to_np_dtype(tt.elem_type)
        if kind == "zeros":
            feeds[vi.name] = np.zeros(shape, dt)
        elif dt.kind in "iu":
            feeds[vi.name] = rng.integers(0, 2, size=shape).astype(dt)  # ids / masks
        else:
            feeds[vi.name] = rng.standard_normal(shape).astype(dt)
    return feeds


def _time(sess: Any, feeds: dict[str, np.ndarray], repeat: int) -> float:
    sess.run(None, feeds)  # warm-up
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--only", default=None, help="regex on model names")
    ap.add_argument("--skip", default=None, help="regex on model names to skip")
    a = ap.parse_args(argv)
    import onnxruntime as ort

    import turnout
    from turnout.tools.testing import assert_outputs_close

    try:
        import turnout_numba  # noqa: F401

        have_numba = True
    except Exception:
        have_numba = False
    warnings.simplefilter("ignore")
    hdr = "| model | matches ORT | max abs err | OpenCL ms | CPU ms | OpenCL/CPU |"
    hdr += " numba ms | OpenCL/numba | OpenCL nodes |" if have_numba else " OpenCL nodes |"
    print(hdr)
    print("|" + "---|" * (hdr.count("|") - 1))
    bad = 0
    for name, model, kind in _models():
        if (a.only and not re.search(a.only, name)) or (a.skip and re.search(a.skip, name)):
            continue
        data = model.SerializeToString()
        feeds = _feeds(model, kind)
        ref = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
        so = turnout.SessionOptions()
        so.fallback = "allow"
        ocl = turnout.InferenceSession(
            data, so, providers=["OpenCLExecutionProvider", "CPUExecutionProvider"]
        )
        got = ocl.run(None, feeds)
        err = max(
            float(np.max(np.abs(np.asarray(g, np.float64) - np.asarray(r, np.float64))))
            if np.asarray(r).size
            else 0.0
            for g, r in zip(got, ref)
        )
        try:
            assert_outputs_close(ref, got, RTOL, ATOL)
            ok = "yes"
        except AssertionError:
            ok = "NO"
            bad += 1
        asg = ocl.partition_report().assignments
        n_ocl = sum(1 for x in asg if x.provider == "OpenCLExecutionProvider")
        total = len(asg)
        t_ocl = _time(ocl, feeds, a.repeat)
        cpu = turnout.InferenceSession(data, providers=["CPUExecutionProvider"])
        t_cpu = _time(cpu, feeds, a.repeat)
        row = f"| {name} | {ok} | {err:.2e} | {t_ocl * 1e3:.1f} | {t_cpu * 1e3:.1f} |"
        row += f" {t_ocl / t_cpu:.2f} |"
        if have_numba:
            nb = turnout.InferenceSession(data, providers=["NumbaExecutionProvider"])
            t_nb = _time(nb, feeds, a.repeat)
            row += f" {t_nb * 1e3:.1f} | {t_ocl / t_nb:.2f} |"
        print(row + f" {n_ocl}/{total} |", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
