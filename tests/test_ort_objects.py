"""onnxruntime's object API on turnout's sessions, options, values and bindings, side by side
with onnxruntime 1.32 as the oracle: errors, session and options members, OrtValueVector,
DLPack, devices and sparse tensors."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import turnout as tn
from turnout.api.capi.onnxruntime_pybind11_state import InvalidArgument as CapiInvalidArgument

CPU = ["CPUExecutionProvider"]
X = np.arange(6, dtype=np.float32).reshape(2, 3)


def add_model(y_shape: list[Any] | None = None, optional_input: bool = False) -> bytes:
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
        helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape or ["N", 3]),
    ]
    if optional_input:
        opt = helper.make_tensor_value_info("o", TensorProto.FLOAT, [1])
        opt.type.CopyFrom(helper.make_optional_type_proto(opt.type))
        inputs.append(opt)
    g = helper.make_graph(
        [helper.make_node("Add", ["x", "y"], ["z"])],
        "g",
        inputs,
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3])],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def both(model: bytes, **kw: Any) -> tuple[Any, Any]:
    return tn.InferenceSession(model, providers=CPU, **kw), ort.InferenceSession(
        model, providers=CPU, **kw
    )


# -- errors as onnxruntime gives them -----------------------------------------------------------

BAD = {
    "missing": (None, {"y": X}),
    "missing_two_unknown_one": (None, {"q": X}),
    "nothing": (None, {}),
    "dtype": (None, {"x": X.astype(np.float64), "y": X}),
    "dtype_before_rank": (None, {"x": X[0].astype(np.float64), "y": X}),
    "string_dtype": (None, {"x": np.array([["a"] * 3] * 2), "y": X}),
    "rank": (None, {"x": X[0], "y": X}),
    "dims": (None, {"x": np.ones((3, 4), np.float32), "y": X}),
    "symbolic_dim_ok_other_bad": (None, {"x": X, "y": np.ones((5, 4), np.float32)}),
    "unknown_output": (["z", "w"], {"x": X, "y": X}),
    "unknown_input": (None, {"x": X, "y": X, "q": X}),
    "python_scalar": (None, {"x": 3.0, "y": X}),
    "numpy_scalar": (None, {"x": np.float32(1), "y": X}),
    "string": (None, {"x": "abc", "y": X}),
    "tuple": (None, {"x": (1.0, 2.0), "y": X}),
}


def _error(call: Any) -> BaseException:
    with pytest.raises(Exception) as info:
        call()
    return info.value


@pytest.mark.parametrize("case", list(BAD))
def test_feed_errors_read_as_onnxruntime_s(case: str) -> None:
    names, feed = BAD[case]
    sess, ref = both(add_model())
    ours = _error(lambda: sess.run(names, feed))
    theirs = _error(lambda: ref.run(names, feed))
    # turnout's detail, if any, follows ORT's text on a line of its own
    text = str(theirs)
    assert str(ours)[: len(text)] == text
    assert str(ours)[len(text) :][:1] in ("", "\n")
    # ORT's class (or a builtin base of it) catches ours, and ORT-named classes map across
    theirs_cls = type(theirs)
    if theirs_cls.__module__ == "builtins":
        assert isinstance(ours, theirs_cls)
    else:
        assert type(theirs).__name__ == "InvalidArgument"
        assert isinstance(ours, CapiInvalidArgument)


def test_missing_input_text_through_every_run_form() -> None:
    sess, ref = both(add_model())
    feeds_t = {"y": tn.OrtValue.ortvalue_from_numpy(X)}
    feeds_o = {"y": ort.OrtValue.ortvalue_from_numpy(X)}
    ours = _error(lambda: sess.run_with_ort_values(None, feeds_t))
    theirs = _error(lambda: ref.run_with_ort_values(None, feeds_o))
    assert (
        str(ours) == str(theirs) == "Required inputs (['x']) are missing from input feed (['y'])."
    )
    assert isinstance(ours, ValueError)


def test_optional_typed_input_may_be_left_out_as_in_onnxruntime() -> None:
    sess, ref = both(add_model(optional_input=True))
    feed = {"x": X, "y": X}
    np.testing.assert_array_equal(sess.run(None, feed)[0], ref.run(None, feed)[0])


# -- session members ----------------------------------------------------------------------------


def test_run_with_ortvaluevector_fills_fetches_as_onnxruntime() -> None:
    from onnxruntime.capi import _pybind_state as C

    from turnout.api.values import OrtValueVector

    sess, ref = both(add_model())
    results = []
    for s, vec_cls, ov, dev in (
        (sess, OrtValueVector, tn.OrtValue, tn.OrtDevice.make("cpu", 0)),
        (ref, C.OrtValueVector, ort.OrtValue, ort.OrtDevice.make("cpu", 0)._get_c_device()),
    ):
        feeds = vec_cls()
        for a in (X, X * 2):
            feeds.push_back(
                ov.ortvalue_from_numpy(a)._get_c_value() if s is ref else ov.ortvalue_from_numpy(a)
            )
        fetches = vec_cls()
        ro = (tn if s is sess else ort).RunOptions()
        s.run_with_ortvaluevector(ro, ["x", "y"], feeds, ["z"], fetches, [dev])
        assert len(fetches) == 1 and fetches.element_type_at(0) == TensorProto.FLOAT
        results.append(fetches[0].numpy())
    np.testing.assert_array_equal(*results)


def test_memory_infos_tuning_and_fallback_members() -> None:
    sess, ref = both(add_model())
    for ours, theirs in (
        (sess.get_input_memory_infos(), ref.get_input_memory_infos()),
        (sess.get_output_memory_infos(), ref.get_output_memory_infos()),
    ):
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            assert (a.name, a.device_id, int(a.mem_type), int(a.allocator_type)) == (
                b.name,
                b.device_id,
                int(b.mem_type),
                int(b.allocator_type),
            )
            assert int(a.device_mem_type) == int(b.device_mem_type)
            assert a.device_vendor_id == b.device_vendor_id
    assert sess.get_tuning_results() == ref.get_tuning_results() == []
    sess.set_tuning_results([])
    ref.set_tuning_results([])
    bad = [{"ep": "CPUExecutionProvider", "results": {}, "validators": {}}]
    with pytest.raises(RuntimeError, match="does not support TunableOp"):
        ref.set_tuning_results(bad, error_on_invalid=True)
    with pytest.raises(RuntimeError, match="does not support TunableOp"):
        sess.set_tuning_results(bad, error_on_invalid=True)
    for s in (sess, ref):
        with pytest.raises(RuntimeError, match="No options were provided"):
            s.set_ep_dynamic_options({})
        s.release_captured_graph()
        s.disable_fallback()
        assert s._enable_fallback is False
        s.enable_fallback()
        assert s._enable_fallback is True


def test_create_ortvalue_from_shape_and_type_like_onnxruntime() -> None:
    sess, ref = both(add_model())
    for elem in (np.float32, TensorProto.INT64):
        a = sess.create_ortvalue_from_shape_and_type([2, 3], elem, "cpu")
        b = ref.create_ortvalue_from_shape_and_type([2, 3], elem, "cpu")
        assert (a.data_type(), a.shape(), a.device_name()) == (
            b.data_type(),
            b.shape(),
            b.device_name(),
        )
        assert a.numpy().dtype == b.numpy().dtype  # onnxruntime leaves the memory uninitialized
    with pytest.raises(RuntimeError, match="allocator"):
        ref.create_ortvalue_from_shape_and_type([2], np.float32, "cuda")
    with pytest.raises(RuntimeError, match="allocator"):
        sess.create_ortvalue_from_shape_and_type([2], np.float32, "cuda")


# -- session options ----------------------------------------------------------------------------

W0 = np.ones((2, 3), np.float32)


def weight_model(tmp_path: Any) -> tuple[bytes, bytes]:
    """(model bytes whose W lives in external file w.bin, that file's bytes)."""
    import onnx
    from onnx import numpy_helper

    g = helper.make_graph(
        [helper.make_node("Add", ["x", "W"], ["z"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3])],
        initializer=[numpy_helper.from_array(W0, "W")],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.external_data_helper.convert_model_to_external_data(m, location="w.bin", size_threshold=0)
    onnx.save(m, str(tmp_path / "m.onnx"))
    raw = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False).SerializeToString()
    return raw, (tmp_path / "w.bin").read_bytes()


def _run_with(mod: Any, model: Any, setup: Any) -> Any:
    so = mod.SessionOptions()
    setup(so)
    return mod.InferenceSession(model, so, providers=CPU).run(None, {"x": X})[0]


def test_external_initializers_from_ortvalues_like_onnxruntime(tmp_path: Any) -> None:
    raw, _ = weight_model(tmp_path)
    w = np.full((2, 3), 7, np.float32)
    outs = [
        _run_with(
            mod,
            raw,
            lambda so, mod=mod: so.add_external_initializers(
                ["W"], [mod.OrtValue.ortvalue_from_numpy(w)]
            ),
        )
        for mod in (tn, ort)
    ]
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0], X + 7)
    for mod in (tn, ort):  # an unknown name is refused with Fail, in both
        with pytest.raises(Exception, match="Failed to find existing initializer with name Q") as e:
            _run_with(
                mod,
                raw,
                lambda so, mod=mod: so.add_external_initializers(
                    ["Q"], [mod.OrtValue.ortvalue_from_numpy(w)]
                ),
            )
        assert type(e.value).__name__ == "Fail"


