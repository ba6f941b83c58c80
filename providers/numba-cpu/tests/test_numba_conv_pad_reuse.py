"""numba Conv keeps the padded image's buffer between runs (kernels/conv.py, kernels/im2col.py).

The padding is zeroed once, when the buffer is made; later runs copy only the input's positions.
These tests run one session many times, on images of very different magnitudes, from one
thread and from several at once, with bands forced so that every padded read layout is used,
and compare each run with onnx.reference: a padding value left over from another image, or a
buffer two runs write at once, shows as a wrong output.
"""

from __future__ import annotations

import threading
import zlib
from typing import Any

import numpy as np
import pytest
from onnx import helper

from turnout.tools.testing import one_node_model, provider_session, run_reference
from turnout_numba.kernels import conv as conv_mod

GEOMETRIES: list[tuple[str, tuple[int, ...], int, tuple[int, ...], dict[str, Any]]] = [
    # (what, x shape, M, kernel, attributes): layouts that read a padded image
    ("flat same 3x3", (1, 5, 11, 7), 6, (3, 3), {"pads": [1, 1, 1, 1]}),
    ("padded stride 2", (2, 3, 15, 13), 8, (3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    ("padded stride 3", (1, 3, 17, 19), 4, (3, 3), {"pads": [1, 2, 0, 1], "strides": [3, 3]}),
    ("padded dilated", (1, 4, 12, 13), 3, (3, 3), {"pads": [2, 2, 2, 2], "dilations": [2, 2]}),
    # 1-D: one output row, so one band, padded inline (no kept buffer): checked all the same
    ("1-D stride 2", (1, 4, 41), 3, (3,), {"pads": [1, 1], "strides": [2]}),
]

pytestmark = pytest.mark.usefixtures("conv_kernel_paths")


def _case(what: str, shape: tuple[int, ...], m: int, kernel: tuple[int, ...], attrs: Any) -> Any:
    rng = np.random.default_rng(zlib.crc32(what.encode()))
    w = rng.standard_normal((m, shape[1], *kernel)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)
    x0 = np.zeros(shape, np.float32)
    sess = provider_session(one_node_model(node, [x0, w, b], 17), "NumbaExecutionProvider")
    assert [a.source for a in sess.partition_report().assignments] == ["numba"]
    # images of very different magnitudes: a stale padding value would stand out
    images = [
        (rng.standard_normal(shape) * scale).astype(np.float32) for scale in (1e6, 1.0, 1e-3, 1e4)
    ]
    wants = [run_reference(node, [v.astype(np.float64) for v in (x, w, b)], 17)[0] for x in images]
    return sess, w, b, images, wants


def _check(got: Any, want: Any) -> None:
    scale = float(np.abs(want).max())
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * scale)


@pytest.mark.parametrize(
    "what, shape, m, kernel, attrs", GEOMETRIES, ids=[g[0] for g in GEOMETRIES]
)
def test_padded_buffer_reused_across_runs(
    monkeypatch: pytest.MonkeyPatch,
    what: str,
    shape: tuple[int, ...],
    m: int,
    kernel: tuple[int, ...],
    attrs: dict[str, Any],
) -> None:
    monkeypatch.setattr(conv_mod, "tile_rows", lambda *_: 3)  # several bands: padded once
    sess, w, b, images, wants = _case(what, shape, m, kernel, attrs)
    for _ in range(2):
        for x, want in zip(images, wants):
            _check(sess.run(None, {"x": x, "w": w, "b": b})[0], want)


@pytest.mark.parametrize(
    "what, shape, m, kernel, attrs", GEOMETRIES[:2], ids=[g[0] for g in GEOMETRIES[:2]]
)
def test_padded_buffer_concurrent_runs(
    monkeypatch: pytest.MonkeyPatch,
    what: str,
    shape: tuple[int, ...],
    m: int,
    kernel: tuple[int, ...],
    attrs: dict[str, Any],
) -> None:
    monkeypatch.setattr(conv_mod, "tile_rows", lambda *_: 3)
    sess, w, b, images, wants = _case(what, shape, m, kernel, attrs)
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            for i in range(40):
                j = (k + i) % len(images)
                _check(sess.run(None, {"x": images[j], "w": w, "b": b})[0], wants[j])
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
