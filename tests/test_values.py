"""turnout.api.values (OrtValue, SparseTensor, OrtDevice) and the turnout.api.capi module paths.

onnxruntime is the oracle for type strings, codes and enum values wherever it supports the type.
"""

from __future__ import annotations

import logging

import ml_dtypes
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.capi import _pybind_state as ort_c

import turnout
from turnout.api.values import (
    OrtAllocatorType,
    OrtDevice,
    OrtMemoryInfo,
    OrtMemType,
    OrtValue,
    SparseTensor,
    to_ort_type_string,
)
from turnout.graph import errors, logs
from turnout.graph.dtypes import ELEM_TYPE_NAMES, np_dtype, type_string

CODES = sorted(ELEM_TYPE_NAMES)
# Element types onnxruntime's Python API cannot create: strings (only from a session), complex.
NOT_IN_ORT = {TensorProto.STRING, TensorProto.COMPLEX64, TensorProto.COMPLEX128}
NUMPY_TYPES = [np.bool_, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64]
NUMPY_TYPES += [np.uint64, np.float16, np.float32, np.float64]


def sample(code: int, shape: tuple[int, ...] = (2, 3)) -> np.ndarray:
    """Values 1 and 2, which every element type holds (int2 wraps 2 to -2; float8e8m0 has no 0)."""
    base = np.random.default_rng(code).integers(1, 3, size=shape)
    if code == TensorProto.STRING:
        return base.astype(str).astype(object)
    return base.astype(np_dtype(code))


def ort_model_value(outputs: list, nodes: list) -> ort.InferenceSession:
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 2])
    graph = helper.make_graph(nodes, "g", [x], outputs)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)]
    model = helper.make_model(graph, opset_imports=opsets)
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


# -- tensors ----------------------------------------------------------------------------------


@pytest.mark.parametrize("code", CODES, ids=[ELEM_TYPE_NAMES[c] for c in CODES])
def test_tensor_round_trip_every_dtype(code):
    arr = sample(code)
    v = OrtValue.ortvalue_from_numpy(arr)
    assert v.numpy() is arr  # C-contiguous: shared, not copied
    assert v.numpy().dtype == np_dtype(code)
    np.testing.assert_array_equal(v.numpy(), arr)
    assert v.data_type() == type_string(code) == to_ort_type_string(arr)
    assert v.element_type() == code
    assert v.shape() == [2, 3]
    assert v.device_name() == "cpu"
    assert v.is_tensor() and v.has_value()
    assert not v.is_tensor_sequence() and not v.is_sparse_tensor()
    assert v.tensor_size_in_bytes() == arr.nbytes
    assert v.data_ptr() == arr.ctypes.data
    assert v._value is arr and OrtValue._wrap(arr)._value is arr


@pytest.mark.parametrize("code", CODES, ids=[ELEM_TYPE_NAMES[c] for c in CODES])
def test_from_shape_and_type_matches_onnxruntime(code):
    by_code = OrtValue.ortvalue_from_shape_and_type([3, 0, 2], code)
    by_dtype = OrtValue.ortvalue_from_shape_and_type((3, 0, 2), np_dtype(code))
    for v in (by_code, by_dtype):
        assert v.shape() == [3, 0, 2] and v.element_type() == code
    zeros = OrtValue.ortvalue_from_shape_and_type([2], code).numpy()
    if code == TensorProto.STRING:
        assert zeros.tolist() == ["", ""]
    else:
        assert zeros.dtype == np_dtype(code) and not zeros.view(np.uint8).any()
    if code in NOT_IN_ORT:
        pytest.skip(f"onnxruntime's Python API cannot create {ELEM_TYPE_NAMES[code]} OrtValues")
    try:
        ref = ort.OrtValue.ortvalue_from_shape_and_type([3, 0, 2], code)
    except RuntimeError as e:  # types newer than the installed onnxruntime
        pytest.skip(f"onnxruntime {ort.__version__}: {e}")
    assert by_code.data_type() == ref.data_type()
    assert by_code.element_type() == ref.element_type()


