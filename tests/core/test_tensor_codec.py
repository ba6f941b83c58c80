"""turnout's tensor decoding and encoding (`turnout.graph.tensors.to_array` / `from_array`)
agree with onnx.numpy_helper's for every element type and storage form.

They exist so a session need not import ml_dtypes (onnx.numpy_helper's type table does, at
0.35-0.45 s); any type they do not decode themselves goes to numpy_helper, so each case here
compares the two whatever path it takes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from turnout.graph.dtypes import ELEM_TYPE_NAMES, elem_type_of, np_dtype
from turnout.graph.tensors import from_array, to_array

NATIVE = [
    np.float32,
    np.float64,
    np.float16,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.bool_,
    np.complex64,
    np.complex128,
]
SHAPES = [(), (0,), (3,), (2, 3), (2, 1, 4)]


def _values(dtype: Any, shape: tuple[int, ...]) -> np.ndarray:
    rng = np.random.default_rng(len(shape))
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.integers(0, 2, shape).astype(dt)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, shape, dtype=dt, endpoint=True)
    values = (rng.standard_normal(shape) * 100).astype(dt)
    if values.size and dt.kind == "f":
        values.reshape(-1)[0] = np.nan
    return values


def _same(a: np.ndarray, b: np.ndarray) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", NATIVE, ids=lambda d: np.dtype(d).name)
def test_raw_data_decodes_as_numpy_helper(dtype: Any, shape: tuple[int, ...]) -> None:
    proto = numpy_helper.from_array(_values(dtype, shape), "t")
    _same(to_array(proto), numpy_helper.to_array(proto))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", NATIVE, ids=lambda d: np.dtype(d).name)
def test_typed_fields_decode_as_numpy_helper(dtype: Any, shape: tuple[int, ...]) -> None:
    values = _values(dtype, shape)
    code = elem_type_of(values.dtype)
    if values.dtype == np.float16:
        flat = values.reshape(-1).view(np.uint16).tolist()
    else:
        flat = values.reshape(-1).tolist()
    proto = helper.make_tensor("t", code, shape, flat, raw=False)
    _same(to_array(proto), numpy_helper.to_array(proto))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", NATIVE, ids=lambda d: np.dtype(d).name)
def test_encoding_writes_what_numpy_helper_writes(dtype: Any, shape: tuple[int, ...]) -> None:
    values = _values(dtype, shape)
    expected = numpy_helper.from_array(values, "w").SerializeToString()
    assert from_array(values, "w").SerializeToString() == expected


def test_encoding_a_strided_view_writes_its_values_in_order() -> None:
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    view = base[:, ::2].T
    _same(to_array(from_array(view, "v")), np.ascontiguousarray(view))


def test_strings_and_ml_dtypes_types_go_through_numpy_helper() -> None:
    import ml_dtypes

    strings = numpy_helper.from_array(np.array(["a", "bc"], dtype=object), "s")
    _same(to_array(strings), numpy_helper.to_array(strings))
    bf16 = np.array([1.5, -2.0], dtype=ml_dtypes.bfloat16)
    proto = from_array(bf16, "b")
    assert proto.data_type == TensorProto.BFLOAT16
    _same(to_array(proto), bf16)


def test_every_named_element_type_maps_both_ways() -> None:
    for code in ELEM_TYPE_NAMES:
        if code == TensorProto.STRING:
            continue
        try:
            dtype = np_dtype(code)
        except KeyError:
            continue  # a type this ml_dtypes release does not have
        assert elem_type_of(dtype) == code
