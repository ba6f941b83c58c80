"""Fixtures the tests share: seeded random data and the kernel-versus-reference check.

`rng` (in the repository's root conftest, for every test tree) is seeded from the test's node
id. Data that parametrize lists need at import comes from a generator of its own with a fixed
seed, never from one that tests draw from.

`node` builds a node and `check` runs it with turnout's own CPU kernel and holds the outputs to
onnx.reference (`check(...)`) or to onnxruntime (`check.ort(...)`, where onnx.reference is
wrong: say why at the call). A module or test whose results need other defaults says so with
``pytest.mark.kernel_check(rtol=..., atol=...)``.

These fixtures serve `tests/` only; what providers' tests share belongs in `turnout.tools.testing`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper

from turnout.graph.errors import InvalidArgument
from turnout.tools.testing import (
    onnxruntime_exact_8bit,
    run_onnxruntime,
    run_own_kernel,
    run_reference,
)

Opsets = Mapping[str, int] | int
Runner = Callable[[onnx.NodeProto, Sequence[Any], Opsets], list[Any]]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "kernel_check(rtol=1e-5, atol=1e-6, scalars_ok=False): defaults of the `check` fixture",
    )
    config.addinivalue_line(
        "markers",
        "onnxruntime_exact_8bit: the test holds uint8 x int8 products to onnxruntime's; skipped"
        " where this host's onnxruntime does not compute them exactly",
    )


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip the tests marked `onnxruntime_exact_8bit` where onnxruntime is no oracle for 8-bit
    products: without VNNI, MLAS adds each pair of uint8 x int8 products in int16, which
    saturates (`turnout.tools.testing.onnxruntime_exact_8bit`). turnout's sums are exact there
    too; the tests against onnx.reference and the written-out formulas still run."""
    if item.get_closest_marker("onnxruntime_exact_8bit") and not onnxruntime_exact_8bit(
        np.uint8, np.int8
    ):
        pytest.skip(
            "this host's onnxruntime saturates uint8 x int8 products (MLAS without VNNI adds "
            "product pairs in int16): it is no oracle for them here"
        )


def make_node(op: str, inputs: list[str], n_out: int = 1, **attrs: Any) -> onnx.NodeProto:
    """Node `op` named `my_<op>` (errors must name it) with outputs y0, y1, ..."""
    return helper.make_node(op, inputs, [f"y{i}" for i in range(n_out)], name=f"my_{op}", **attrs)


@pytest.fixture
def node() -> Callable[..., onnx.NodeProto]:
    """`make_node`: `node("Gather", ["x", "i"], axis=1)`, `node("Split", ["x"], 2)`."""
    return make_node


def assert_same_outputs(
    expected: Sequence[Any],
    got: Sequence[Any],
    rtol: float,
    atol: float,
    scalars_ok: bool = False,
) -> None:
    """As many outputs as expected, each of the same kind, dtype and shape; numbers within
    rtol/atol compared in float64 (NaN equals NaN), strings and other objects exactly.

    A reference's numpy str array counts as the object array that ONNX strings are. A tensor
    output must be an ndarray, not a numpy scalar, unless `scalars_ok`.
    """
    assert len(got) == len(expected), f"{len(got)} outputs, expected {len(expected)}"
    for i, (e, g) in enumerate(zip(expected, got)):
        if e is None:
            assert g is None, f"output {i}: expected an empty optional, got {g!r}"
        elif isinstance(e, list):
            assert isinstance(g, list), f"output {i}: expected a sequence, got {type(g)}"
            assert_same_outputs(e, g, rtol, atol, scalars_ok)
        else:
            kinds = (np.ndarray, np.generic) if scalars_ok else np.ndarray
            assert isinstance(g, kinds), f"output {i}: got {type(g)}, not an array"
            if e.dtype.kind == "U":
                e = e.astype(object)
            assert (g.dtype, g.shape) == (e.dtype, e.shape), (
                f"output {i}: got {g.dtype}{list(g.shape)}, expected {e.dtype}{list(e.shape)}"
            )
            if e.dtype == object:
                np.testing.assert_array_equal(g, e, err_msg=f"output {i}")
            else:
                wide = np.complex128 if e.dtype.kind == "c" else np.float64
                np.testing.assert_allclose(
                    g.astype(wide), e.astype(wide), rtol=rtol, atol=atol, err_msg=f"output {i}"
                )


class KernelCheck:
    """Runs a node with turnout's own CPU kernel and asserts it matches a reference runtime.

    Call it with the node, one input per node input (or per non-empty input name) and the
    opset(s); it returns the own kernel's outputs for further asserts. `rtol`/`atol` given
    to a call replace the defaults for that call.
    """

    def __init__(
        self,
        rtol: float = 1e-5,
        atol: float = 1e-6,
        scalars_ok: bool = False,
        reference: Runner = run_reference,
    ) -> None:
        self.rtol, self.atol, self.scalars_ok, self.reference = rtol, atol, scalars_ok, reference

    @property
    def ort(self) -> KernelCheck:
        """The same check against onnxruntime's CPU provider."""
        return KernelCheck(self.rtol, self.atol, self.scalars_ok, run_onnxruntime)

    def __call__(
        self,
        node: onnx.NodeProto,
        inputs: Sequence[Any],
        opset: Opsets = 21,
        *,
        rtol: float | None = None,
        atol: float | None = None,
    ) -> list[Any]:
        with np.errstate(all="ignore"):  # the reference's own overflow is not under test
            expected = self.reference(node, inputs, opset)
        got = run_own_kernel(node, inputs, opset)
        rtol = self.rtol if rtol is None else rtol
        atol = self.atol if atol is None else atol
        assert_same_outputs(expected, got, rtol, atol, self.scalars_ok)
        return got

    @staticmethod
    def rejects(node: onnx.NodeProto, inputs: Sequence[Any], opset: Opsets = 21) -> None:
        """The own kernel raises InvalidArgument with a message that starts with the node name."""
        with pytest.raises(InvalidArgument, match=f"^{re.escape(node.name)}: "):
            run_own_kernel(node, inputs, opset)


@pytest.fixture
def check(request: pytest.FixtureRequest) -> KernelCheck:
    """A `KernelCheck` taking its defaults from the test's `kernel_check` mark, if any."""
    mark = request.node.get_closest_marker("kernel_check")
    return KernelCheck(**mark.kwargs) if mark else KernelCheck()


@pytest.fixture
def provider_on(request: pytest.FixtureRequest) -> Iterator[str]:
    """The provider named by the test's indirect parameter (CPU, numba, OpenCL, or CuPy's
    kernels on the emulated numpy backend, for tests that run one case on each provider),
    ready to run: skipped with the reason where it cannot run here; the emulated CuPy
    provider registered for the test."""
    name: str = request.param
    if name == "NumbaExecutionProvider":
        pytest.importorskip("turnout_numba", reason="turnout-numba is not installed")
    if name == "OpenCLExecutionProvider":
        factory = pytest.importorskip("turnout_opencl.factory", reason="no turnout-opencl")
        avail = factory.OpenCLProviderFactory().probe()
        if not avail.ok:
            pytest.skip(f"no OpenCL device: {avail.reason}")
    if name != "CuPyEmulatedExecutionProvider":
        yield name
        return
    from turnout.sdk.plugins import registry

    emulated = pytest.importorskip("turnout_cupy.emulated", reason="turnout-cupy not installed")
    registry.register(emulated.EmulatedFactory())
    try:
        yield name
    finally:
        registry.unregister(name)