def test_external_files_in_memory_like_onnxruntime(tmp_path: Any) -> None:
    raw, data = weight_model(tmp_path)
    other = np.full(6, 3, np.float32).tobytes()  # kept alive: onnxruntime does not copy it
    for buf, expect in ((data, X + 1), (other, X + 3)):
        for source in (raw, str(tmp_path / "m.onnx")):  # from the path, memory wins over disk
            outs = [
                _run_with(
                    mod,
                    source,
                    lambda so, buf=buf: so.add_external_initializers_from_files_in_memory(
                        ["w.bin"], [buf], [len(buf)]
                    ),
                )
                for mod in (tn, ort)
            ]
            np.testing.assert_array_equal(outs[0], outs[1])
            np.testing.assert_array_equal(outs[0], expect)
    for mod in (tn, ort):
        for names, buf, match in (
            (["other.bin"], data, "External file: w.bin not found from the table user provided"),
            (["w.bin"], data[:8], "out of bounds or can not be read in full"),
        ):
            with pytest.raises(Exception, match=match) as e:
                _run_with(
                    mod,
                    raw,
                    lambda so, names=names, buf=buf: (
                        so.add_external_initializers_from_files_in_memory(names, [buf], [len(buf)])
                    ),
                )
            assert type(e.value).__name__ == "Fail"


