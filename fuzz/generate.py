"""Fuzz cases: node tests' nodes with mutated values, attributes, dtypes and shapes, alone or
chained 2-5 deep.

A case is a pure function of (campaign seed, case index), so `run.py --seed S --only I` rebuilds
exactly the case a long run reported. Mutations stay close to the seeds (values within the seed's
integer range, attribute values the node tests use, dtypes the schema allows) so that most cases
are valid models and the runtimes are compared on outputs, not only on error paths.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .seeds import Seed, SeedPool

__all__ = ["MUTATIONS", "OUTPUTS_PROBABILITY", "FuzzCase", "Generator", "m_outputs"]


@dataclass(frozen=True)
class FuzzCase:
    """One generated model and its feeds."""

    id: str
    model: bytes
    feeds: dict[str, np.ndarray]
    ops: tuple[str, ...]
    seeds: tuple[str, ...] = ()
    mutations: tuple[str, ...] = ()
    rtol: float = 1e-3
    atol: float = 1e-7

    def save(self, directory: Path, stem: str) -> tuple[Path, Path]:
        """Write `stem.onnx` and `stem.npz` (the corpus format)."""
        directory.mkdir(parents=True, exist_ok=True)
        model_path, data_path = directory / f"{stem}.onnx", directory / f"{stem}.npz"
        model_path.write_bytes(self.model)
        buf = io.BytesIO()
        np.savez_compressed(buf, **self.feeds)
        data_path.write_bytes(buf.getvalue())
        return model_path, data_path

    @classmethod
    def load(cls, model_path: Path) -> FuzzCase:
        """Read a saved case back (`x.onnx` with its `x.npz`)."""
        model = onnx.load(str(model_path))
        with np.load(model_path.with_suffix(".npz"), allow_pickle=False) as data:
            feeds = {k: data[k] for k in data.files}
        ops = tuple(n.op_type for n in model.graph.node)
        return cls(model_path.stem, model.SerializeToString(), feeds, ops)


@dataclass
class _Node:
    """A node under mutation: one value per node input (None for an empty name)."""

    seed: Seed
    node: onnx.NodeProto
    values: list[np.ndarray | None]
    frozen: set[int] = field(default_factory=set)

    @classmethod
    def of(cls, seed: Seed) -> _Node:
        node = onnx.NodeProto()
        node.CopyFrom(seed.node)
        it = iter(seed.inputs)
        values = [np.array(next(it)) if name else None for name in node.input]
        return cls(seed, node, values)

    def positions(self, kinds: str) -> list[int]:
        return [i for i, v in enumerate(self.values) if v is not None and v.dtype.kind in kinds]


Rng = np.random.Generator
Mutation = Callable[[Rng, SeedPool, _Node], str | None]

_SPECIALS = (np.nan, np.inf, -np.inf, -0.0, 0.0, 1e30, 1e-30)

_NP_TYPES = {
    "tensor(float)": np.float32,
    "tensor(double)": np.float64,
    "tensor(float16)": np.float16,
    "tensor(int8)": np.int8,
    "tensor(int16)": np.int16,
    "tensor(int32)": np.int32,
    "tensor(int64)": np.int64,
    "tensor(uint8)": np.uint8,
    "tensor(uint16)": np.uint16,
    "tensor(uint32)": np.uint32,
    "tensor(uint64)": np.uint64,
    "tensor(bool)": np.bool_,
}


@functools.cache
def _schema(op_type: str, opset: int, domain: str) -> onnx.defs.OpSchema | None:
    try:
        return onnx.defs.get_schema(op_type, opset, domain)
    except onnx.defs.SchemaError:
        return None


def _opset(seed: Seed) -> int:
    return dict(seed.opsets).get(seed.node.domain, 1)


def _cast(arr: np.ndarray, dtype: Any) -> np.ndarray:
    dt = np.dtype(dtype)
    if dt.kind in "iu" and arr.dtype.kind == "f":
        info = np.iinfo(dt)
        with np.errstate(all="ignore"):
            arr = np.clip(np.nan_to_num(arr), info.min, info.max)
    with np.errstate(all="ignore"):
        return arr.astype(dt)


# ---------------------------------------------------------------------------- value mutations


def _random_floats(rng: Rng, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    scale = rng.choice([1.0, 1e-3, 10.0, 1e3])
    return _cast(rng.standard_normal(shape) * scale, dtype)


def m_values(rng: Rng, pool: SeedPool, n: _Node) -> str | None:
    """New random floats in the same shapes."""
    pos = n.positions("f")
    if not pos:
        return None
    for i in pos:
        v = n.values[i]
        assert v is not None
        n.values[i] = _random_floats(rng, v.shape, v.dtype)
    return "values"


def m_specials(rng: Rng, pool: SeedPool, n: _Node) -> str | None:
    """NaN, infinities, signed zeros, huge and tiny values at random positions."""
    pos = [i for i in n.positions("f") if n.values[i].size]  # type: ignore[union-attr]
    if not pos:
        return None
    i = int(rng.choice(pos))
    v = n.values[i].copy()  # type: ignore[union-attr]
    flat = v.reshape(-1)
    k = int(rng.integers(1, max(1, flat.size // 3) + 1))
    with np.errstate(all="ignore"):
        flat[rng.choice(flat.size, k, replace=False)] = rng.choice(_SPECIALS, k)
    n.values[i] = v
    return "specials"


def m_ints(rng: Rng, pool: SeedPool, n: _Node) -> str | None:
    """New integers within the seed input's own range (indices and shapes stay plausible)."""
    pos = [i for i in n.positions("iub") if n.values[i].size]  # type: ignore[union-attr]
    if not pos:
        return None
    i = int(rng.choice(pos))
    v = n.values[i]
    assert v is not None
    if v.dtype.kind == "b":
        n.values[i] = rng.integers(0, 2, v.shape).astype(bool)
    else:
        lo, hi = int(v.min()), int(v.max())
        n.values[i] = rng.integers(lo, hi + 1, v.shape).astype(v.dtype)
    return "ints"