@pytest.mark.parametrize("dt", NUMPY_TYPES, ids=[t.__name__ for t in NUMPY_TYPES])
def test_from_numpy_matches_onnxruntime(dt):
    arr = np.arange(12).reshape(3, 4).astype(dt)
    mine, ref = OrtValue.ortvalue_from_numpy(arr), ort.OrtValue.ortvalue_from_numpy(arr)
    assert mine.data_type() == ref.data_type()
    assert mine.element_type() == ref.element_type()
    assert mine.shape() == ref.shape()
    assert mine.device_name() == ref.device_name()
    assert mine.tensor_size_in_bytes() == ref.tensor_size_in_bytes()
    assert mine.numpy().dtype == ref.numpy().dtype


def test_non_contiguous_is_copied_and_strings_become_objects():
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    v = OrtValue.ortvalue_from_numpy(base[:, ::2])
    assert v.numpy().flags.c_contiguous and not np.shares_memory(v.numpy(), base)
    np.testing.assert_array_equal(v.numpy(), base[:, ::2])
    np.testing.assert_array_equal(np.asarray(v), base[:, ::2])
    for raw in (np.array(["a", "bc"]), np.array([b"a", b"bc"])):
        s = OrtValue.ortvalue_from_numpy(raw)
        assert s.numpy().dtype == object and s.numpy().tolist() == ["a", "bc"]
        assert s.data_type() == "tensor(string)"


def test_from_numpy_with_onnx_type_reinterprets_bits():
    bits = np.array([0x3F80, 0xC000], np.uint16)  # bfloat16 1.0, -2.0
    v = OrtValue.ortvalue_from_numpy_with_onnx_type(bits, TensorProto.BFLOAT16)
    assert v.data_type() == ort.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, 16).data_type()
    np.testing.assert_array_equal(v.numpy().view(np.uint16), bits)
    assert np.shares_memory(v.numpy(), bits)
    as_float32 = (bits.astype(np.uint32) << 16).view(np.float32)  # bfloat16 is float32's top half
    np.testing.assert_array_equal(v.numpy().astype(np.float32), as_float32)
    with pytest.raises(errors.InvalidArgument, match="sizes differ"):
        OrtValue.ortvalue_from_numpy_with_onnx_type(bits, TensorProto.FLOAT)
    with pytest.raises(errors.InvalidArgument, match="element type 999"):
        OrtValue.ortvalue_from_numpy_with_onnx_type(bits, 999)


def test_update_inplace_writes_shared_buffer():
    arr = np.zeros((2, 2), np.float32)
    v = OrtValue.ortvalue_from_numpy(arr)
    v.update_inplace(np.ones((2, 2), np.float32))
    np.testing.assert_array_equal(arr, 1)
    with pytest.raises(errors.InvalidArgument, match=r"float32\[4\]"):
        v.update_inplace(np.ones(4, np.float32))
    with pytest.raises(errors.InvalidArgument, match="float64"):
        v.update_inplace(np.ones((2, 2), np.float64))
    with pytest.raises(errors.InvalidArgument, match="needs a tensor"):
        OrtValue._wrap([arr]).update_inplace(arr)


@pytest.mark.parametrize("device", ["tpu", "TPUExecutionProvider", "no_such_device"])
def test_unknown_device_is_invalid_argument(device):
    with pytest.raises(errors.InvalidArgument, match=f"{device}.*no execution provider"):
        OrtValue.ortvalue_from_numpy(np.zeros(2, np.float32), device, 0)
    with pytest.raises(errors.InvalidArgument, match=device):
        OrtValue.ortvalue_from_shape_and_type([2], np.float32, device)
    assert OrtValue.ortvalue_from_numpy(np.zeros(1), "CPU").device_name() == "cpu"


# -- sequences, maps, optionals -----------------------------------------------------------------


def test_sequence_and_map_type_strings_match_onnxruntime_session():
    nodes = [
        helper.make_node(
            "LinearClassifier",
            ["X"],
            ["label", "scores"],
            domain="ai.onnx.ml",
            classlabels_strings=["a", "b"],
            coefficients=[1.0, 2.0, 3.0, 4.0],
            intercepts=[0.0, 1.0],
        ),
        helper.make_node(
            "ZipMap", ["scores"], ["Z"], domain="ai.onnx.ml", classlabels_strings=["a", "b"]
        ),
        helper.make_node("SequenceConstruct", ["X", "X"], ["S"]),
        helper.make_node("Cast", ["X"], ["I"], to=TensorProto.INT64),
        helper.make_node("SequenceConstruct", ["I"], ["SI"]),
    ]
    floats = helper.make_tensor_type_proto(TensorProto.FLOAT, None)
    map_type = helper.make_map_type_proto(TensorProto.STRING, floats)
    outputs = [
        helper.make_tensor_value_info("label", TensorProto.STRING, None),
        helper.make_value_info("Z", helper.make_sequence_type_proto(map_type)),
        helper.make_tensor_sequence_value_info("S", TensorProto.FLOAT, None),
        helper.make_tensor_sequence_value_info("SI", TensorProto.INT64, None),
    ]
    sess = ort_model_value(outputs, nodes)
    results = sess.run(None, {"X": np.ones((2, 2), np.float32)})
    for declared, value in zip(sess.get_outputs(), results):
        v = OrtValue._wrap(value)
        assert v.data_type() == declared.type, declared.name
    assert OrtValue._wrap(results[2]).is_tensor_sequence()


