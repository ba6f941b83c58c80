"""The value a Constant node holds, decoded from whichever of its attributes is set, so every
provider materializes the same array (dtype included) and refuses the same empty node."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from turnout.graph.errors import InvalidArgument
from turnout.graph.sparse import SparseTensor

__all__ = ["constant_attr_value"]

_LISTS = {
    "value_float": np.float32,
    "value_floats": np.float32,
    "value_int": np.int64,
    "value_ints": np.int64,
    "value_string": object,
    "value_strings": object,
}


def constant_attr_value(name: str, attrs: Mapping[str, Any]) -> np.ndarray[Any, Any]:
    """Constant node `name`'s value as a new numpy array (a sparse value made dense)."""
    if "value" in attrs:
        return np.array(attrs["value"])
    if "sparse_value" in attrs:
        return np.array(SparseTensor.from_proto(attrs["sparse_value"]).to_dense())
    for key, dtype in _LISTS.items():
        if key in attrs:
            return np.array(attrs[key], dtype=dtype)
    raise InvalidArgument(f"{name}: Constant has no value attribute")
