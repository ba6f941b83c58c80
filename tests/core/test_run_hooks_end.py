"""A provider whose run end raises (a device's failed synchronize) does not leave the run's
other providers inside it: the error reaches the caller, and later runs start afresh."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import onnx
import pytest
from onnx import helper

import turnout
from turnout.graph.errors import EPFail
from turnout.sdk import blas_threads, devices, plugins
from turnout.sdk.provider import ExecutionProvider
from turnout.tools.testing import float_graph_model
from turnout_testbed.fake_device import FakeDeviceProviderFactory


@pytest.fixture
def fake() -> Iterator[FakeDeviceProviderFactory]:
    factory = FakeDeviceProviderFactory(ops=("Relu",))
    turnout.register_provider(factory)
    devices.clear_cache()
    try:
        yield factory
    finally:
        plugins.registry.unregister(factory.name)
        devices.clear_cache()


def _relu_then_sigmoid() -> onnx.ModelProto:
    """Relu on the fake device, Sigmoid on the CPU provider: both providers' hooks run."""
    return float_graph_model(
        [
            helper.make_node("Relu", ["x0"], ["a"], name="relu"),
            helper.make_node("Sigmoid", ["a"], ["y"], name="sigmoid"),
        ],
        ["y"],
    )


def test_a_failed_run_end_still_ends_the_other_providers_run(
    fake: FakeDeviceProviderFactory,
) -> None:
    sess = turnout.InferenceSession(
        _relu_then_sigmoid(), providers=[fake.name, "CPUExecutionProvider"]
    )
    sess.disable_fallback()  # the error itself, not a retry on the CPU provider
    providers = sess._engine.run_providers
    assert {p.name for p in providers} == {fake.name, "CPUExecutionProvider"}
    ended: list[str] = []

    def ending(provider: ExecutionProvider) -> None:
        real = provider.on_run_end

        def end() -> None:  # the first provider to end fails, as a device's synchronize may
            ended.append(provider.name)
            real()
            if len(ended) == 1:
                raise EPFail(f"{provider.name}'s stream failed to synchronize")

        provider.on_run_end = end  # type: ignore[method-assign]

    for provider in providers:
        ending(provider)
    x = np.array([-1, 2, -3, 4], np.float32)
    with pytest.raises(EPFail, match="synchronize"):
        sess.run(None, {"x0": x})
    assert sorted(ended) == sorted(p.name for p in providers)
    assert blas_threads._RUN.depth == 0  # the CPU provider's BLAS run is not left open
    (y,) = sess.run(None, {"x0": x})  # a later run starts and ends as usual
    np.testing.assert_allclose(y, 1 / (1 + np.exp(-np.maximum(x, 0))), rtol=1e-6)
    assert blas_threads._RUN.depth == 0