def test_load_cancellation_flag_and_other_options() -> None:
    for mod in (tn, ort):
        so = mod.SessionOptions()
        assert so.use_per_session_threads is True
        assert so.has_providers() is False
        so.set_load_cancellation_flag(True)
        with pytest.raises(Exception, match="MODEL_LOAD_CANCELED") as e:
            mod.InferenceSession(add_model(), so, providers=CPU)
        assert type(e.value).__name__ == "ModelLoadCanceled"
        so.set_load_cancellation_flag(False)
        mod.InferenceSession(add_model(), so, providers=CPU)
        so.add_provider("CPUExecutionProvider", {})
        assert so.has_providers() is True
        assert mod.InferenceSession(add_model(), so).get_providers() == CPU


# -- values -------------------------------------------------------------------------------------


def test_dlpack_is_zero_copy_with_numpy_both_ways() -> None:
    a = X.copy()
    for mod in (tn, ort):
        v = mod.OrtValue.ortvalue_from_numpy(a)
        assert v.__dlpack_device__() == (1, 0)
        view = np.from_dlpack(v)
        assert np.shares_memory(view, a)
        back = mod.OrtValue.from_dlpack(a)
        assert np.shares_memory(back.numpy(), a)
        from_capsule = mod.OrtValue.from_dlpack(a.__dlpack__())
        np.testing.assert_array_equal(from_capsule.numpy(), a)
        assert back.data_type() == "tensor(float)"
    b = np.array([True, False])
    assert tn.OrtValue.from_dlpack(b).data_type() == ort.OrtValue.from_dlpack(b).data_type()


