"""Tree-ensemble kernels of ai.onnx.ml: TreeEnsembleClassifier, TreeEnsembleRegressor, TreeEnsemble.

All three are parsed at session creation into one flat layout (`_Forest`): every interior node and
every leaf gets a global index; interior nodes carry feature, threshold, mode and their true/false
successors, leaves carry a dense row of per-target weights. Evaluation walks all trees for all rows
at once, one depth level per step, with fancy indexing; aggregation gathers leaf rows in chunks.

Semantics follow onnxruntime: a NaN feature takes the true branch when its node's
`missing_value_tracks_true` is set, else the comparison decides (so NaN goes false except under
BRANCH_NEQ); targets no leaf reached get 0 (+ base value) also under MIN/MAX; a regressor with one
target applies only PROBIT. Binary classifiers (two labels, weights on one class id) produce one
score s and write [1 - s, s] (all weights >= 0, label by s > 0.5) or [-s, s] (label by s > 0);
LOGISTIC writes [logistic(-s), logistic(s)] and PROBIT [-probit(s), probit(s)]. Where
onnxruntime's binary path reads uninitialized memory or mixes up base values, we keep this rule.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from turnout.graph.errors import InvalidArgument
from turnout.providers.cpu.registry import cpu_kernel
from turnout.sdk.provider import KernelFn, KernelNode

__all__: list[str] = []

_MODES = {
    "BRANCH_LEQ": 0,
    "BRANCH_LT": 1,
    "BRANCH_GTE": 2,
    "BRANCH_GT": 3,
    "BRANCH_EQ": 4,
    "BRANCH_NEQ": 5,
    "BRANCH_MEMBER": 6,
    "LEAF": 7,
}
_CMP = (np.less_equal, np.less, np.greater_equal, np.greater, np.equal, np.not_equal)
_GATHER_BUDGET = 1 << 22  # elements gathered at once when aggregating leaves


# ---------------------------------------------------------------------------------------------
# post transforms (onnxruntime's float formulas)


def _logistic(x: np.ndarray) -> np.ndarray:
    v = 1 / (1 + np.exp(-np.abs(x)))
    return np.where(x < 0, 1 - v, v).astype(x.dtype, copy=False)


def _probit(x: np.ndarray) -> np.ndarray:
    """sqrt(2) * erfinv(2x - 1) with onnxruntime's approximation of erfinv, always in float32 as
    there. Near x = 0.5 the formula cancels two values of about 4.33, so one ulp of x moves the
    result by up to 1e-3 relative: the scores must be summed as onnxruntime sums them."""
    f = np.float32
    y = 2 * x.astype(f) - 1
    sgn = np.where(y < 0, f(-1), f(1))
    lg = np.log((1 - y) * (1 + y))
    v = f(2 / (np.pi * 0.147)) + f(0.5) * lg
    v2 = f(1 / 0.147) * lg
    return f(1.41421356) * sgn * np.sqrt(-v + np.sqrt(v * v - v2))


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _softmax_zero(x: np.ndarray) -> np.ndarray:
    """Softmax over the non-zero entries of each row; zero entries stay (almost) zero."""
    vmax = x.max(axis=1, keepdims=True)
    nz = np.abs(x) > 1e-7
    e = np.where(nz, np.exp(x - vmax), x * np.exp(-vmax))
    s = np.where(nz, e, 0).sum(axis=1, keepdims=True)
    return (e / s).astype(x.dtype, copy=False)


_TRANSFORMS = {
    "NONE": None,
    "LOGISTIC": _logistic,
    "SOFTMAX": _softmax,
    "SOFTMAX_ZERO": _softmax_zero,
    "PROBIT": _probit,
}


def _transform(node: KernelNode) -> str:
    pt = node.attr("post_transform", "NONE")
    if pt not in _TRANSFORMS:
        raise InvalidArgument(f"{node.name}: unknown post_transform {pt!r}")
    return str(pt)


# ---------------------------------------------------------------------------------------------
# the flat forest


class _Forest:
    """Interior nodes [0, n_nodes) and leaves [n_nodes, n_nodes + n_leaves) of all trees."""

    def __init__(
        self,
        name: str,
        feature: np.ndarray,
        threshold: np.ndarray,
        mode: np.ndarray,
        true_next: np.ndarray,
        false_next: np.ndarray,
        missing_true: np.ndarray,
        roots: np.ndarray,
        leaf_values: np.ndarray,
        leaf_has: np.ndarray,
        members: dict[int, list[float]] | None = None,
        leaf_values64: np.ndarray | None = None,
    ) -> None:
        n = len(feature)
        self.name = name
        self.n_nodes = n
        self.roots = roots.astype(np.int64)
        self.feature = np.concatenate([feature.astype(np.int64), [0]])
        self.threshold = threshold
        self.mode = mode.astype(np.int8)
        self.true_next = true_next.astype(np.int64)
        self.false_next = false_next.astype(np.int64)
        self.missing_true = missing_true.astype(bool)
        self.any_missing = bool(self.missing_true.any())
        self.leaf_values = leaf_values  # (n_leaves, n_targets)
        # float32 weights combined in float64, for float64 features (None: leaf_values is it)
        self.leaf_values64 = leaf_values64
        self.leaf_has = leaf_has  # (n_leaves, n_targets) bool: leaf contributes to target
        self.modes_present = [int(m) for m in np.unique(self.mode)]
        self.max_feature = int(feature.max()) if n else -1
        # set membership: pairs (node, value id) as sorted integer keys
        if members:
            vals = np.unique(np.concatenate([np.asarray(v, np.float64) for v in members.values()]))
            self.member_values = vals
            keys = [
                node * len(vals) + np.searchsorted(vals, np.asarray(v, np.float64))
                for node, v in members.items()
            ]
            self.member_keys = np.unique(np.concatenate(keys).astype(np.int64))
        for what, idx in (("true", self.true_next), ("false", self.false_next)):
            if len(idx) and (idx.min() < 0 or idx.max() >= n + len(leaf_values)):
                raise InvalidArgument(f"{name}: a {what} successor is out of range")

    def leaves(self, x: np.ndarray) -> np.ndarray:
        """Global leaf index (minus n_nodes) reached by each row in each tree: (rows, trees)."""
        if x.ndim == 1:
            x = x.reshape(1, -1)
        if x.ndim != 2:
            raise InvalidArgument(f"{self.name}: X must be 1-D or 2-D, got shape {x.shape}")
        if self.max_feature >= x.shape[1]:
            raise InvalidArgument(
                f"{self.name}: a node reads feature {self.max_feature}, X has {x.shape[1]}"
            )
        n_rows, n = x.shape[0], self.n_nodes
        idx = np.broadcast_to(self.roots, (n_rows, len(self.roots))).copy()
        rows = np.broadcast_to(np.arange(n_rows)[:, None], idx.shape)
        flat_rows = rows.ravel()
        flat = idx.ravel()
        active = np.flatnonzero(flat < n)
        for _ in range(n + 1):
            if active.size == 0:
                return flat.reshape(idx.shape) - n
            nodes = flat[active]
            xv = x[flat_rows[active], self.feature[nodes]]
            go = self._decide(nodes, xv)
            nxt = np.where(go, self.true_next[nodes], self.false_next[nodes])
            flat[active] = nxt
            active = active[nxt < n]
        raise InvalidArgument(f"{self.name}: the trees contain a cycle")

    def _decide(self, nodes: np.ndarray, xv: np.ndarray) -> np.ndarray:
        if len(self.modes_present) == 1:
            go = self._compare(self.modes_present[0], nodes, xv)
        else:
            go = np.zeros(len(nodes), bool)
            mode = self.mode[nodes]
            for m in self.modes_present:
                sel = np.flatnonzero(mode == m)
                if sel.size:
                    go[sel] = self._compare(m, nodes[sel], xv[sel])
        if self.any_missing:
            go |= self.missing_true[nodes] & np.isnan(xv)
        return go

    def _compare(self, m: int, nodes: np.ndarray, xv: np.ndarray) -> np.ndarray:
        if m < 6:
            return _CMP[m](xv, self.threshold[nodes])
        vals = self.member_values
        pos = np.minimum(np.searchsorted(vals, xv), len(vals) - 1)
        hit = vals[pos] == xv
        key = nodes * len(vals) + pos
        return hit & np.isin(key, self.member_keys)

    def aggregate(self, leaves: np.ndarray, agg: str, dtype: Any) -> tuple[np.ndarray, np.ndarray]:
        """(scores, has): aggregated leaf values per row and target, and which targets any
        reached leaf contributed to."""
        n_rows, n_trees = leaves.shape
        n_targets = self.leaf_values.shape[1]
        scores = np.zeros((n_rows, n_targets), dtype)
        has = np.zeros((n_rows, n_targets), bool)
        table = self.leaf_values
        if self.leaf_values64 is not None and scores.dtype == np.float64:
            table = self.leaf_values64
        step = max(1, _GATHER_BUDGET // max(1, n_trees * n_targets))
        for s in range(0, n_rows, step):
            lv = leaves[s : s + step]
            g = table[lv]
            h = self.leaf_has[lv]
            has[s : s + step] = h.any(axis=1)
            if agg in ("SUM", "AVERAGE"):
                scores[s : s + step] = np.where(h, g, 0).sum(axis=1)
            elif agg == "MIN":
                scores[s : s + step] = np.where(h, g, np.inf).min(axis=1)
            else:
                scores[s : s + step] = np.where(h, g, -np.inf).max(axis=1)
        if agg == "AVERAGE" and n_trees:
            scores /= dtype.type(n_trees) if hasattr(dtype, "type") else n_trees
        scores[~has] = 0
        return scores, has


def _attr_array(node: KernelNode, name: str, dtype: Any) -> np.ndarray | None:
    """`name_as_tensor` when present, else the list attribute `name`, as an array (or None)."""
    t = node.attr(name + "_as_tensor")
    if t is not None:
        return np.asarray(t).ravel()
    v = node.attr(name)
    return None if v is None else np.asarray(v, dtype)


def _parse_v3(node: KernelNode, kind: str) -> tuple[_Forest, int]:
    """Opset 1/3 layout: nodes keyed by (tree id, node id); leaves are LEAF-mode nodes and the
    target_* / class_* lists assign weights to leaves."""
    name = node.name
    treeids = np.asarray(node.attr("nodes_treeids", []), np.int64)
    nodeids = np.asarray(node.attr("nodes_nodeids", []), np.int64)
    n_all = len(treeids)
    modes_s = node.attr("nodes_modes", [])
    try:
        modes = np.array([_MODES[m] for m in modes_s], np.int8)
    except KeyError as e:
        raise InvalidArgument(f"{name}: unknown node mode {e.args[0]!r}") from None
    if (modes == 6).any():
        raise InvalidArgument(f"{name}: BRANCH_MEMBER needs TreeEnsemble (ai.onnx.ml opset 5)")
    values = _attr_array(node, "nodes_values", np.float32)
    if values is None:
        values = np.zeros(n_all, np.float32)
    lists: dict[str, np.ndarray] = {
        "nodes_featureids": np.asarray(node.attr("nodes_featureids", []), np.int64),
        "nodes_truenodeids": np.asarray(node.attr("nodes_truenodeids", []), np.int64),
        "nodes_falsenodeids": np.asarray(node.attr("nodes_falsenodeids", []), np.int64),
        "nodes_modes": modes,
        "nodes_values": values,
    }
    miss = node.attr("nodes_missing_value_tracks_true")
    missing = np.zeros(n_all, bool) if not miss else np.asarray(miss, np.int64) != 0
    for k, v in [*lists.items(), ("nodes_nodeids", nodeids)]:
        if len(v) != n_all:
            raise InvalidArgument(f"{name}: {k} has {len(v)} entries, nodes_treeids {n_all}")
    if len(missing) != n_all:
        raise InvalidArgument(f"{name}: nodes_missing_value_tracks_true has a wrong length")

    is_leaf = modes == 7
    inner = np.flatnonzero(~is_leaf)
    leaf = np.flatnonzero(is_leaf)
    n_in = len(inner)
    glob = np.empty(n_all, np.int64)
    glob[inner] = np.arange(n_in)
    glob[leaf] = n_in + np.arange(len(leaf))
    where = {(int(t), int(i)): int(g) for t, i, g in zip(treeids, nodeids, glob)}
    if len(where) != n_all:
        raise InvalidArgument(f"{name}: duplicate (tree id, node id) pairs")

    def succ(ids: np.ndarray) -> np.ndarray:
        try:
            return np.array(
                [where[(int(t), int(i))] for t, i in zip(treeids[inner], ids[inner])], np.int64
            )
        except KeyError as e:
            raise InvalidArgument(f"{name}: successor node {e.args[0]} does not exist") from None

    tree_list, first = np.unique(treeids, return_index=True)
    roots = glob[first]

    prefix = "target" if kind == "regressor" else "class"
    t_tree = np.asarray(node.attr(f"{prefix}_treeids", []), np.int64)
    t_node = np.asarray(node.attr(f"{prefix}_nodeids", []), np.int64)
    t_id = np.asarray(node.attr(f"{prefix}_ids", []), np.int64)
    t_w = _attr_array(node, f"{prefix}_weights", np.float32)
    if t_w is None:
        t_w = np.zeros(len(t_id), np.float32)
    if not (len(t_tree) == len(t_node) == len(t_id) == len(t_w)):
        raise InvalidArgument(f"{name}: {prefix}_* attributes differ in length")
    if kind == "regressor":
        n_targets = int(node.attr("n_targets", 1))
    else:
        n_targets = max(
            len(node.attr("classlabels_int64s") or []), len(node.attr("classlabels_strings") or [])
        )
    if len(t_id) and (t_id.min() < 0 or t_id.max() >= n_targets):
        raise InvalidArgument(f"{name}: a {prefix} id is outside [0, {n_targets})")
    try:
        t_leaf = np.array([where[(int(t), int(i))] for t, i in zip(t_tree, t_node)], np.int64)
    except KeyError as e:
        raise InvalidArgument(f"{name}: {prefix} weight on unknown node {e.args[0]}") from None
    if len(t_leaf) and (t_leaf < n_in).any():
        raise InvalidArgument(f"{name}: a {prefix} weight sits on a non-leaf node")
    wdtype = np.float64 if t_w.dtype == np.float64 else np.float32
    lv64, lh = _leaf_table(
        len(leaf),
        n_targets,
        t_leaf - n_in,
        t_id,
        t_w.astype(np.float64),
        str(node.attr("aggregate_function", "SUM")),
    )
    forest = _Forest(
        name,
        lists["nodes_featureids"][inner],
        values[inner],
        modes[inner],
        succ(lists["nodes_truenodeids"]),
        succ(lists["nodes_falsenodeids"]),
        missing[inner],
        roots,
        lv64.astype(wdtype),
        lh,
        leaf_values64=lv64 if wdtype != np.float64 else None,  # no second copy of a float64 table
    )
    del tree_list
    return forest, n_targets


def _leaf_table(
    n_leaves: int, n_targets: int, leaf: np.ndarray, target: np.ndarray, w: np.ndarray, agg: str
) -> tuple[np.ndarray, np.ndarray]:
    """Dense (leaf, target) weights; several weights on one pair combine like the aggregate."""
    lv = np.zeros((n_leaves, n_targets), w.dtype)
    lh = np.zeros((n_leaves, n_targets), bool)
    if agg == "MIN":
        lv[:] = np.inf
        np.minimum.at(lv, (leaf, target), w)
    elif agg == "MAX":
        lv[:] = -np.inf
        np.maximum.at(lv, (leaf, target), w)
    else:
        np.add.at(lv, (leaf, target), w)
    lh[leaf, target] = True
    lv[~lh] = 0
    return lv, lh


def _score_dtype(x: np.ndarray, leaf_values: np.ndarray) -> Any:
    """Scores are summed in float64 for float64 features, as onnxruntime's double kernels do,
    else in the leaf values' type."""
    return np.dtype(np.float64) if x.dtype == np.float64 else leaf_values.dtype


