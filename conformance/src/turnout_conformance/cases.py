"""Collect conformance cases: the onnx package's node tests and its model test directories.

A `Case` knows how to build its model and its data sets (inputs, expected outputs); nothing is
run here. Node cases are built in memory by onnx (about 10 s, so collect once and fork workers
after); directory and light cases are read from disk when a worker runs them.
"""

from __future__ import annotations

import glob
import os
import re
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from turnout.tools.testing import assert_outputs_close, normalize_values

__all__ = ["ALL_KINDS", "Case", "DataSet", "collect_cases", "parse_kinds"]

ALL_KINDS = ("node", "simple", "pytorch-converted", "pytorch-operator", "light", "turnout")
DIR_KINDS = ("simple", "pytorch-converted", "pytorch-operator")

DataSet = tuple[list[Any], list[Any]]
"""(inputs in the order of the model's non-initializer inputs, or a dict; expected outputs)."""


@dataclass(frozen=True)
class Case:
    """One conformance case: a model, its data sets, tolerances, and the op it exercises."""

    name: str
    kind: str
    op: str
    rtol: float
    atol: float
    model: onnx.ModelProto | None = None
    model_path: str | None = None
    data_sets: tuple[tuple[Sequence[Any], Sequence[Any]], ...] = ()
    data_dir: str | None = None
    expected_path: str | None = None
    exact: bool = False
    """Outputs must equal the expected ones bit for bit (turnout's own cases), not within
    rtol/atol."""

    def load_model(self) -> onnx.ModelProto | str:
        if self.model is not None:
            return self.model
        assert self.model_path is not None
        return self.model_path

    def load_data(self) -> list[DataSet]:
        """The data sets as runtime values (TensorProtos decoded), read from disk if needed."""
        if self.data_sets:
            return [(normalize_values(i), normalize_values(o)) for i, o in self.data_sets]
        if self.expected_path is not None:  # light model: constant weights, zeros in
            return [([], [_tensor(self.expected_path)])]
        assert self.data_dir is not None
        out: list[DataSet] = []
        for ds in sorted(glob.glob(os.path.join(self.data_dir, "test_data_set*"))):
            inputs = [_tensor(p) for p in sorted(glob.glob(os.path.join(ds, "input_*.pb")))]
            expected = [_tensor(p) for p in sorted(glob.glob(os.path.join(ds, "output_*.pb")))]
            out.append((inputs, expected))
        if not out:
            raise AssertionError(f"{self.name}: no data sets shipped in {self.data_dir}")
        return out

    def check(self, expected: Sequence[Any], got: Sequence[Any]) -> None:
        """AssertionError unless `got` matches `expected`: within rtol/atol as onnx's backend
        runner compares, or, for an exact case, bit for bit (-0.0 is not 0.0)."""
        if not self.exact:
            assert_outputs_close(expected, got, self.rtol, self.atol)
            return
        if len(expected) != len(got):
            raise AssertionError(f"expected {len(expected)} outputs, got {len(got)}")
        for i, (e, g) in enumerate(zip(expected, got)):
            e, g = np.asarray(e), np.asarray(g)
            if e.dtype != g.dtype or e.shape != g.shape:
                raise AssertionError(
                    f"output {i}: expected {e.dtype}{e.shape}, got {g.dtype}{g.shape}"
                )
            eb, gb = (np.ascontiguousarray(v).reshape(-1).view(np.uint8) for v in (e, g))
            if not np.array_equal(eb, gb):
                at = np.flatnonzero((eb != gb).reshape(e.size, -1).any(axis=1))[:8]
                raise AssertionError(
                    f"output {i} is not bit for bit the expected one at flat index {at}: "
                    f"expected {e.ravel()[at]!r}, got {g.ravel()[at]!r}"
                )


def _tensor(path: str) -> np.ndarray:
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def parse_kinds(text: str | Iterable[str] | None) -> tuple[str, ...]:
    """`"node,light"` -> ("node", "light"); unknown kinds are a ValueError naming the valid ones."""
    if text is None:
        return ALL_KINDS
    items = text.split(",") if isinstance(text, str) else list(text)
    kinds = tuple(k.strip() for k in items if k.strip())
    bad = [k for k in kinds if k not in ALL_KINDS]
    if bad:
        raise ValueError(f"unknown case kind(s) {', '.join(bad)}; valid: {', '.join(ALL_KINDS)}")
    return kinds