def m_dtype(rng: Rng, pool: SeedPool, n: _Node) -> str | None:
    """Every input bound to one type parameter cast to another type the schema allows."""
    schema = _schema(n.node.op_type, _opset(n.seed), n.node.domain)
    if schema is None or not schema.inputs:
        return None
    groups: dict[str, list[int]] = {}
    for i, v in enumerate(n.values):
        if v is None:
            continue
        formal = schema.inputs[min(i, len(schema.inputs) - 1)]
        groups.setdefault(formal.type_str, []).append(i)
    constraints = {c.type_param_str: c.allowed_type_strs for c in schema.type_constraints}
    choices = [t for t in groups if t in constraints]
    if not choices:
        return None
    param = str(rng.choice(choices))
    members = groups[param]
    current = {n.values[i].dtype for i in members}  # type: ignore[union-attr]
    allowed = [
        _NP_TYPES[t]
        for t in constraints[param]
        if t in _NP_TYPES and np.dtype(_NP_TYPES[t]) not in current
    ]
    if len(current) != 1 or not allowed:
        return None
    new = allowed[int(rng.integers(len(allowed)))]
    for i in members:
        n.values[i] = _cast(n.values[i], new)  # type: ignore[arg-type]
    return f"dtype:{np.dtype(new).name}"


# ---------------------------------------------------------------------------- shape mutations


