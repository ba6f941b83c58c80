"""The thin product (`kernels/thin_product.py`): products of at most `THIN_MAX_COLUMNS` columns
as dot products along K, alone against float64 numpy, and inside the conv band kernels (a conv
with a few output pixels, serial and threaded) against onnx.reference."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import helper

from turnout.tools.testing import one_node_model, provider_session, run_reference
from turnout_numba.kernels import conv as conv_mod
from turnout_numba.kernels.thin_product import ROWS, THIN_MAX_COLUMNS, thin_product


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("m", [1, ROWS - 1, ROWS, ROWS + 1, 3 * ROWS + 2])
@pytest.mark.parametrize("k", [1, 7, 130])
def test_thin_product_every_width(dt: Any, m: int, k: int) -> None:
    """Every width up to the limit (each mix of three-, two- and one-column blocks), with row
    counts around the row block, on strided views of B and of the output."""
    rng = np.random.default_rng(m * 1000 + k)
    w = rng.standard_normal((m, k)).astype(dt)
    for n in range(1, THIN_MAX_COLUMNS + 1):
        b = rng.standard_normal((k, n + 3)).astype(dt)[:, 1 : n + 1]
        frame = np.full((m + 2, n + 4), 7.0, dt)
        out = frame[1 : m + 1, 2 : n + 2]
        thin_product(w, b, out, dt(0))
        want = w.astype(np.float64) @ b.astype(np.float64)
        tol = 1e-5 if dt == np.float32 else 1e-12
        np.testing.assert_allclose(out, want, rtol=tol, atol=tol * max(1.0, np.abs(want).max()))
        untouched = frame.copy()
        untouched[1 : m + 1, 2 : n + 2] = 7.0
        assert (untouched == 7.0).all(), f"n={n}: wrote outside the output"


def test_thin_product_keeps_nonfinite_values() -> None:
    w = np.ones((5, 9), np.float32)
    b = np.ones((9, 3), np.float32)
    b[2, 0] = np.nan
    b[4, 2] = np.inf
    out = np.empty((5, 3), np.float32)
    thin_product(w, b, out, np.float32(0))
    assert np.isnan(out[:, 0]).all() and (out[:, 1] == 9).all() and np.isposinf(out[:, 2]).all()


# (what, x shape, M, group, kernel, attributes): outputs of 1 to 12 pixels
THIN_CONVS: list[tuple[str, tuple[int, ...], int, int, tuple[int, ...], dict[str, Any]]] = [
    ("STFT 3 frames", (1, 1, 576), 258, 1, (256,), {"strides": [128]}),
    ("1-D k3 to 3 pixels", (1, 129, 5), 128, 1, (3,), {}),
    ("1-D k3 padded to 2", (1, 128, 3), 64, 1, (3,), {"pads": [1, 0], "strides": [2]}),
    ("1-D to 1 pixel", (2, 64, 3), 64, 1, (3,), {}),
    ("pointwise 1 pixel", (1, 64, 1), 129, 1, (1,), {}),
    ("pointwise to 1 output", (1, 128, 1), 1, 1, (1,), {}),
    ("2-D 3x4 output", (1, 16, 5, 6), 33, 1, (3, 3), {}),
    ("2-D grouped 2x2", (2, 12, 4, 4), 10, 2, (3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    ("2-D pointwise 3x3 grouped", (1, 24, 3, 3), 12, 3, (1, 1), {}),
    ("12 pixels", (1, 8, 14), 19, 1, (3,), {}),
    ("13 pixels (BLAS)", (1, 8, 15), 19, 1, (3,), {}),
]


def _conv_check(
    x: np.ndarray, w: np.ndarray, b: np.ndarray, z: np.ndarray | None, threads: int, **attrs: Any
) -> None:
    names = ["x", "w", "b"] + (["z"] if z is not None else [])
    feeds = [x, w, b] + ([z] if z is not None else [])
    node = helper.make_node(
        "FusedConv", names, ["y"], domain="ai.turnout", activation="Relu", **attrs
    )
    sess = provider_session(
        one_node_model(node, feeds, 17), "NumbaExecutionProvider", intra_op_num_threads=threads
    )
    got = sess.run(None, dict(zip(names, feeds)))[0]
    ref = helper.make_node("Conv", names[:3], ["y"], **attrs)
    want = np.asarray(run_reference(ref, [v.astype(np.float64) for v in feeds[:3]], 17)[0])
    want = np.maximum(want + (0 if z is None else z), 0)
    assert got.dtype == x.dtype and got.shape == want.shape
    tol = 1e-4 if x.dtype == np.float32 else 1e-11
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(1.0, np.abs(want).max()))


@pytest.mark.parametrize(
    "path, dt",
    [("serial", np.float32), ("serial", np.float64), ("threaded bands", np.float32)],
    ids=["serial-float32", "serial-float64", "threaded-bands"],
)
@pytest.mark.parametrize(
    "what, shape, m, group, kernel, attrs", THIN_CONVS, ids=[c[0] for c in THIN_CONVS]
)
def test_thin_convs(
    request: pytest.FixtureRequest,
    path: str,
    dt: Any,
    what: str,
    shape: tuple[int, ...],
    m: int,
    group: int,
    kernel: tuple[int, ...],
    attrs: dict[str, Any],
) -> None:
    """At 1 thread these run as small convs: the serial band kernel's one call. With 2 threads
    and the band kernel forced (`conv_kernel_paths`), the parallel one, with a residual."""
    threads = 1
    rng = np.random.default_rng(len(what) * 31 + m)
    x = rng.standard_normal(shape).astype(dt)
    w = rng.standard_normal((m, shape[1] // group, *kernel)).astype(dt)
    b = rng.standard_normal(m).astype(dt)
    z = None
    if path == "threaded bands":
        request.getfixturevalue("conv_kernel_paths")
        assert conv_mod.FUSED_MIN_COLUMNS == 0
        threads = 2
        node = helper.make_node("Conv", ["x", "w"], ["y"], group=group, **attrs)
        z = rng.standard_normal(np.shape(run_reference(node, [x, w], 17)[0])).astype(dt)
    _conv_check(x, w, b, z, threads, group=group, **attrs)


def test_small_conv_of_one_image_follows_new_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    """The one-image run keeps the weights' view while the same weights come: fed weights
    that change between runs (and a bias that does) give each run's own answer."""
    made: list[Any] = []
    real = conv_mod._one_image_run

    def spy(*args: Any) -> Any:
        made.append(args)
        return real(*args)

    monkeypatch.setattr(conv_mod, "_one_image_run", spy)
    names = ["x", "w", "b"]
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 16, 4)).astype(np.float32)
    w = rng.standard_normal((24, 16, 3)).astype(np.float32)
    b = rng.standard_normal(24).astype(np.float32)
    node = helper.make_node("FusedConv", names, ["y"], domain="ai.turnout", activation="Relu")
    sess = provider_session(one_node_model(node, [x, w, b], 17), "NumbaExecutionProvider")
    ref = helper.make_node("Conv", names, ["y"])
    for _ in range(3):
        got = sess.run(None, {"x": x, "w": w, "b": b})[0]
        want = np.maximum(run_reference(ref, [x, w, b], 17)[0], 0)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        w = rng.standard_normal(w.shape).astype(np.float32)
        b = rng.standard_normal(b.shape).astype(np.float32)
    assert len(made) == 1  # one plan: the small conv of one image