def test_map_and_optional_values():
    assert to_ort_type_string({1: np.float64(2.0)}) == "map(int64,tensor(double))"
    assert to_ort_type_string({"k": np.zeros(3, np.int32)}) == "map(string,tensor(int32))"
    assert to_ort_type_string([[np.zeros(1, np.int8)]]) == "seq(seq(tensor(int8)))"
    seq = OrtValue._wrap([np.zeros(2, np.float32)])
    with pytest.raises(errors.InvalidArgument, match=r"seq\(tensor\(float\)\)"):
        seq.numpy()
    none = OrtValue._wrap(None)
    assert not none.has_value() and not none.is_tensor()
    assert none.data_type().startswith("optional(")
    with pytest.raises(errors.InvalidArgument):
        none.shape()


# -- sparse tensors -----------------------------------------------------------------------------


def dense_sample(dtype=np.float32, shape=(3, 4, 5)) -> np.ndarray:
    rng = np.random.default_rng(0)
    arr = rng.integers(-3, 4, shape) * (rng.random(shape) < 0.3)
    return arr.astype(dtype)


SPARSE_TYPES = [np.float32, np.int64, np.float16, ml_dtypes.bfloat16, ml_dtypes.int4]


@pytest.mark.parametrize("dtype", SPARSE_TYPES, ids=[t.__name__ for t in SPARSE_TYPES])
def test_sparse_from_to_dense_both_layouts(dtype):
    dense = dense_sample(dtype)
    sp = SparseTensor.from_dense(dense)
    assert sp.indices().ndim == 1 and sp.shape == dense.shape and sp.dtype == dense.dtype
    np.testing.assert_array_equal(sp.to_dense(), dense)
    coords = np.stack(np.nonzero(dense), axis=1)
    sp2 = SparseTensor(dense[np.nonzero(dense)], coords, dense.shape)
    np.testing.assert_array_equal(sp2.to_dense(), dense)


@pytest.mark.parametrize("layout", ["linear", "coords"])
def test_sparse_from_onnx_proto(layout):
    dense = dense_sample()
    nz = np.nonzero(dense)
    idx = np.ravel_multi_index(nz, dense.shape) if layout == "linear" else np.stack(nz, axis=1)
    proto = helper.make_sparse_tensor(
        numpy_helper.from_array(dense[nz], "v"), numpy_helper.from_array(idx, "i"), dense.shape
    )
    sp = SparseTensor.from_proto(proto)
    np.testing.assert_array_equal(sp.to_dense(), dense)
    strings = helper.make_sparse_tensor(
        helper.make_tensor("s", TensorProto.STRING, [2], [b"x", b"y"]),
        numpy_helper.from_array(np.array([0, 3], np.int64)),
        [2, 2],
    )
    assert SparseTensor.from_proto(strings).to_dense().tolist() == [["x", ""], ["", "y"]]