def _features(x: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    if x.dtype.kind in "iub":
        return x.astype(np.float64 if thresholds.dtype == np.float64 else np.float32)
    return x


def _finish_scores(scores: np.ndarray, base: np.ndarray | None, pt: str) -> np.ndarray:
    if base is not None and len(base) == scores.shape[1]:
        scores = scores + base.astype(scores.dtype)
    elif base is not None and len(base) == 1:
        scores = scores + scores.dtype.type(base[0])
    fn = _TRANSFORMS[pt]
    if fn is None or (scores.shape[1] == 1 and pt != "PROBIT"):
        return scores
    return fn(scores)


# ---------------------------------------------------------------------------------------------
# kernels


@cpu_kernel("TreeEnsembleRegressor", since=1, domain="ai.onnx.ml")
def tree_ensemble_regressor(node: KernelNode) -> KernelFn:
    agg = str(node.attr("aggregate_function", "SUM"))
    if agg not in ("SUM", "AVERAGE", "MIN", "MAX"):
        raise InvalidArgument(f"{node.name}: unknown aggregate_function {agg!r}")
    pt = _transform(node)
    forest, n_targets = _parse_v3(node, "regressor")
    base = _attr_array(node, "base_values", np.float32)
    if base is not None and len(base) not in (0, 1, n_targets):
        raise InvalidArgument(f"{node.name}: base_values must have n_targets entries")

    def run(x: np.ndarray) -> tuple[np.ndarray]:
        leaves = forest.leaves(_features(x, forest.threshold))
        scores, _ = forest.aggregate(leaves, agg, _score_dtype(x, forest.leaf_values))
        return (_finish_scores(scores, base, pt).astype(np.float32, copy=False),)

    return run


@cpu_kernel("TreeEnsembleClassifier", since=1, domain="ai.onnx.ml")
def tree_ensemble_classifier(node: KernelNode) -> KernelFn:
    pt = _transform(node)
    ints = node.attr("classlabels_int64s")
    strs = node.attr("classlabels_strings")
    if ints:
        labels: np.ndarray = np.asarray(ints, np.int64)
    elif strs:
        labels = np.array(strs, dtype=object)
    else:
        raise InvalidArgument(f"{node.name}: classlabels_int64s or classlabels_strings required")
    if len(labels) < 2:
        raise InvalidArgument(f"{node.name}: at least two class labels are required")
    forest, n_classes = _parse_v3(node, "classifier")
    base = _attr_array(node, "base_values", np.float32)
    if base is not None and len(base) == 0:
        base = None
    if base is not None and len(base) not in (1, n_classes):
        raise InvalidArgument(f"{node.name}: base_values must have one entry per class")
    class_ids = np.unique(np.asarray(node.attr("class_ids", []), np.int64))
    weights = _attr_array(node, "class_weights", np.float32)
    binary = n_classes == 2 and len(class_ids) == 1
    all_positive = weights is None or bool((weights >= 0).all())

    def run(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        leaves = forest.leaves(_features(x, forest.threshold))
        dtype = _score_dtype(x, forest.leaf_values)
        scores, has = forest.aggregate(leaves, "SUM", dtype)
        if binary:
            cid = int(class_ids[0])
            s = scores[:, cid]
            if base is not None:
                s = s + s.dtype.type(base[0] if len(base) == 1 else base[cid])
            if all_positive and pt not in ("LOGISTIC", "PROBIT"):
                z = np.stack([1 - s, s], axis=1)
                pos = s > 0.5
            else:
                pos = s > 0
                if pt == "LOGISTIC":
                    z = np.stack([_logistic(-s), _logistic(s)], axis=1)
                elif pt == "PROBIT":
                    p = _probit(s)
                    z = np.stack([-p, p], axis=1)
                else:
                    z = np.stack([-s, s], axis=1)
            if all_positive and pt in ("LOGISTIC", "PROBIT"):
                pos = s > 0.5
            return labels[pos.astype(np.int64)], z.astype(np.float32, copy=False)
        if base is not None:
            scores = scores + (base.astype(dtype) if len(base) > 1 else dtype.type(base[0]))
            has = np.ones_like(has)
        best = np.argmax(np.where(has, scores, -np.inf), axis=1)
        fn = _TRANSFORMS[pt]
        z = scores if fn is None else fn(scores)
        return labels[best], z.astype(np.float32, copy=False)

    return run


@cpu_kernel("TreeEnsemble", since=5, domain="ai.onnx.ml")
def tree_ensemble(node: KernelNode) -> KernelFn:
    """ai.onnx.ml opset 5: nodes and leaves apart, tensors for values, set membership."""
    name = node.name
    aggs = {0: "AVERAGE", 1: "SUM", 2: "MIN", 3: "MAX"}
    pts = {0: "NONE", 1: "SOFTMAX", 2: "LOGISTIC", 3: "SOFTMAX_ZERO", 4: "PROBIT"}
    agg = aggs.get(int(node.attr("aggregate_function", 1)))
    pt = pts.get(int(node.attr("post_transform", 0)))
    if agg is None or pt is None:
        raise InvalidArgument(f"{name}: unknown aggregate_function or post_transform")
    splits = np.asarray(node.attr("nodes_splits")).ravel()
    feature = np.asarray(node.attr("nodes_featureids", []), np.int64)
    modes = np.asarray(np.asarray(node.attr("nodes_modes")).ravel(), np.int64)
    t_ids = np.asarray(node.attr("nodes_truenodeids", []), np.int64)
    f_ids = np.asarray(node.attr("nodes_falsenodeids", []), np.int64)
    t_leaf = np.asarray(node.attr("nodes_trueleafs", []), np.int64) != 0
    f_leaf = np.asarray(node.attr("nodes_falseleafs", []), np.int64) != 0
    leaf_t = np.asarray(node.attr("leaf_targetids", []), np.int64)
    leaf_w = np.asarray(node.attr("leaf_weights")).ravel()
    roots = np.asarray(node.attr("tree_roots", []), np.int64)
    n_targets = int(node.attr("n_targets", 1))
    n = len(feature)
    miss_t = node.attr("nodes_missing_value_tracks_true")
    missing = np.zeros(n, bool) if miss_t is None else np.asarray(miss_t).ravel() != 0
    if not (
        len(splits)
        == len(modes)
        == len(t_ids)
        == len(f_ids)
        == len(t_leaf)
        == len(f_leaf)
        == len(missing)
        == n
    ):
        raise InvalidArgument(f"{name}: nodes_* attributes differ in length")
    if len(leaf_t) != len(leaf_w):
        raise InvalidArgument(f"{name}: leaf_targetids and leaf_weights differ in length")
    if (modes < 0).any() or (modes > 6).any():
        raise InvalidArgument(f"{name}: unknown node mode")
    if len(leaf_t) and (leaf_t.min() < 0 or leaf_t.max() >= n_targets):
        raise InvalidArgument(f"{name}: a leaf target id is outside [0, {n_targets})")
    members: dict[int, list[float]] = {}
    if (modes == 6).any():
        mv = node.attr("membership_values")
        if mv is None:
            raise InvalidArgument(f"{name}: BRANCH_MEMBER nodes need membership_values")
        groups = np.split(
            np.asarray(mv, np.float64).ravel(),
            np.flatnonzero(np.isnan(np.asarray(mv, np.float64).ravel())) + 1,
        )
        member_nodes = np.flatnonzero(modes == 6)
        if len(groups) < len(member_nodes):
            raise InvalidArgument(f"{name}: membership_values lacks a set for a member node")
        for k, nd in enumerate(member_nodes):
            members[int(nd)] = [v for v in groups[k] if not np.isnan(v)]
    # a root whose both branches are the same leaf is a single-leaf tree
    if len(roots) and (roots.min() < 0 or roots.max() >= max(n, 1)):
        raise InvalidArgument(f"{name}: a tree root is out of range")
    degenerate = t_leaf[roots] & f_leaf[roots] & (t_ids[roots] == f_ids[roots]) if n else roots < 0
    groots = np.where(degenerate, n + t_ids[roots] if n else 0, roots)
    lv, lh = _leaf_table(len(leaf_w), n_targets, np.arange(len(leaf_w)), leaf_t, leaf_w, agg)
    forest = _Forest(
        name,
        feature,
        splits,
        np.where(modes == 6, 6, modes),
        np.where(t_leaf, n + t_ids, t_ids),
        np.where(f_leaf, n + f_ids, f_ids),
        missing,
        groots,
        lv,
        lh,
        members,
    )

    def run(x: np.ndarray) -> tuple[np.ndarray]:
        leaves = forest.leaves(x)
        scores, _ = forest.aggregate(leaves, agg, lv.dtype)
        return (_finish_scores(scores, None, pt).astype(x.dtype, copy=False),)

    return run
