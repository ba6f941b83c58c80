"""OpenCL on contract v2: kernels allocate through the provider's pool and the plan frees dead
values, so a run reuses buffers (counted, not timed); the queue is the stream, copies are
enqueued without waiting and an event is waited for before the host reads them."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import turnout
from turnout.engine.provider_creation import create_provider
from turnout_opencl.factory import OpenCLProviderFactory
from turnout_opencl.runtime import OpenCLStream

AVAIL = OpenCLProviderFactory().probe()
pytestmark = pytest.mark.skipif(not AVAIL.ok, reason=f"no OpenCL device: {AVAIL.reason}")
OPENCL = "OpenCLExecutionProvider"
N = 32


def _matmul_chain(depth: int) -> tuple[onnx.ModelProto, list[np.ndarray]]:
    """x @ w0 @ w1 ... : `depth` same-sized intermediates, each dead after the next MatMul."""
    rng = np.random.default_rng(0)
    weights = [(rng.standard_normal((N, N)) / N).astype(np.float32) for _ in range(depth)]
    names = ["x"] + [f"t{i}" for i in range(depth - 1)] + ["y"]
    nodes = [
        helper.make_node("MatMul", [names[i], f"w{i}"], [names[i + 1]], name=f"mm{i}")
        for i in range(depth)
    ]
    inits = [numpy_helper.from_array(w, f"w{i}") for i, w in enumerate(weights)]
    g = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [N, N])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [N, N])],
        inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), weights


def _session(model: onnx.ModelProto) -> tuple[turnout.InferenceSession, Any]:
    sess = turnout.InferenceSession(model.SerializeToString(), providers=[OPENCL])
    (provider,) = [p for p in sess._engine.providers if p.name == OPENCL]
    return sess, provider


def test_a_run_reuses_freed_buffers_and_a_second_run_allocates_nothing() -> None:
    depth = 6
    model, weights = _matmul_chain(depth)
    sess, provider = _session(model)
    alloc = provider.allocator
    x = np.random.default_rng(1).standard_normal((N, N)).astype(np.float32)
    before = (alloc.requests, alloc.device_allocations)
    (y,) = sess.run(None, {"x": x})
    expected = x
    for w in weights:
        expected = expected @ w
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-5)
    requests = alloc.requests - before[0]
    made = alloc.device_allocations - before[1]
    # the upload and six MatMul outputs ask for buffers; each intermediate dies after the next
    # MatMul reads it, so later outputs take freed buffers of the same size
    assert requests >= depth + 1
    assert made < requests and alloc.hits > 0
    assert alloc.frees >= depth  # the upload and each dead intermediate went back
    mid = (alloc.requests, alloc.device_allocations)
    sess.run(None, {"x": x})
    assert alloc.requests > mid[0]
    assert alloc.device_allocations == mid[1]  # the second run is served by the pool


def test_the_queue_is_the_stream_and_copies_to_the_host_wait_on_an_event() -> None:
    model, weights = _matmul_chain(2)
    sess, provider = _session(model)
    assert isinstance(provider.stream, OpenCLStream)
    assert provider.stream.handle is provider.rt.queue
    assert provider.kernel_context().stream is provider.stream
    ops = [st.op_type for st in sess._engine.plan.steps]
    assert ops[-2:] == ["MemcpyToHost", "EventWait"]
    x = np.ones((N, N), np.float32)
    (y,) = sess.run(None, {"x": x})
    np.testing.assert_allclose(y, x @ weights[0] @ weights[1], rtol=1e-4, atol=1e-5)


def test_copy_tensors_on_the_stream_lands_after_the_event() -> None:
    provider = create_provider(OpenCLProviderFactory())
    stream, transfer = provider.stream, provider.data_transfer
    hosts = [np.arange(6, dtype=np.float32).reshape(2, 3) * k for k in (1, 2)]
    devs = [provider.allocator.empty(h.shape, h.dtype) for h in hosts]
    transfer.copy_tensors(list(zip(hosts, devs)), stream)
    back = [np.zeros_like(h) for h in hosts]
    transfer.copy_tensors(list(zip(devs, back)), stream)
    stream.record().wait()
    for h, b in zip(hosts, back):
        np.testing.assert_array_equal(b, h)
    assert transfer.batches == 2


def test_capi_copy_tensors_uses_the_opencl_sync_stream() -> None:
    (ep_device,) = [d for d in turnout.get_ep_devices() if d.ep_name == OPENCL][:1]
    stream = ep_device.create_sync_stream()
    assert stream.get_handle() != 0
    x = np.arange(8, dtype=np.float32)
    src = [turnout.OrtValue.ortvalue_from_numpy(x)]
    dst = [turnout.OrtValue.ortvalue_from_shape_and_type([8], np.float32, "opencl")]
    turnout.copy_tensors(src, dst, stream)
    np.testing.assert_array_equal(dst[0].numpy(), x)


def test_the_device_is_declared_once_by_the_factory() -> None:
    factory = OpenCLProviderFactory()
    provider = create_provider(factory)
    assert provider.name == factory.name
    assert provider.device == factory.device(0) == AVAIL.devices[0].device
    assert provider.allocator.device == provider.data_transfer.device == provider.device
    assert provider.stream is not None and provider.stream.device == provider.device
