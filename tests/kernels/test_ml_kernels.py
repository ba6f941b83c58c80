"""ai.onnx.ml kernels (ml_trees.py, ml_linear.py) against the official node cases, onnx.reference
and, where onnx.reference is incomplete or differs from the de-facto standard, onnxruntime."""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from turnout.graph.errors import InvalidArgument
from turnout.tools.testing import (
    check_official_case,
    iter_node_cases,
    run_own_kernel,
    run_reference,
)

ML = "ai.onnx.ml"
OPS = {
    "TreeEnsembleClassifier",
    "TreeEnsembleRegressor",
    "TreeEnsemble",
    "LinearClassifier",
    "LinearRegressor",
    "SVMClassifier",
    "SVMRegressor",
    "Normalizer",
    "Scaler",
    "Binarizer",
    "Imputer",
    "ArrayFeatureExtractor",
    "FeatureVectorizer",
    "OneHotEncoder",
    "LabelEncoder",
    "CategoryMapper",
    "DictVectorizer",
    "ZipMap",
}
CASES = list(iter_node_cases(OPS, domain=ML))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_official_node_cases(case: Any) -> None:
    check_official_case(case)


# ---------------------------------------------------------------------------------------------
# onnxruntime as the reference


def _np_elem(v: Any) -> int:
    if v.dtype == object:
        return TensorProto.STRING
    return helper.np_dtype_to_tensor_dtype(v.dtype)


def run_ort(node: onnx.NodeProto, inputs: list[Any], out_types: list[int], ml: int) -> list[Any]:
    g = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, _np_elem(v), None) for n, v in zip(node.input, inputs)],
        [helper.make_tensor_value_info(o, t, None) for o, t in zip(node.output, out_types)],
    )
    m = helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 19), helper.make_opsetid(ML, ml)]
    )
    m.ir_version = 9
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return list(sess.run(None, dict(zip(node.input, inputs))))


# ---------------------------------------------------------------------------------------------
# random tree ensembles


def random_trees(
    rng: np.random.Generator, n_trees: int, n_features: int, max_depth: int, modes: list[str]
) -> list[list[dict[str, Any]]]:
    """Trees as lists of node dicts (id, mode, feature, value, true, false, missing)."""
    trees = []
    for _ in range(n_trees):
        nodes: list[dict[str, Any]] = []

        def grow(depth: int, nodes: list[dict[str, Any]] = nodes) -> int:
            i = len(nodes)
            nd: dict[str, Any] = {"id": i}
            nodes.append(nd)
            if depth >= max_depth or (depth > 0 and rng.random() < 0.25):
                nd.update(mode="LEAF", feature=0, value=0.0, true=0, false=0, missing=0)
                return i
            nd.update(
                mode=str(rng.choice(modes)),
                feature=int(rng.integers(n_features)),
                value=float(np.round(rng.normal(), 1)),
                missing=int(rng.random() < 0.5),
            )
            nd["true"] = grow(depth + 1)
            nd["false"] = grow(depth + 1)
            return i

        grow(0)
        # shuffle node ids so that structure is not implied by order
        perm = rng.permutation(len(nodes))
        for nd in nodes:
            nd["id"] = int(perm[nd["id"]])
        for nd in nodes:
            if nd["mode"] != "LEAF":
                nd["true"] = int(perm[nd["true"]])
                nd["false"] = int(perm[nd["false"]])
        trees.append(nodes)
    return trees