def test_ortvaluevector_and_iobinding_vector() -> None:
    from turnout.api.io_binding import SessionIOBinding
    from turnout.api.values import OrtValueVector

    vec = OrtValueVector()
    vec.reserve(4)
    vec.push_back(tn.OrtValue.ortvalue_from_numpy(X))
    vec.push_back(X.__dlpack__())
    vec.push_back_batch([X], [X.ctypes.data], [np.float32], [[2, 3]], [tn.OrtDevice.make("cpu", 0)])
    vec.shrink_to_fit()
    assert len(vec) == 3 and [v.shape() for v in vec] == [[2, 3]] * 3
    assert np.shares_memory(vec[2].numpy(), X)
    assert [tn.OrtValue.from_dlpack(c).numpy().sum() for c in vec.to_dlpacks()] == [X.sum()] * 3
    np.testing.assert_array_equal(np.from_dlpack(tn.OrtValue.from_dlpack(vec.dlpack_at(0))), X)

    sess, ref = both(add_model())
    outs = []
    for s in (sess, ref):
        b = s.io_binding()
        b.bind_cpu_input("x", X)
        b.bind_cpu_input("y", X)
        b.bind_output("z")
        s.run_with_iobinding(b)
        got = b.get_outputs_as_ortvaluevector()
        assert len(got) == 1
        outs.append(got[0].numpy())
    np.testing.assert_array_equal(*outs)
    raw = SessionIOBinding(sess)
    raw.bind_input("x", X)
    raw.bind_input("y", X)
    raw.bind_output("z", tn.OrtDevice.make("cpu", 0))
    sess.run_with_iobinding(raw)
    assert isinstance(raw.get_outputs(), OrtValueVector)
    np.testing.assert_array_equal(raw.copy_outputs_to_cpu()[0], outs[1])


def test_ortdevice_and_memory_info_members() -> None:
    for name in ("cpu", "cuda", "gpu", "npu", "dml", "cann", "webgpu"):
        ours, theirs = tn.OrtDevice.make(name, 1), ort.OrtDevice.make(name, 1)
        assert (ours.device_type(), ours.device_id(), ours.device_vendor_id()) == (
            theirs.device_type(),
            theirs.device_id(),
            theirs.device_vendor_id(),
        )
        assert int(ours.device_mem_type()) == int(theirs.device_mem_type())
    for mod in (tn, ort):
        with pytest.raises(Exception, match="Unsupported device type: tpu"):
            mod.OrtDevice.make("tpu", 0)
    from onnxruntime.capi import _pybind_state as C

    for code in ("cpu", "cuda", "gpu", "fpga", "npu", "dml", "cann", "webgpu", "default_memory"):
        assert getattr(tn.OrtDevice, code)() == getattr(C.OrtDevice, code)()
    from turnout.api.ort_enums import OrtDeviceMemoryType, OrtMemoryInfoDeviceType

    info = tn.OrtMemoryInfo.create_v2(
        "Cpu", OrtMemoryInfoDeviceType.CPU, 0, 0, OrtDeviceMemoryType.DEFAULT, 0,
        tn.OrtAllocatorType.ORT_ARENA_ALLOCATOR,
    )  # fmt: skip
    ref = ort.OrtMemoryInfo.create_v2(
        "Cpu", C.OrtMemoryInfoDeviceType.CPU, 0, 0, C.OrtDeviceMemoryType.DEFAULT, 0,
        C.OrtAllocatorType.ORT_ARENA_ALLOCATOR,
    )  # fmt: skip
    assert (info.name, info.device_id, int(info.device_mem_type), info.device_vendor_id) == (
        ref.name,
        ref.device_id,
        int(ref.device_mem_type),
        ref.device_vendor_id,
    )


