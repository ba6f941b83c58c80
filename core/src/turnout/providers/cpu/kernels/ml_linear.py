"""Linear models and feature transforms of ai.onnx.ml: LinearClassifier, LinearRegressor,
Normalizer, Scaler, Binarizer, Imputer, ArrayFeatureExtractor, FeatureVectorizer, OneHotEncoder,
LabelEncoder, CategoryMapper, DictVectorizer, ZipMap.

Lookups (LabelEncoder, CategoryMapper, OneHotEncoder) map the *distinct* input values through a
table built at session creation and scatter back with the inverse index, so the Python-level work
is per distinct value, not per element. Score post-transforms are shared with ml_trees.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from turnout.graph.errors import InvalidArgument
from turnout.providers.cpu.kernels.ml_trees import _TRANSFORMS, _transform
from turnout.providers.cpu.registry import cpu_kernel
from turnout.sdk.provider import KernelFn, KernelNode

__all__: list[str] = []

ML = "ai.onnx.ml"


def _as_2d(node: KernelNode, x: np.ndarray) -> np.ndarray:
    if x.ndim == 1:
        return x.reshape(1, -1)
    if x.ndim != 2:
        raise InvalidArgument(f"{node.name}: X must be 1-D or 2-D, got shape {x.shape}")
    return x


def _float_in(x: np.ndarray) -> np.ndarray:
    return x if x.dtype in (np.float32, np.float64) else x.astype(np.float32)


def _lookup(x: np.ndarray, table: dict[Any, Any], default: Any, out_dtype: Any) -> np.ndarray:
    """Map every element of `x` through `table` (missing keys give `default`)."""
    if x.size == 0:
        return np.empty(x.shape, out_dtype)
    uniq, inv = np.unique(x.ravel(), return_inverse=True)
    mapped = [table.get(_key(u), default) for u in uniq.tolist()]
    vals = np.array(mapped, dtype=out_dtype) if out_dtype is not object else _obj(mapped)
    return vals[inv].reshape(x.shape)


def _key(u: Any) -> Any:
    """Table key of a value: NaN keys match NaN (LabelEncoder opset 4)."""
    return "__nan__" if isinstance(u, float) and u != u else u


def _obj(items: list[Any]) -> np.ndarray:
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out


# ---------------------------------------------------------------------------------------------
# linear models


@cpu_kernel("LinearRegressor", since=1, domain=ML)
def linear_regressor(node: KernelNode) -> KernelFn:
    targets = int(node.attr("targets", 1))
    coef = np.asarray(node.attr("coefficients", []), np.float32)
    if targets <= 0 or coef.size % targets:
        raise InvalidArgument(f"{node.name}: {coef.size} coefficients for {targets} targets")
    w = coef.reshape(targets, -1).T
    b = np.asarray(node.attr("intercepts") or np.zeros(targets), np.float32)
    if b.size not in (1, targets):
        raise InvalidArgument(f"{node.name}: intercepts must have one entry per target")
    pt = _TRANSFORMS[_transform(node)]

    def run(x: np.ndarray) -> tuple[np.ndarray]:
        x2 = _as_2d(node, _float_in(x))
        if x2.shape[1] != w.shape[0]:
            raise InvalidArgument(f"{node.name}: X has {x2.shape[1]} features, model {w.shape[0]}")
        y = (x2 @ w.astype(x2.dtype) + b.astype(x2.dtype)).astype(np.float32)
        return (y if pt is None else pt(y),)

    return run


@cpu_kernel("LinearClassifier", since=1, domain=ML)
def linear_classifier(node: KernelNode) -> KernelFn:
    ints = node.attr("classlabels_ints")
    strs = node.attr("classlabels_strings")
    labels = np.asarray(ints, np.int64) if ints else _obj(list(strs or []))
    if len(labels) == 0:
        raise InvalidArgument(f"{node.name}: classlabels_ints or classlabels_strings required")
    coef = np.asarray(node.attr("coefficients", []), np.float32)
    b = np.asarray(node.attr("intercepts") or [], np.float32)
    n_rows = len(b) if len(b) else len(labels)
    if n_rows == 0 or coef.size % n_rows:
        raise InvalidArgument(f"{node.name}: {coef.size} coefficients for {n_rows} classes")
    w = coef.reshape(n_rows, -1).T
    if not len(b):
        b = np.zeros(n_rows, np.float32)
    binary = n_rows == 1 and len(labels) == 2
    if n_rows > 1 and n_rows != len(labels):
        raise InvalidArgument(f"{node.name}: {n_rows} coefficient rows for {len(labels)} labels")
    pt = _TRANSFORMS[_transform(node)]

    def run(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        x2 = _as_2d(node, _float_in(x))
        if x2.shape[1] != w.shape[0]:
            raise InvalidArgument(f"{node.name}: X has {x2.shape[1]} features, model {w.shape[0]}")
        s = (x2 @ w.astype(x2.dtype) + b.astype(x2.dtype)).astype(np.float32)
        if binary:
            s = np.concatenate([-s, s], axis=1)
        z = s if pt is None else pt(s)
        if z.shape[1] == 1:  # one class: label when its score reaches the threshold
            thr = 0 if pt is None else 0.5
            y = np.where(z[:, 0] >= thr, labels[0], labels[0] * 0)
            return y, z
        return labels[np.argmax(z, axis=1)], z

    return run


# ---------------------------------------------------------------------------------------------
# feature transforms


@cpu_kernel("Binarizer", since=1, domain=ML)
def binarizer(node: KernelNode) -> KernelFn:
    thr = float(node.attr("threshold", 0.0))
    return lambda x: ((x > x.dtype.type(thr)).astype(x.dtype),)


@cpu_kernel("Normalizer", since=1, domain=ML)
def normalizer(node: KernelNode) -> KernelFn:
    norm = node.attr("norm", "MAX")
    if norm not in ("MAX", "L1", "L2"):
        raise InvalidArgument(f"{node.name}: unknown norm {norm!r}")

    def run(x: np.ndarray) -> tuple[np.ndarray]:
        x2 = _as_2d(node, x).astype(np.float32)
        if norm == "MAX":
            d = np.abs(x2).max(axis=1, keepdims=True)
        elif norm == "L1":
            d = np.abs(x2).sum(axis=1, keepdims=True)
        else:
            d = np.sqrt(np.square(x2).sum(axis=1, keepdims=True))
        return ((x2 / np.maximum(d, np.float32(1e-30))).reshape(x.shape),)

    return run


@cpu_kernel("Scaler", since=1, domain=ML)
def scaler(node: KernelNode) -> KernelFn:
    offset = np.asarray(node.attr("offset") or [0.0], np.float32)
    scale = np.asarray(node.attr("scale") or [1.0], np.float32)

    def run(x: np.ndarray) -> tuple[np.ndarray]:
        n = x.shape[-1] if x.ndim else 1
        for what, v in (("offset", offset), ("scale", scale)):
            if v.size not in (1, n):
                raise InvalidArgument(f"{node.name}: {what} has {v.size} entries, X {n} columns")
        return (((x.astype(np.float32) - offset) * scale).astype(np.float32),)

    return run


@cpu_kernel("Imputer", since=1, domain=ML)
def imputer(node: KernelNode) -> KernelFn:
    fl = node.attr("imputed_value_floats")
    il = node.attr("imputed_value_int64s")
    if fl:
        values: np.ndarray = np.asarray(fl, np.float32)
        replace: Any = float(node.attr("replaced_value_float", 0.0))
    elif il:
        values = np.asarray(il, np.int64)
        replace = int(node.attr("replaced_value_int64", 0))
    else:
        raise InvalidArgument(f"{node.name}: imputed_value_floats or _int64s required")

    def run(x: np.ndarray) -> tuple[np.ndarray]:
        n = x.shape[-1] if x.ndim else 1
        if values.size not in (1, n):
            raise InvalidArgument(f"{node.name}: {values.size} imputed values for {n} columns")
        miss = np.isnan(x) if isinstance(replace, float) and replace != replace else x == replace
        return (np.where(miss, values.astype(x.dtype), x),)

    return run


@cpu_kernel("ArrayFeatureExtractor", since=1, domain=ML)
def array_feature_extractor(node: KernelNode) -> KernelFn:
    def run(x: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray]:
        i = np.asarray(idx, np.int64).ravel()
        n = x.shape[-1]
        if i.size and (i.min() < 0 or i.max() >= n):
            raise InvalidArgument(f"{node.name}: an index is outside [0, {n})")
        y = x[..., i]
        return (y.reshape(1, -1) if x.ndim == 1 else y,)

    return run


@cpu_kernel("FeatureVectorizer", since=1, domain=ML)
def feature_vectorizer(node: KernelNode) -> KernelFn:
    dims = [int(d) for d in node.attr("inputdimensions", [])]

    def run(*xs: np.ndarray) -> tuple[np.ndarray]:
        if len(xs) != len(dims):
            raise InvalidArgument(f"{node.name}: {len(xs)} inputs, {len(dims)} inputdimensions")
        parts = []
        for x, d in zip(xs, dims):
            x2 = x.reshape(-1, 1) if x.ndim == 1 else x.reshape(x.shape[0], -1)
            x2 = x2.astype(np.float32)[:, :d]
            if x2.shape[1] < d:
                x2 = np.pad(x2, ((0, 0), (0, d - x2.shape[1])))
            parts.append(x2)
        rows = {p.shape[0] for p in parts}
        if len(rows) > 1:
            raise InvalidArgument(f"{node.name}: inputs differ in their number of rows")
        return (np.concatenate(parts, axis=1),)

    return run


@cpu_kernel("OneHotEncoder", since=1, domain=ML)
def one_hot_encoder(node: KernelNode) -> KernelFn:
    ints = node.attr("cats_int64s")
    strs = node.attr("cats_strings")
    cats: list[Any] = list(ints) if ints else list(strs or [])
    if not cats:
        raise InvalidArgument(f"{node.name}: cats_int64s or cats_strings required")
    table = {c: i for i, c in enumerate(cats)}
    zeros = int(node.attr("zeros", 1))

    def run(x: np.ndarray) -> tuple[np.ndarray]:
        if ints and x.dtype.kind == "f":
            xi = np.where(np.isfinite(x), x, -(2**62)).astype(np.int64)
        else:
            xi = x
        pos = _lookup(xi, table, -1, np.int64)
        if not zeros and (pos < 0).any():
            raise InvalidArgument(f"{node.name}: a value is not among the categories")
        y = (pos[..., None] == np.arange(len(cats))).astype(np.float32)
        return (y,)

    return run


def _label_encoder_tables(node: KernelNode) -> tuple[dict[Any, Any], Any, Any]:
    """(table, default, output dtype) from opset 1, 2 or 4 attributes."""
    if node.since_version < 2:
        classes = list(node.attr("classes_strings", []))
        ds, di = node.attr("default_string", "_Unused"), int(node.attr("default_int64", -1))
        out = node.outputs[0].elem_type if node.outputs and node.outputs[0] else None
        in_str = node.inputs[0] is not None and node.inputs[0].elem_type == 8
        if in_str or out == 7:
            return {c: i for i, c in enumerate(classes)}, di, np.int64
        return dict(enumerate(classes)), ds, object
    keys: list[Any] | None = None
    for k in ("keys_strings", "keys_int64s", "keys_floats"):
        if node.attr(k) is not None:
            keys = list(node.attr(k))
    if node.attr("keys_tensor") is not None:
        kt = np.asarray(node.attr("keys_tensor")).ravel()
        keys = list(kt.astype(object) if kt.dtype == object else kt.tolist())
    values: list[Any] | None = None
    vdtype: Any = None
    for k, dt in (
        ("values_strings", object),
        ("values_int64s", np.int64),
        ("values_floats", np.float32),
    ):
        if node.attr(k) is not None:
            values, vdtype = list(node.attr(k)), dt
    default: Any = None
    if node.attr("values_tensor") is not None:
        vt = np.asarray(node.attr("values_tensor")).ravel()
        values, vdtype = vt.tolist(), (object if vt.dtype == object else vt.dtype)
        dt_ = node.attr("default_tensor")
        if dt_ is not None:
            default = np.asarray(dt_).ravel()[0]
            default = default if vdtype is object else np.asarray(default).item()
    if keys is None or values is None or len(keys) != len(values):
        raise InvalidArgument(f"{node.name}: keys and values must be given with equal lengths")
    if default is None:
        if vdtype is object:
            default = node.attr("default_string", "_Unused")
        elif np.dtype(vdtype).kind in "iu":
            default = int(node.attr("default_int64", -1))
        else:
            default = float(node.attr("default_float", -0.0))
    table = {_key(k): v for k, v in zip(keys, values)}
    return table, default, vdtype


@cpu_kernel("LabelEncoder", since=1, domain=ML)
def label_encoder(node: KernelNode) -> KernelFn:
    table, default, dtype = _label_encoder_tables(node)
    return lambda x: (_lookup(x, table, default, dtype),)


@cpu_kernel("CategoryMapper", since=1, domain=ML)
def category_mapper(node: KernelNode) -> KernelFn:
    ints = list(node.attr("cats_int64s", []))
    strs = list(node.attr("cats_strings", []))
    if len(ints) != len(strs):
        raise InvalidArgument(f"{node.name}: cats_int64s and cats_strings differ in length")
    to_int = dict(zip(strs, ints))
    to_str = dict(zip(ints, strs))
    di, ds = int(node.attr("default_int64", -1)), node.attr("default_string", "_Unused")

    def run(x: np.ndarray) -> tuple[np.ndarray]:
        if x.dtype == object:
            return (_lookup(x, to_int, di, np.int64),)
        return (_lookup(x, to_str, ds, object),)

    return run


@cpu_kernel("DictVectorizer", since=1, domain=ML)
def dict_vectorizer(node: KernelNode) -> KernelFn:
    vocab = list(node.attr("int64_vocabulary") or node.attr("string_vocabulary") or [])
    index = {k: i for i, k in enumerate(vocab)}
    out = node.outputs[0].dtype if node.outputs and node.outputs[0] else None

    def run(x: Any) -> tuple[np.ndarray]:
        rows = x if isinstance(x, list) else [x]
        if not all(isinstance(r, dict) for r in rows):
            raise InvalidArgument(f"{node.name}: input must be a map or a sequence of maps")
        vals = [v for r in rows for v in r.values()]
        dtype = out if out is not None else (np.asarray(vals).dtype if vals else np.float32)
        y = np.zeros((len(rows), len(vocab)), dtype)
        r_i = [i for i, r in enumerate(rows) for k in r if k in index]
        c_i = [index[k] for r in rows for k in r if k in index]
        v_i = [v for r in rows for k, v in r.items() if k in index]
        if r_i:
            y[r_i, c_i] = np.asarray(v_i).astype(dtype)
        return (y if isinstance(x, list) else y[0],)

    return run


@cpu_kernel("ZipMap", since=1, domain=ML)
def zip_map(node: KernelNode) -> KernelFn:
    ints = node.attr("classlabels_int64s")
    labels: list[Any] = (
        [int(v) for v in ints] if ints else list(node.attr("classlabels_strings") or [])
    )
    if not labels:
        raise InvalidArgument(f"{node.name}: classlabels_int64s or classlabels_strings required")

    def run(x: np.ndarray) -> tuple[list[dict[Any, float]]]:
        x2 = x.reshape(1, -1) if x.ndim == 1 else x
        if x2.ndim != 2 or x2.shape[1] != len(labels):
            raise InvalidArgument(
                f"{node.name}: X shape {x.shape} does not match {len(labels)} labels"
            )
        return ([dict(zip(labels, row)) for row in x2.astype(np.float32).tolist()],)

    return run