def v3_attrs(
    trees: list[list[dict[str, Any]]],
    rng: np.random.Generator,
    n_targets: int,
    prefix: str,
    positive: bool = False,
    one_class: int | None = None,
) -> dict[str, Any]:
    a: dict[str, list[Any]] = {
        k: []
        for k in (
            "nodes_treeids",
            "nodes_nodeids",
            "nodes_modes",
            "nodes_featureids",
            "nodes_values",
            "nodes_truenodeids",
            "nodes_falsenodeids",
            "nodes_missing_value_tracks_true",
            f"{prefix}_treeids",
            f"{prefix}_nodeids",
            f"{prefix}_ids",
            f"{prefix}_weights",
        )
    }
    for t, nodes in enumerate(trees):
        for nd in nodes:
            a["nodes_treeids"].append(t)
            a["nodes_nodeids"].append(nd["id"])
            a["nodes_modes"].append(nd["mode"])
            a["nodes_featureids"].append(nd["feature"])
            a["nodes_values"].append(nd["value"])
            a["nodes_truenodeids"].append(nd["true"])
            a["nodes_falsenodeids"].append(nd["false"])
            a["nodes_missing_value_tracks_true"].append(nd["missing"])
            if nd["mode"] == "LEAF":
                targets = [one_class] if one_class is not None else range(n_targets)
                for k in targets:
                    a[f"{prefix}_treeids"].append(t)
                    a[f"{prefix}_nodeids"].append(nd["id"])
                    a[f"{prefix}_ids"].append(k)
                    w = float(rng.random() if positive else rng.normal())
                    a[f"{prefix}_weights"].append(np.float32(w / len(trees)).item())
    return a


def features(rng: np.random.Generator, n: int, f: int, dtype: Any = np.float32) -> np.ndarray:
    x = np.round(rng.normal(size=(n, f)), 1).astype(dtype)  # hits thresholds exactly, too
    if dtype != np.int64:
        x[rng.random(x.shape) < 0.1] = np.nan
    return x


# onnxruntime's float32 probit cancels two values near 4.33 (scores near 0.5) or computes
# 1 + (2x - 1) (scores near 0 or 1): one ulp of the summed score moves it by up to 1e-3 relative,
# and onnxruntime's summation order is not numpy's. Measured over 16,000 ensembles like these
# (1,000 seeds): at most 4.3e-4 relative where |y| > 1e-2, 5.7e-4 absolute (tails, |y| ~ 4).
PROBIT_TOL = {"rtol": 1e-3, "atol": 5e-5}

ALL_MODES = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"]


@pytest.mark.parametrize("agg", ["SUM", "AVERAGE", "MIN", "MAX"])
@pytest.mark.parametrize("pt", ["NONE", "PROBIT", "SOFTMAX"])
@pytest.mark.parametrize("n_targets", [1, 3])
def test_tree_regressor_vs_ort(agg: str, pt: str, n_targets: int) -> None:
    rng = np.random.default_rng(zlib.crc32(f"{agg}-{pt}-{n_targets}".encode()))
    trees = random_trees(rng, 7, 4, 5, ALL_MODES)
    a = v3_attrs(trees, rng, n_targets, "target")
    if pt == "PROBIT":  # keep probit's argument inside (0, 1)
        a["target_weights"] = [abs(w) / (4 * n_targets) for w in a["target_weights"]]
    base = [float(b) for b in np.round(rng.normal(size=n_targets), 2)]
    node = helper.make_node(
        "TreeEnsembleRegressor",
        ["X"],
        ["Y"],
        domain=ML,
        n_targets=n_targets,
        aggregate_function=agg,
        post_transform=pt,
        base_values=[b / 8 for b in base] if pt == "PROBIT" else base,
        **a,
    )
    for dtype in (np.float32, np.float64):
        x = features(rng, 60, 4, dtype)
        exp = run_ort(node, [x], [TensorProto.FLOAT], 3)
        got = run_own_kernel(node, [x], {"": 19, ML: 3})
        assert got[0].dtype == np.float32
        tol = PROBIT_TOL if pt == "PROBIT" else {"rtol": 1e-4, "atol": 1e-5}
        np.testing.assert_allclose(got[0], exp[0], **tol)