def m_shrink(rng: Rng, pool: SeedPool, n: _Node) -> str | None:
    """One dimension cut to 0, 1 or half, in every input of that kind that shares it."""
    pos = [i for i in n.positions("biuf") if n.values[i].ndim]  # type: ignore[union-attr]
    if not pos:
        return None
    ref = n.values[int(rng.choice(pos))]
    assert ref is not None
    j = int(rng.integers(1, ref.ndim + 1))  # counted from the end, as broadcasting aligns
    size = ref.shape[-j]
    new = int(rng.choice([0, 1, size // 2]))
    if new == size:
        return None
    for i, v in enumerate(n.values):
        if v is not None and v.dtype.kind == ref.dtype.kind and v.ndim >= j and v.shape[-j] == size:
            n.values[i] = np.ascontiguousarray(v[(slice(None),) * (v.ndim - j) + (slice(0, new),)])
    return f"shrink:{new}"


def m_broadcast(rng: Rng, pool: SeedPool, n: _Node) -> str | None:
    """One of two same-shaped inputs reduced to a broadcastable shape (1-dims, lower rank)."""
    pos = [i for i in n.positions("biuf") if n.values[i].ndim]  # type: ignore[union-attr]
    pairs = [i for i in pos if any(n.values[k].shape == n.values[i].shape for k in pos if k != i)]  # type: ignore[union-attr]
    if not pairs:
        return None
    i = int(rng.choice(pairs))
    v = n.values[i]
    assert v is not None
    how = str(rng.choice(["ones", "rank", "scalar"]))
    if how == "ones":
        keep = rng.integers(0, 2, v.ndim).astype(bool)
        v = v[tuple(slice(None) if k else slice(0, 1) for k in keep)]
    elif (how == "rank" or not v.size) and v.ndim >= 2:
        v = v[0] if v.shape[0] else np.zeros(v.shape[1:], v.dtype)
    elif v.size:
        v = v.reshape(-1)[:1].reshape(())
    else:
        return None
    n.values[i] = np.ascontiguousarray(v)
    return f"broadcast:{how}"


def m_freeze(rng: Rng, pool: SeedPool, n: _Node) -> str | None:
    """An input becomes an initializer (constant folding, static shapes, constant inputs)."""
    pos = [i for i, v in enumerate(n.values) if v is not None and i not in n.frozen]
    if not pos:
        return None
    n.frozen.add(int(rng.choice(pos)))
    return "freeze"


# ---------------------------------------------------------------------------- attributes


def _perturb(rng: Rng, a: onnx.AttributeProto, flag: bool) -> onnx.AttributeProto | None:
    """A nearby value; a 0/1 flag is only flipped (other values are not meaningful)."""
    A = onnx.AttributeProto
    if a.type == A.INT and flag:  # keepdims=3: ORT tests ==1, onnx.reference truthiness
        return helper.make_attribute(a.name, 1 - a.i)
    if a.type == A.INT:
        v = a.i
        return helper.make_attribute(a.name, int(rng.choice([v - 1, v + 1, 0, -v, v + 2, -1])))
    if a.type == A.FLOAT:
        v = a.f
        new = float(rng.choice([0.0, -v, v * 2, v / 2, np.nan, np.inf, 1e-7]))
        return helper.make_attribute(a.name, new)
    if a.type in (A.INTS, A.FLOATS):
        vals = list(a.ints) if a.type == A.INTS else list(a.floats)
        how = str(rng.choice(["bump", "zero", "reverse", "drop", "repeat"]))
        if not vals:
            return None
        k = int(rng.integers(len(vals)))
        if how == "bump":
            vals[k] = vals[k] + type(vals[k])(rng.choice([-1, 1, 2]))
        elif how == "zero":
            vals[k] = type(vals[k])(0)
        elif how == "reverse":
            vals = vals[::-1]
        elif how == "drop":
            vals = vals[:-1]
        else:
            vals = [*vals, vals[-1]]
        return helper.make_attribute(a.name, vals, attr_type=a.type)
    return None


def m_attr(rng: Rng, pool: SeedPool, n: _Node) -> str | None:
    """An attribute perturbed, swapped for another value the node tests use, dropped or added."""
    op = n.seed.op
    known = pool.attribute_pool.get(op, {})
    present = {a.name: a for a in n.node.attribute if a.name in known or a.type in (1, 2, 6, 7)}
    absent = [name for name in known if name not in present]
    names = sorted(present) + absent
    if not names:
        return None
    name = str(rng.choice(names))
    if name not in present:
        n.node.attribute.append(known[name][int(rng.integers(len(known[name])))])
        return f"attr+{name}"
    schema = _schema(n.node.op_type, _opset(n.seed), n.node.domain)
    required = bool(schema and name in schema.attributes and schema.attributes[name].required)
    choices = ["perturb", "perturb", "swap"] + ([] if required else ["drop"])
    how = str(rng.choice(choices))
    others = [a for a in known.get(name, []) if a != present[name]]
    new: onnx.AttributeProto | None
    if how == "swap" and others:
        new = others[int(rng.integers(len(others)))]
    elif how == "drop":
        new = None
    else:
        flag = all(a.type == a.INT and a.i in (0, 1) for a in known.get(name, [present[name]]))
        new = _perturb(rng, present[name], flag)
        if new is None:
            return None
    attrs = [a for a in n.node.attribute if a.name != name]
    del n.node.attribute[:]
    n.node.attribute.extend(attrs + ([new] if new is not None else []))
    return f"attr{'-' if new is None else '~'}{name}"


# ---------------------------------------------------------------------------- outputs


def m_outputs(rng: Rng, pool: SeedPool, n: _Node) -> str | None:
    """Optional outputs left out: trailing ones dropped, others blanked to "" (one of the
    subsets the schema allows and onnx accepts, `turnout.tools.testing.output_variants`)."""
    from turnout.tools.testing import one_node_model, optional_outputs, output_variants

    opsets = dict(n.seed.opsets)
    if not any(optional_outputs(n.node, opsets)):
        return None
    variants = output_variants(one_node_model(n.node, n.values, opsets))
    if not variants:
        return None
    outputs = list(variants[int(rng.integers(len(variants)))].graph.node[0].output)
    del n.node.output[:]
    n.node.output.extend(outputs)
    return "outputs:" + ",".join(y or "-" for y in outputs)


OUTPUTS_PROBABILITY = 0.5
"""How often `m_outputs` changes the last node (the one whose outputs the graph returns), where
it has optional outputs. Drawn from a random stream of its own: adding it left every case whose
last node has none exactly as it was."""


MUTATIONS: dict[str, tuple[Mutation, float]] = {
    "values": (m_values, 3.0),
    "specials": (m_specials, 2.0),
    "attr": (m_attr, 3.0),
    "dtype": (m_dtype, 2.0),
    "shrink": (m_shrink, 1.5),
    "broadcast": (m_broadcast, 1.0),
    "ints": (m_ints, 0.7),
    "freeze": (m_freeze, 1.0),
}
"""name -> (mutation, relative weight)."""

_FOLLOWER = ("values", "specials", "attr", "freeze", "ints")
"""What a chained node may change: its first input comes from the node before."""


# ---------------------------------------------------------------------------- model building


def _compatible_opsets(nodes: list[_Node]) -> dict[str, int] | None:
    """The model's opsets (highest per domain), or None when some node's op changed in between."""
    opsets: dict[str, int] = {}
    for n in nodes:
        for d, v in n.seed.opsets:
            opsets[d] = max(opsets.get(d, v), v)
    for n in nodes:
        dom = n.node.domain
        own = _schema(n.node.op_type, _opset(n.seed), dom)
        at = _schema(n.node.op_type, opsets.get(dom, 1), dom)
        if own is None or at is None or own.since_version != at.since_version:
            return None
    return opsets


def _input_info(name: str, v: np.ndarray, dynamic: bool) -> onnx.ValueInfoProto:
    from turnout.graph.dtypes import elem_type_of

    shape: list[int | str] = list(v.shape)
    if dynamic:
        shape = [f"{name}_d{k}" for k in range(v.ndim)]
    return helper.make_tensor_value_info(name, elem_type_of(v.dtype), shape)


def _build(
    nodes: list[_Node], opsets: dict[str, int], dynamic: bool
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """Nodes wired in a chain (node k's first input is node k-1's first output), names made
    unique per node; graph outputs are the last node's outputs, typed by shape inference."""
    protos, inputs, inits, feeds = [], [], [], {}
    prev: str | None = None
    for k, n in enumerate(nodes):
        node = onnx.NodeProto()
        node.CopyFrom(n.node)
        node.name = f"n{k}_{n.node.op_type}"
        rename = {x: f"{x}_{k}" if len(nodes) > 1 else x for x in [*node.input, *node.output] if x}
        for i, x in enumerate(node.input):
            if not x:
                continue
            node.input[i] = rename[x]
            if i == 0 and prev is not None:
                node.input[0] = prev
                continue
            v = n.values[i]
            assert v is not None
            if i in n.frozen:
                inits.append(numpy_helper.from_array(v, rename[x]))
            else:
                inputs.append(_input_info(rename[x], v, dynamic))
                feeds[rename[x]] = v
        for i, y in enumerate(node.output):
            if y:
                node.output[i] = rename[y]
        prev = node.output[0] if node.output and node.output[0] else None
        protos.append(node)
    outs = [y for y in protos[-1].output if y]
    graph = helper.make_graph(protos, "fuzz", inputs, [], initializer=inits)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid(d, v) for d, v in sorted(opsets.items())]
    )
    model.ir_version = 10  # what onnxruntime and turnout both read
    known: dict[str, onnx.ValueInfoProto] = {}
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
        known = {vi.name: vi for vi in inferred.graph.value_info}
    except Exception:  # an invalid mutation: the runtimes must say so, untyped outputs are fine
        pass
    for y in outs:
        vi = known.get(y)
        ok = vi is not None and vi.type.WhichOneof("value")
        model.graph.output.append(vi if ok else helper.make_empty_tensor_value_info(y))
    return model, feeds


def _output_type(model: onnx.ModelProto, name: str) -> tuple[str, tuple[int, ...]] | None:
    """(numpy dtype str, static shape) of a value, from shape inference."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    except Exception:
        return None
    from turnout.graph.dtypes import np_dtype

    for vi in [*inferred.graph.value_info, *inferred.graph.output]:
        if vi.name != name or not vi.type.HasField("tensor_type"):
            continue
        tt = vi.type.tensor_type
        if not tt.HasField("shape") or not all(d.HasField("dim_value") for d in tt.shape.dim):
            return None
        try:
            return np_dtype(tt.elem_type).str, tuple(d.dim_value for d in tt.shape.dim)
        except Exception:
            return None
    return None


class Generator:
    """Cases for one campaign: `case(i)` is a pure function of (seed, i)."""

    def __init__(
        self,
        pool: SeedPool,
        seed: int = 0,
        chain_probability: float = 0.3,
        max_nodes: int = 5,
        ops: set[str] | None = None,
    ) -> None:
        self.pool = pool
        self.seed = seed
        self.chain_probability = chain_probability
        self.max_nodes = max_nodes
        self.starts = [s for s in pool.seeds if ops is None or s.op in ops]
        if not self.starts:
            raise ValueError(f"no node test seeds for ops {sorted(ops or ())}")
        names = list(MUTATIONS)
        w = np.array([MUTATIONS[k][1] for k in names])
        self._names, self._weights = names, w / w.sum()

    def _mutate(self, rng: Rng, n: _Node, allowed: tuple[str, ...] | None = None) -> list[str]:
        done = []
        for _ in range(int(rng.integers(1, 4))):
            name = str(rng.choice(self._names, p=self._weights))
            if allowed is not None and name not in allowed:
                continue
            try:
                label = MUTATIONS[name][0](rng, self.pool, n)
            except Exception:  # a generator bug must not end a long run; counted as "!name"
                label = f"!{name}"
            if label is not None:
                done.append(label)
        return done

    def case(self, index: int) -> FuzzCase:
        rng = np.random.default_rng([self.seed, index])
        first = _Node.of(self.starts[int(rng.integers(len(self.starts)))])
        nodes, labels = [first], self._mutate(rng, first)
        dynamic = bool(rng.random() < 0.15)
        if rng.random() < self.chain_probability:
            length = int(rng.integers(2, self.max_nodes + 1))
            while len(nodes) < length and not self._extend(rng, nodes, labels):
                pass
        labels += self._outputs(index, nodes)
        opsets = _compatible_opsets(nodes) or dict(first.seed.opsets)
        model, feeds = _build(nodes, opsets, dynamic)
        if dynamic:
            labels.append("dynamic")
        return FuzzCase(
            id=f"s{self.seed}-{index}",
            model=model.SerializeToString(),
            feeds=feeds,
            ops=tuple(n.seed.op for n in nodes),
            seeds=tuple(n.seed.name for n in nodes),
            mutations=tuple(labels),
            rtol=max(n.seed.rtol for n in nodes),
            atol=max(n.seed.atol for n in nodes),
        )

    def _outputs(self, index: int, nodes: list[_Node]) -> list[str]:
        """`m_outputs` on the last node, from a stream of its own (`OUTPUTS_PROBABILITY`)."""
        rng = np.random.default_rng([self.seed, index, 1])
        if rng.random() >= OUTPUTS_PROBABILITY:
            return []
        try:
            label = m_outputs(rng, self.pool, nodes[-1])
        except Exception:  # a generator bug must not end a long run
            label = "!outputs"
        prefix = f"n{len(nodes) - 1}:" if len(nodes) > 1 else ""
        return [prefix + label] if label else []

    def _extend(self, rng: Rng, nodes: list[_Node], labels: list[str]) -> bool:
        """Append a node fed by the last one; True when the chain cannot grow (stop)."""
        opsets = _compatible_opsets(nodes)
        if opsets is None:
            return True
        model, _ = _build(nodes, opsets, dynamic=False)
        last = model.graph.node[-1].output
        out = _output_type(model, last[0]) if last and last[0] else None
        candidates = self.pool.by_input.get(out, []) if out else []
        if not candidates:
            return True
        for _ in range(4):  # a few tries for an op whose version agrees with the others'
            nxt = _Node.of(candidates[int(rng.integers(len(candidates)))])
            if _compatible_opsets([*nodes, nxt]) is not None:
                labels.extend(f"n{len(nodes)}:{x}" for x in self._mutate(rng, nxt, _FOLLOWER))
                nodes.append(nxt)
                return False
        return True
