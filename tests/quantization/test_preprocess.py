"""quant_pre_process: BatchNormalization folded into Conv, same function, fewer Q/DQ pairs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx

import turnout
from turnout.tools.quantization import quant_pre_process, quantize_static


def test_folds_batch_norm_and_keeps_the_function(
    tmp_path: Path,
    tiny_cnn: onnx.ModelProto,
    make_batches: Callable[..., list[dict[str, np.ndarray]]],
) -> None:
    pre = quant_pre_process(tiny_cnn, tmp_path / "pre.onnx")
    assert "BatchNormalization" not in [n.op_type for n in pre.graph.node]
    assert onnx.load(tmp_path / "pre.onnx") == pre
    assert {v.name for v in pre.graph.value_info} >= {"r1", "p1"}  # inferred shapes kept
    feed = make_batches(tiny_cnn, 1)[0]
    ref = turnout.InferenceSession(tiny_cnn.SerializeToString()).run(None, feed)[0]
    out = turnout.InferenceSession(pre.SerializeToString()).run(None, feed)[0]
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-6)
    feeds = make_batches(tiny_cnn, 2)

    def pairs(model: onnx.ModelProto) -> int:
        quant = quantize_static(model, None, list(feeds))
        return [n.op_type for n in quant.graph.node].count("QuantizeLinear")

    assert pairs(pre) < pairs(tiny_cnn)