def test_tree_regressor_as_tensor_and_int_input() -> None:
    rng = np.random.default_rng(5)
    trees = random_trees(rng, 4, 3, 4, ["BRANCH_LEQ", "BRANCH_GT"])
    a = v3_attrs(trees, rng, 2, "target")
    a["nodes_values"] = [round(v * 4) / 4 for v in a["nodes_values"]]
    vals, weights = a["nodes_values"], a["target_weights"]
    a["nodes_values_as_tensor"] = helper.make_tensor(
        "v", TensorProto.DOUBLE, [len(a["nodes_values"])], a.pop("nodes_values")
    )
    a["target_weights_as_tensor"] = helper.make_tensor(
        "w", TensorProto.DOUBLE, [len(a["target_weights"])], a.pop("target_weights")
    )
    node = helper.make_node("TreeEnsembleRegressor", ["X"], ["Y"], domain=ML, n_targets=2, **a)
    # onnxruntime has no double thresholds and onnx.reference no *_as_tensor: compare with the
    # same trees given as float lists (thresholds and features are exact in float32)
    x = np.round(rng.normal(size=(30, 3)) * 4) / 4
    plain = helper.make_node(
        "TreeEnsembleRegressor",
        ["X"],
        ["Y"],
        domain=ML,
        n_targets=2,
        **dict(a, nodes_values=vals, target_weights=weights),
    )
    np.testing.assert_allclose(
        run_own_kernel(node, [x], {"": 19, ML: 3})[0],
        run_own_kernel(plain, [x], {"": 19, ML: 3})[0],
        rtol=1e-6,
    )
    xi = rng.integers(-2, 3, size=(30, 3)).astype(np.int64)
    node2 = helper.make_node(
        "TreeEnsembleRegressor",
        ["X"],
        ["Y"],
        domain=ML,
        n_targets=2,
        **v3_attrs(trees, rng, 2, "target"),
    )
    exp = run_ort(node2, [xi.astype(np.float32)], [TensorProto.FLOAT], 3)
    np.testing.assert_allclose(run_own_kernel(node2, [xi], {"": 19, ML: 3})[0], exp[0], rtol=1e-5)


