"""What only a GPU can show: device-resident values, pinned copies, DLPack, the stream option,
and the generated kernels compiled by CuPy and launched. These skip with the probe's reason on
machines without a usable NVIDIA GPU (every CI machine); scripts/gpu-check.sh runs them."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from turnout.tools.testing import provider_session

from .conftest import requires_gpu

pytestmark = requires_gpu


def _model() -> object:
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["a"]),
        helper.make_node("Gelu", ["a"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8]),
            helper.make_tensor_value_info("w", TensorProto.FLOAT, [8, 4]),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, [4]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def _feeds() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "x": rng.standard_normal((5, 8)).astype(np.float32),
        "w": rng.standard_normal((8, 4)).astype(np.float32),
        "b": rng.standard_normal(4).astype(np.float32),
    }


def test_runs_on_the_gpu_like_onnxruntime() -> None:
    import onnxruntime as ort

    sess = provider_session(_model(), "CUDAExecutionProvider")
    feeds = _feeds()
    (y,) = sess.run(None, feeds)
    (ref,) = ort.InferenceSession(_model().SerializeToString()).run(None, feeds)  # type: ignore[attr-defined]
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


def test_pinned_copies_and_dlpack() -> None:
    import cupy

    from turnout_cupy.factory import CuPyProviderFactory

    transfer = CuPyProviderFactory().data_transfer()
    host = np.arange(12, dtype=np.float32).reshape(3, 4)
    dev = transfer.to_device(host, transfer.device)
    assert isinstance(dev, cupy.ndarray) and transfer.is_device_value(dev)
    back = transfer.to_host(dev)
    np.testing.assert_array_equal(back, host)
    assert (
        cupy.cuda.is_pinned_memory(back.ctypes.data)
        if hasattr(cupy.cuda, "is_pinned_memory")
        else True
    )
    torch = pytest.importorskip("torch", reason="DLPack from torch needs torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    t = torch.arange(6, dtype=torch.float32, device="cuda")
    taken = transfer.to_device(t, transfer.device)
    assert taken.data.ptr == t.data_ptr()  # no copy
    assert torch.from_dlpack(taken).data_ptr() == t.data_ptr()


def test_out_of_range_gather_raises_on_the_gpu() -> None:
    from turnout.graph.errors import InvalidArgument

    node = helper.make_node("Gather", ["x", "i"], ["y"], name="g")
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [3]),
            helper.make_tensor_value_info("i", TensorProto.INT64, [1]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = provider_session(model, "cupy")
    with pytest.raises(InvalidArgument, match="Gather node 'g'"):
        sess.run(None, {"x": np.zeros(3, np.float32), "i": np.array([3])})


def test_io_binding_keeps_values_on_the_gpu() -> None:
    import cupy

    import turnout

    x = np.arange(5, dtype=np.float32)
    value = turnout.OrtValue.ortvalue_from_numpy(x, "cuda", 0)
    assert value.device_name() == "cuda"
    node = helper.make_node("Neg", ["x"], ["z"])
    graph = helper.make_graph(
        [node],
        "neg",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [5])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = provider_session(model, "CUDAExecutionProvider")
    binding = sess.io_binding()
    binding.bind_ortvalue_input("x", value)
    binding.bind_output("z", "cuda", 0)
    sess.run_with_iobinding(binding)
    (out,) = binding.get_outputs()
    assert out.device_name() == "cuda"
    np.testing.assert_array_equal(out.numpy(), -x)
    _ = cupy  # the bound output is a CuPy array on the device until .numpy()


def test_copy_tensors_on_the_cupy_sync_stream() -> None:
    import turnout

    (ep_device,) = [d for d in turnout.get_ep_devices() if d.ep_name == "CuPyExecutionProvider"][:1]
    stream = ep_device.create_sync_stream()
    assert stream.get_handle() != 0
    x = np.arange(8, dtype=np.float32)
    src = [turnout.OrtValue.ortvalue_from_numpy(x)]
    dst = [turnout.OrtValue.ortvalue_from_shape_and_type([8], np.float32, "cuda")]
    turnout.copy_tensors(src, dst, stream)
    np.testing.assert_array_equal(dst[0].numpy(), x)