def collect_cases(kinds: Sequence[str] = ALL_KINDS, pattern: str | None = None) -> list[Case]:
    """The cases of `kinds` whose name matches the regex `pattern` (re.search), in fixed order."""
    rx = re.compile(pattern) if pattern else None
    out: list[Case] = []
    for kind in kinds:
        if kind == "node":
            out.extend(_node_cases())
        elif kind == "light":
            out.extend(_light_cases())
        elif kind == "turnout":
            from .own_cases import own_cases

            out.extend(own_cases())
        else:
            out.extend(_dir_cases(kind))
    if rx is not None:
        out = [c for c in out if rx.search(c.name) or rx.search(f"{c.kind}/{c.name}")]
    seen: set[str] = set()
    for c in out:
        if c.name in seen:
            raise ValueError(f"two conformance cases are named {c.name!r}")
        seen.add(c.name)
    return out


_EXPANDED = re.compile(r"_expanded(_ver\d+)?$")


def _node_cases() -> list[Case]:
    from turnout.tools.testing import _all_node_cases

    raw = _all_node_cases()  # cached: kernel tests in the same process share it
    single = {c.name: _main_op(c.model) for c in raw if len(c.model.graph.node) == 1}
    ops = sorted(set(single.values()), key=len, reverse=True)
    out = []
    for c in raw:
        op = single.get(c.name) or single.get(_EXPANDED.sub("", c.name)) or _op_from_name(c, ops)
        out.append(Case(c.name, "node", op, c.rtol, c.atol, model=c.model, data_sets=_sets(c)))
    return out


def _sets(c: Any) -> tuple[tuple[Sequence[Any], Sequence[Any]], ...]:
    return tuple((list(i), list(o)) for i, o in c.data_sets)


def _snake(op: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", op).lower()


def _op_from_name(c: Any, ops: Sequence[str]) -> str:
    """A multi-node node case with no single-node twin: the op its name starts with."""
    name = c.name[len("test_") :]
    for op in ops:  # longest first
        s = _snake(op)
        if name == s or name.startswith(s + "_"):
            return op
    return _main_op(c.model)


def _main_op(model: onnx.ModelProto) -> str:
    nodes = [n for n in model.graph.node if n.op_type != "Constant"] or list(model.graph.node)
    if not nodes:
        return "(empty)"
    n = nodes[0] if len(nodes) == 1 else max(nodes, key=lambda n: len(n.op_type))
    return n.op_type if not n.domain or n.domain == "ai.onnx" else f"{n.domain}::{n.op_type}"


def _single_op(model: onnx.ModelProto) -> str | None:
    """The op of a model that is one node (Constants aside), else None."""
    nodes = [n for n in model.graph.node if n.op_type != "Constant"]
    return _main_op(model) if len(nodes) == 1 else None


def _dir_cases(kind: str) -> list[Case]:
    from onnx.backend.test.loader import load_model_tests

    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tests = load_model_tests(kind=kind)
    for t in sorted(tests, key=lambda t: t.name):
        assert t.model_dir is not None
        path = os.path.join(t.model_dir, "model.onnx")
        op = _single_op(onnx.load(path, load_external_data=False)) or f"({kind})"
        out.append(Case(t.name, kind, op, t.rtol, t.atol, model_path=path, data_dir=t.model_dir))
    return out


def _light_cases() -> list[Case]:
    from onnx.backend.test.loader import DATA_DIR

    light = os.path.join(DATA_DIR, "light")
    out = []
    for path in sorted(glob.glob(os.path.join(light, "light_*.onnx"))):
        name = os.path.basename(path)[: -len(".onnx")]
        expected = os.path.join(light, f"{name}_output_0.pb")
        out.append(
            Case(name, "light", "(light)", 1e-3, 1e-7, model_path=path, expected_path=expected)
        )
    return out