@pytest.mark.parametrize("pt", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"])
@pytest.mark.parametrize("labels", [[3, 5, 9], ["a", "b", "c", "d"]])
def test_tree_classifier_multiclass_vs_ort(pt: str, labels: list[Any]) -> None:
    rng = np.random.default_rng(len(labels) * 10 + len(pt))
    trees = random_trees(rng, 6, 5, 4, ALL_MODES)
    a = v3_attrs(trees, rng, len(labels), "class", positive=pt == "PROBIT")
    if pt == "PROBIT":
        a["class_weights"] = [w / 4 for w in a["class_weights"]]
    key = "classlabels_strings" if isinstance(labels[0], str) else "classlabels_int64s"
    for base in (None, [0.05 * i for i in range(len(labels))]):
        extra = {} if base is None else {"base_values": base}
        node = helper.make_node(
            "TreeEnsembleClassifier",
            ["X"],
            ["Y", "Z"],
            domain=ML,
            post_transform=pt,
            **{key: labels},
            **a,
            **extra,
        )
        x = features(rng, 50, 5)
        yt = TensorProto.STRING if isinstance(labels[0], str) else TensorProto.INT64
        exp = run_ort(node, [x], [yt, TensorProto.FLOAT], 3)
        got = run_own_kernel(node, [x], {"": 19, ML: 3})
        np.testing.assert_array_equal(got[0], exp[0])
        assert got[1].dtype == np.float32
        np.testing.assert_allclose(got[1], exp[1], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("pt", ["NONE", "LOGISTIC", "SOFTMAX", "PROBIT"])
@pytest.mark.parametrize("positive", [True, False])
@pytest.mark.parametrize("base", [None, [0.1]])
def test_tree_classifier_binary_vs_ort(pt: str, positive: bool, base: list[float] | None) -> None:
    """Binary convention: weights on class 0 only give one score, expanded to two columns."""
    if pt == "PROBIT" and not positive:
        pytest.skip("onnxruntime writes one column only (the other is uninitialized memory)")
    rng = np.random.default_rng(int(positive) + 2 * len(pt))
    trees = random_trees(rng, 5, 3, 4, ["BRANCH_LEQ", "BRANCH_LT"])
    a = v3_attrs(trees, rng, 2, "class", positive=positive, one_class=0)
    extra = {} if base is None else {"base_values": base}
    node = helper.make_node(
        "TreeEnsembleClassifier",
        ["X"],
        ["Y", "Z"],
        domain=ML,
        post_transform=pt,
        classlabels_int64s=[4, 8],
        **a,
        **extra,
    )
    x = features(rng, 40, 3)
    exp = run_ort(node, [x], [TensorProto.INT64, TensorProto.FLOAT], 3)
    got = run_own_kernel(node, [x], {"": 19, ML: 3})
    np.testing.assert_array_equal(got[0], exp[0])
    if pt == "PROBIT":  # onnxruntime writes probit(s) to column 0, column 1 is left unset
        np.testing.assert_allclose(got[1][:, 1], exp[1][:, 0], rtol=1e-4, atol=1e-5)
    else:
        np.testing.assert_allclose(got[1], exp[1], rtol=1e-4, atol=1e-5)


def _v5_node(
    trees: list[list[dict[str, Any]]],
    rng: np.random.Generator,
    n_targets: int,
    agg: int,
    pt: int,
    dtype: Any,
    members: bool,
) -> onnx.NodeProto:
    """Convert node-dict trees to the opset-5 layout (interior nodes and leaves apart)."""
    feats, splits, modes, tid, fid, tl, fl, miss, mv = [], [], [], [], [], [], [], [], []
    leaf_t, leaf_w, roots = [], [], []
    code = {m: i for i, m in enumerate(ALL_MODES)}
    for nodes in trees:
        by_id = {nd["id"]: nd for nd in nodes}
        inner = [nd for nd in nodes if nd["mode"] != "LEAF"]
        base = len(feats)
        pos = {nd["id"]: base + k for k, nd in enumerate(inner)}
        lpos: dict[int, int] = {}
        for nd in nodes:
            if nd["mode"] == "LEAF":
                lpos[nd["id"]] = len(leaf_t)
                leaf_t.append(int(rng.integers(n_targets)))
                leaf_w.append(float(rng.normal()))
        for nd in inner:
            feats.append(nd["feature"])
            m = code[nd["mode"]]
            if members and rng.random() < 0.3:
                m = 6
                mv.extend(float(v) for v in rng.integers(1, 3, size=3) * rng.choice([-1, 1], 3))
                mv.append(np.nan)
            modes.append(m)
            splits.append(nd["value"])
            miss.append(nd["missing"])
            for key, ids, leafs in (("true", tid, tl), ("false", fid, fl)):
                child = by_id[nd[key]]
                is_leaf = child["mode"] == "LEAF"
                leafs.append(int(is_leaf))
                ids.append(lpos[child["id"]] if is_leaf else pos[child["id"]])
        root = next(nd for nd in nodes if nd["id"] == nodes[0]["id"])
        if root["mode"] == "LEAF":  # degenerate tree: a node whose both branches are that leaf
            feats.append(0), splits.append(0.0), modes.append(0), miss.append(0)
            tid.append(lpos[root["id"]]), fid.append(lpos[root["id"]]), tl.append(1), fl.append(1)
            roots.append(len(feats) - 1)
        else:
            roots.append(pos[root["id"]])
    et = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    t = lambda n, v: helper.make_tensor(n, et, [len(v)], v)  # noqa: E731
    extra = {"membership_values": t("m", mv)} if mv else {}
    return helper.make_node(
        "TreeEnsemble",
        ["X"],
        ["Y"],
        domain=ML,
        n_targets=n_targets,
        aggregate_function=agg,
        post_transform=pt,
        nodes_featureids=feats,
        nodes_splits=t("s", splits),
        nodes_modes=helper.make_tensor("md", TensorProto.UINT8, [len(modes)], modes),
        nodes_truenodeids=tid,
        nodes_falsenodeids=fid,
        nodes_trueleafs=tl,
        nodes_falseleafs=fl,
        nodes_missing_value_tracks_true=miss,
        leaf_targetids=leaf_t,
        leaf_weights=t("w", leaf_w),
        tree_roots=roots,
        **extra,
    )


@pytest.mark.parametrize("agg", [0, 1, 2, 3])
@pytest.mark.parametrize("members", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tree_ensemble_v5_vs_reference(agg: int, members: bool, dtype: Any) -> None:
    rng = np.random.default_rng(agg * 4 + members * 2 + (dtype == np.float64))
    trees = random_trees(rng, 5, 4, 4, ALL_MODES)
    node = _v5_node(trees, rng, 1, agg, 0, dtype, members)
    x = features(rng, 40, 4, dtype)
    exp = run_reference(node, [x], {"": 21, ML: 5})
    got = run_own_kernel(node, [x], {"": 21, ML: 5})
    assert got[0].dtype == dtype
    np.testing.assert_allclose(got[0], exp[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("pt", [0, 1, 2, 3])
def test_tree_ensemble_v5_post_transform_vs_ort(pt: int) -> None:
    rng = np.random.default_rng(40 + pt)
    trees = random_trees(rng, 6, 4, 4, ALL_MODES)
    node = _v5_node(trees, rng, 3, 1, pt, np.float32, False)
    x = features(rng, 40, 4)
    got = run_own_kernel(node, [x], {"": 21, ML: 5})
    # onnxruntime reads post_transform 1 as LOGISTIC and 2 as SOFTMAX; the spec says the reverse
    for a in node.attribute:
        if a.name == "post_transform":
            a.i = {1: 2, 2: 1}.get(a.i, a.i)
    exp = run_ort(node, [x], [TensorProto.FLOAT], 5)
    np.testing.assert_allclose(got[0], exp[0], rtol=1e-4, atol=1e-5)


def test_tree_errors() -> None:
    rng = np.random.default_rng(0)
    a = v3_attrs(random_trees(rng, 2, 3, 3, ["BRANCH_LEQ"]), rng, 1, "target")
    node = helper.make_node("TreeEnsembleRegressor", ["X"], ["Y"], domain=ML, **a)
    with pytest.raises(InvalidArgument):  # too few features
        run_own_kernel(node, [np.zeros((2, 1), np.float32)], {"": 19, ML: 3})
    bad = dict(a, nodes_truenodeids=[99] * len(a["nodes_truenodeids"]))
    node = helper.make_node("TreeEnsembleRegressor", ["X"], ["Y"], domain=ML, **bad)
    with pytest.raises(InvalidArgument):
        run_own_kernel(node, [np.zeros((2, 3), np.float32)], {"": 19, ML: 3})
    bad = dict(a, target_ids=[5] * len(a["target_ids"]))
    node = helper.make_node("TreeEnsembleRegressor", ["X"], ["Y"], domain=ML, **bad)
    with pytest.raises(InvalidArgument):
        run_own_kernel(node, [np.zeros((2, 3), np.float32)], {"": 19, ML: 3})


# ---------------------------------------------------------------------------------------------
# linear models and feature transforms, against onnx.reference (ml opset 3, LabelEncoder 4)


def _drawn_once() -> tuple[np.ndarray, np.ndarray, list[float]]:
    """Inputs for the parametrized cases below, drawn at import from a fixed seed of their own
    (so the same whatever tests run): float32 and float64 features, 12 coefficients."""
    r = np.random.default_rng(7)
    xf, xd = r.normal(size=(6, 4)).astype(np.float32), r.normal(size=(6, 4))
    return xf, xd, [float(v) for v in r.normal(size=12)]


XF, XD, COEF = _drawn_once()
XS = np.array([["a", "b"], ["c", "zz"], ["b", "a"]], dtype=object)
XI = np.array([[1, 5, 2], [3, 9, 1]], np.int64)

REFERENCE_CASES: list[tuple[str, str, dict[str, Any], list[Any], int]] = [
    (
        "linreg",
        "LinearRegressor",
        {"coefficients": COEF, "intercepts": [0.5, -1, 2], "targets": 3},
        [XF],
        3,
    ),
    ("linreg1", "LinearRegressor", {"coefficients": COEF[:4], "intercepts": [0.0]}, [XD], 3),
    (
        "linclf",
        "LinearClassifier",
        {"coefficients": COEF, "intercepts": [0.1, 0.2, 0.3], "classlabels_ints": [4, 5, 6]},
        [XF],
        3,
    ),
    (
        "linclf_soft",
        "LinearClassifier",
        {
            "coefficients": COEF,
            "intercepts": [0.1, 0.2, 0.3],
            "classlabels_strings": ["x", "y", "z"],
            "post_transform": "SOFTMAX",
        },
        [XF],
        3,
    ),
    (
        "linclf_bin",
        "LinearClassifier",
        {
            "coefficients": COEF[:4],
            "intercepts": [0.1],
            "classlabels_ints": [0, 1],
            "post_transform": "LOGISTIC",
        },
        [XF],
        3,
    ),
    ("binarizer", "Binarizer", {"threshold": 0.3}, [XD], 3),
    ("norm_max", "Normalizer", {"norm": "MAX"}, [XF], 3),
    ("norm_l1", "Normalizer", {"norm": "L1"}, [XD], 3),
    ("norm_l2", "Normalizer", {"norm": "L2"}, [XF], 3),
    ("scaler", "Scaler", {"offset": [0.1, 0.2, 0.3, 0.4], "scale": [2.0, 3, 4, 5]}, [XF], 3),
    ("scaler1", "Scaler", {"offset": [0.5], "scale": [2.0]}, [XF], 3),
    (
        "imputer",
        "Imputer",
        {"imputed_value_floats": [1.0, 2, 3, 4], "replaced_value_float": float("nan")},
        [np.where(XF > 1, np.nan, XF).astype(np.float32)],
        3,
    ),
    ("imputer_int", "Imputer", {"imputed_value_int64s": [7], "replaced_value_int64": 1}, [XI], 3),
    ("afe", "ArrayFeatureExtractor", {}, [XF, np.array([3, 0, 3], np.int64)], 3),
    ("afe_str", "ArrayFeatureExtractor", {}, [XS, np.array([1], np.int64)], 3),
    ("featvec", "FeatureVectorizer", {"inputdimensions": [4, 2]}, [XF, XF[:, :3]], 3),
    ("onehot", "OneHotEncoder", {"cats_int64s": [1, 2, 3, 9]}, [XI], 3),
    ("onehot_str", "OneHotEncoder", {"cats_strings": ["a", "b", "c"]}, [XS], 3),
    (
        "labelenc_si",
        "LabelEncoder",
        {"keys_strings": ["a", "b", "c"], "values_int64s": [1, 2, 3], "default_int64": 42},
        [XS],
        4,
    ),
    (
        "labelenc_if",
        "LabelEncoder",
        {"keys_int64s": [1, 2, 9], "values_floats": [0.5, 1.5, 2.5]},
        [XI],
        4,
    ),
    (
        "labelenc_is",
        "LabelEncoder",
        {"keys_int64s": [1, 2, 9], "values_strings": ["p", "q", "r"], "default_string": "?"},
        [XI],
        4,
    ),
]


@pytest.mark.parametrize("case", REFERENCE_CASES, ids=[c[0] for c in REFERENCE_CASES])
def test_vs_reference(case: tuple[str, str, dict[str, Any], list[Any], int]) -> None:
    _, op, attrs, inputs, ml = case
    names = [f"x{i}" for i in range(len(inputs))]
    outs = ["Y", "Z"] if op == "LinearClassifier" else ["Y"]
    node = helper.make_node(op, names, outs, domain=ML, **attrs)
    exp = run_reference(node, inputs, {"": 21, ML: ml})
    got = run_own_kernel(node, inputs, {"": 21, ML: ml})
    # values only: onnx.reference keeps float64 where the ML ops output float (so no `check`)
    for e, g in zip(exp, got):
        if e.dtype.kind in "UO":
            assert g.dtype == object
            np.testing.assert_array_equal(g.astype(str), e.astype(str))
        else:
            np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)


def test_label_encoder_opset2_and_category_mapper() -> None:
    node = helper.make_node(
        "LabelEncoder", ["x"], ["y"], domain=ML, keys_strings=["a", "b"], values_int64s=[4, 5]
    )
    got = run_own_kernel(node, [XS], {"": 21, ML: 2})[0]
    exp = run_ort(node, [XS], [TensorProto.INT64], 2)[0]
    np.testing.assert_array_equal(got, exp)
    cm = helper.make_node(
        "CategoryMapper",
        ["x"],
        ["y"],
        domain=ML,
        cats_strings=["a", "c"],
        cats_int64s=[10, 30],
        default_int64=-7,
    )
    np.testing.assert_array_equal(
        run_own_kernel(cm, [XS], {"": 21, ML: 1})[0], run_ort(cm, [XS], [TensorProto.INT64], 1)[0]
    )
    got_s = run_own_kernel(cm, [np.array([10, 20, 30], np.int64)], {"": 21, ML: 1})[0]
    exp_s = run_ort(cm, [np.array([10, 20, 30], np.int64)], [TensorProto.STRING], 1)[0]
    np.testing.assert_array_equal(got_s.astype(str), exp_s.astype(str))


def _own_map_kernel(node: onnx.NodeProto) -> Any:
    """The own kernel of a node whose input is a map (run_own_kernel types tensors only)."""
    from turnout.graph.ir import Graph
    from turnout.providers.cpu.registry import CPU_KERNELS
    from turnout.sdk.provider import KernelNode

    g = helper.make_graph([node], "g", [], [])
    n = Graph.from_proto(g, {"": 21, ML: 1}).nodes[0]
    kdef = CPU_KERNELS.lookup(ML, node.op_type, 1)
    assert kdef is not None
    return kdef.factory(KernelNode(n, 1, 1))


def test_zipmap_and_dict_vectorizer() -> None:
    zm = helper.make_node("ZipMap", ["x"], ["y"], domain=ML, classlabels_int64s=[1, 2, 3, 4])
    got = run_own_kernel(zm, [XF], {"": 21, ML: 1})[0]
    assert got == [dict(zip([1, 2, 3, 4], row.tolist())) for row in XF]
    dv = helper.make_node(
        "DictVectorizer", ["x"], ["y"], domain=ML, string_vocabulary=["a", "b", "c"]
    )
    rows = [{"a": 1.5, "c": 2.0}, {"b": -1.0}]
    from onnx.reference.ops.aionnxml.op_dict_vectorizer import DictVectorizer

    ref = DictVectorizer._run(None, rows, string_vocabulary=["a", "b", "c"])[0]
    fn = _own_map_kernel(dv)
    got_d = fn(rows)[0]
    np.testing.assert_array_equal(got_d, ref)
    # unknown keys are ignored; a single map gives one row
    got_1 = fn({"a": 1.5, "q": 9.0})[0]
    np.testing.assert_array_equal(np.asarray(got_1).ravel(), [1.5, 0.0, 0.0])


def test_linear_errors() -> None:
    node = helper.make_node(
        "LinearRegressor", ["x"], ["y"], domain=ML, coefficients=COEF, targets=3
    )
    with pytest.raises(InvalidArgument):
        run_own_kernel(node, [np.zeros((2, 5), np.float32)], {"": 21, ML: 3})
    afe = helper.make_node("ArrayFeatureExtractor", ["x", "i"], ["y"], domain=ML)
    with pytest.raises(InvalidArgument):
        run_own_kernel(afe, [XF, np.array([4], np.int64)], {"": 21, ML: 3})
    oh = helper.make_node("OneHotEncoder", ["x"], ["y"], domain=ML, cats_int64s=[1], zeros=0)
    with pytest.raises(InvalidArgument):
        run_own_kernel(oh, [XI], {"": 21, ML: 3})