# -- sparse tensors -----------------------------------------------------------------------------


def test_sparse_csr_and_views_like_onnxruntime() -> None:
    vals = np.array([1, 2, 3], np.float32)
    inner, outer = np.array([0, 2, 1], np.int64), np.array([0, 2, 3], np.int64)
    ours = tn.SparseTensor.sparse_csr_from_numpy(
        [2, 3], vals, inner, outer, tn.OrtDevice.make("cpu", 0)
    )
    theirs = ort.SparseTensor.sparse_csr_from_numpy(
        [2, 3], vals, inner, outer, ort.OrtDevice.make("cpu", 0)
    )
    assert int(ours.format()) == int(theirs.format())
    assert ours.format().name == theirs.format().name == "ORT_SPARSE_CSRC"
    assert ours.dense_shape() == theirs.dense_shape()
    assert ours.data_type() == theirs.data_type()
    np.testing.assert_array_equal(ours.values(), theirs.values())
    np.testing.assert_array_equal(ours.as_csrc_view().inner(), theirs.as_csrc_view().inner())
    np.testing.assert_array_equal(ours.as_csrc_view().outer(), theirs.as_csrc_view().outer())
    assert not ours.values().flags.writeable and not theirs.values().flags.writeable
    for st in (ours, theirs):
        with pytest.raises(RuntimeError, match="does not contain COO format"):
            st.as_coo_view()
        with pytest.raises(RuntimeError, match="does not contain BlockSparse format"):
            st.as_blocksparse_view()
    np.testing.assert_array_equal(ours.to_dense(), [[1, 0, 2], [0, 3, 0]])
    ov_t = tn.OrtValue.ort_value_from_sparse_tensor(ours)
    ov_o = ort.OrtValue.ort_value_from_sparse_tensor(theirs)
    assert (ov_t.data_type(), ov_t.shape()) == (ov_o.data_type(), ov_o.shape())
    for bad in ([3], [2, 3, 1]):
        with pytest.raises(RuntimeError):
            tn.SparseTensor.sparse_csr_from_numpy(
                bad, vals, inner, outer, tn.OrtDevice.make("cpu", 0)
            )
        with pytest.raises(RuntimeError):
            ort.SparseTensor.sparse_csr_from_numpy(
                bad, vals, inner, outer, ort.OrtDevice.make("cpu", 0)
            )


def test_sparse_coo_format_and_block_sparse_view() -> None:
    dev = tn.OrtDevice.make("cpu", 0)
    vals = np.array([1, 2, 3], np.float32)
    coo = tn.SparseTensor.sparse_coo_from_numpy([2, 3], vals, np.array([0, 2, 4]), dev)
    ref = ort.SparseTensor.sparse_coo_from_numpy(
        [2, 3], vals, np.array([0, 2, 4]), ort.OrtDevice.make("cpu", 0)
    )
    assert int(coo.format()) == int(ref.format())
    np.testing.assert_array_equal(coo.as_coo_view().indices(), ref.as_coo_view().indices())
    with pytest.raises(RuntimeError, match="CSR"):
        coo.as_csrc_view()
    # onnxruntime builds block-sparse tensors only in C++; turnout's factory, same view
    blocks = np.arange(8, dtype=np.float32).reshape(2, 2, 2)
    bs = tn.SparseTensor.sparse_blocksparse_from_numpy(
        [4, 4], blocks, np.array([[0, 1], [1, 0]], np.int32), dev
    )
    assert bs.format().name == "ORT_SPARSE_BLOCK_SPARSE"
    np.testing.assert_array_equal(bs.as_blocksparse_view().indices(), [[0, 1], [1, 0]])
    dense = bs.to_dense()
    np.testing.assert_array_equal(dense[0:2, 2:4], blocks[0])
    np.testing.assert_array_equal(dense[2:4, 0:2], blocks[1])
    assert dense.sum() == blocks.sum()