def test_sparse_ort_api_matches_onnxruntime():
    values, idx = np.array([1.0, 2.0], np.float32), np.array([1, 5], np.int64)
    ref = ort.SparseTensor.sparse_coo_from_numpy([3, 4], values, idx, ort.OrtDevice.make("cpu", 0))
    cpu = OrtDevice(OrtDevice.cpu(), OrtDevice.default_memory(), 0)
    sp = SparseTensor.sparse_coo_from_numpy([3, 4], values, idx, cpu)
    assert sp.dense_shape() == ref.dense_shape() and sp.data_type() == ref.data_type()
    np.testing.assert_array_equal(sp.values(), ref.values())
    np.testing.assert_array_equal(sp.as_coo_view().indices(), ref.as_coo_view().indices())
    assert sp.format() == int(ref.format()) == turnout.OrtSparseFormat.ORT_SPARSE_COO
    v = OrtValue.ort_value_from_sparse_tensor(sp)
    ref_v = ort.OrtValue.ort_value_from_sparse_tensor(ref)
    assert v.data_type() == ref_v.data_type() and v.element_type() == ref_v.element_type()
    assert v.is_sparse_tensor() and not v.is_tensor() and v.as_sparse_tensor() is sp
    assert v.shape() == [3, 4]
    with pytest.raises(errors.InvalidArgument, match="not a sparse tensor"):
        OrtValue.ortvalue_from_numpy(values).as_sparse_tensor()
    with pytest.raises(errors.InvalidArgument, match="cuda"):
        SparseTensor.sparse_coo_from_numpy([3, 4], values, idx, OrtDevice(OrtDevice.cuda(), 0, 0))


@pytest.mark.parametrize(
    ("indices", "match"),
    [
        ([0, 12], "out of range"),
        ([-1, 0], "out of range"),
        ([[0, 4], [0, 0]], "out of range"),
        ([0], "NNZ"),
        ([[0, 0, 0], [1, 1, 1]], "NNZ"),
    ],
)
def test_sparse_bad_indices(indices, match):
    with pytest.raises(errors.InvalidArgument, match=match):
        SparseTensor(np.ones(2, np.float32), indices, [3, 4])


# -- devices, memory info, capi module paths ----------------------------------------------------


def test_device_and_memory_info_match_onnxruntime():
    assert (OrtDevice.cpu(), OrtDevice.cuda(), OrtDevice.default_memory()) == (
        ort_c.OrtDevice.cpu(),
        ort_c.OrtDevice.cuda(),
        ort_c.OrtDevice.default_memory(),
    )
    d = OrtDevice(OrtDevice.cuda(), OrtDevice.default_memory(), 1)
    ref = ort_c.OrtDevice(ort_c.OrtDevice.cuda(), ort_c.OrtDevice.default_memory(), 1)
    assert (d.device_type(), d.device_id(), d.memory_type(), d.device_vendor_id()) == (
        ref.device_type(),
        ref.device_id(),
        ref.mem_type(),
        ref.vendor_id(),
    )
    enums = ((OrtAllocatorType, ort_c.OrtAllocatorType), (OrtMemType, ort_c.OrtMemType))
    for mine, theirs in enums:
        assert {k: int(v) for k, v in mine.__members__.items()} == {
            k: int(v) for k, v in theirs.__members__.items()
        }
    info = OrtMemoryInfo("Cpu", OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, OrtMemType.DEFAULT)
    assert (info.name, info.allocator_type, info.device_id, info.mem_type) == ("Cpu", 1, 0, 0)


def test_capi_module_paths():
    from turnout.api.capi import _pybind_state as C
    from turnout.api.capi import onnxruntime_inference_collection as coll
    from turnout.api.capi.onnxruntime_pybind11_state import Fail, InvalidArgument, NotImplemented

    assert InvalidArgument is errors.InvalidArgument and Fail is errors.Fail
    assert NotImplemented is errors.NotImplemented and C.EPFail is errors.EPFail
    assert C.OrtValue is OrtValue and C.SparseTensor is SparseTensor and C.OrtDevice is OrtDevice
    assert coll.OrtValue is OrtValue and "InferenceSession" in dir(coll)
    with pytest.raises(AttributeError, match="Nope"):
        coll.Nope  # noqa: B018


def test_session_functions_are_forwarded():
    session = pytest.importorskip("turnout.api.session")
    from turnout.api.capi import _pybind_state as C

    assert C.get_available_providers() == session.get_available_providers()
    assert C.get_all_providers() == session.get_all_providers()
    assert C.get_device() == session.get_device()
    assert C.get_version_string() == session.get_version_string()


def test_logger_severity():
    from turnout.api.capi import _pybind_state as C

    before = logs.logger.level
    try:
        for severity, level in [(0, logging.DEBUG), (3, logging.ERROR), (4, logging.CRITICAL)]:
            C.set_default_logger_severity(severity)
            assert logging.getLogger("turnout").level == level
        with pytest.raises(errors.InvalidArgument, match="0-4"):
            C.set_default_logger_severity(7)
        C.set_default_logger_verbosity(1)
        assert logs.verbosity == 1
    finally:
        logs.logger.setLevel(before)
        logs.set_verbosity(0)
