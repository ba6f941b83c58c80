"""What an RNN, GRU or LSTM node means: its attributes decoded and its inputs checked.

Every provider's recurrent kernel reads the same directions, layout, clip and activation list
from here (with the ONNX defaults for activation alpha/beta) and raises the same
`InvalidArgument` for a malformed node; only the arithmetic of the cell is the kernel's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from turnout.graph.errors import InvalidArgument
from turnout.sdk.provider import KernelNode
from turnout.sdk.semantics.defaults import op_default

__all__ = [
    "RECURRENT_ACTIVATIONS",
    "RECURRENT_OPS",
    "RecurrentAttrs",
    "RecurrentShapes",
    "check_recurrent_inputs",
    "check_sequence_lens",
    "recurrent_attrs",
    "recurrent_inputs",
]

RECURRENT_ACTIVATIONS: dict[str, tuple[float | None, float | None]] = {
    "relu": (None, None),
    "tanh": (None, None),
    "sigmoid": (None, None),
    "affine": (1.0, 0.0),
    "leakyrelu": (op_default("LeakyRelu", "alpha"), None),
    "thresholdedrelu": (op_default("ThresholdedRelu", "alpha"), None),
    "scaledtanh": (1.0, 1.0),  # no longer an ai.onnx op: no schema to read
    "hardsigmoid": (op_default("HardSigmoid", "alpha"), op_default("HardSigmoid", "beta")),
    "elu": (op_default("Elu", "alpha"), None),
    "softsign": (None, None),
    "softplus": (None, None),
}
"""Activation name (lower case) -> default (alpha, beta), None where it takes no such value:
the op schemas' defaults (`defaults.op_default`) where the activation is an ai.onnx op."""

RECURRENT_OPS: dict[str, tuple[int, tuple[str, ...], bool]] = {
    "RNN": (1, ("Tanh",), False),
    "GRU": (3, ("Sigmoid", "Tanh"), False),
    "LSTM": (4, ("Sigmoid", "Tanh", "Tanh"), True),
}
"""Op -> (gates, default activations of one direction, has a cell state)."""

Activation = tuple[str, "float | None", "float | None"]


@dataclass(frozen=True)
class RecurrentAttrs:
    """A recurrent node's attributes: `acts[d]` is direction d's activations, each
    (name, alpha, beta); `paired` says both directions compute alike."""

    name: str
    op: str
    gates: int
    has_cell: bool
    directions: tuple[str, ...]
    hidden_size: int | None
    clip: float | None
    layout: int
    acts: tuple[tuple[Activation, ...], ...]
    linear_before_reset: bool
    input_forget: bool
    n_outputs: int

    @property
    def paired(self) -> bool:
        return len(self.acts) == 2 and self.acts[0] == self.acts[1]


def _activations(
    name: str, names: Sequence[Any], alphas: Sequence[float], betas: Sequence[float]
) -> list[Activation]:
    """alpha/beta values are consumed in order by the activations that take them."""
    out: list[Activation] = []
    ai = bi = 0
    for n in names:
        key = n.lower() if isinstance(n, str) else n.decode().lower()
        if key not in RECURRENT_ACTIVATIONS:
            raise InvalidArgument(f"{name}: unsupported activation {n!r}")
        da, db = RECURRENT_ACTIVATIONS[key]
        a = b = None
        if da is not None:
            a = float(alphas[ai]) if ai < len(alphas) else da
            ai += 1
        if db is not None:
            b = float(betas[bi]) if bi < len(betas) else db
            bi += 1
        out.append((key, a, b))
    return out


def recurrent_attrs(node: KernelNode, op: str | None = None) -> RecurrentAttrs:
    """Decode an RNN/GRU/LSTM node's attributes (layout only from opset 14); `op` names the
    cell of a node of another type (com.microsoft::DynamicQuantizeLSTM is an LSTM)."""
    name, op = node.name, op or node.op_type
    gates, defaults, has_cell = RECURRENT_OPS[op]
    direction = node.attr("direction", "forward")
    if isinstance(direction, bytes):
        direction = direction.decode()
    if direction not in ("forward", "reverse", "bidirectional"):
        raise InvalidArgument(f"{name}: unknown direction {direction!r}")
    directions = ("forward", "reverse") if direction == "bidirectional" else (direction,)
    nd, per_dir = len(directions), len(defaults)
    names = list(node.attrs.get("activations") or list(defaults) * nd)
    if len(names) == per_dir and nd == 2:
        names = names * 2
    if len(names) != per_dir * nd:
        raise InvalidArgument(f"{name}: expected {per_dir * nd} activations, got {len(names)}")
    acts = _activations(
        name, names, node.attr("activation_alpha") or [], node.attr("activation_beta") or []
    )
    clip, hidden = node.attr("clip"), node.attr("hidden_size")
    return RecurrentAttrs(
        name=name,
        op=op,
        gates=gates,
        has_cell=has_cell,
        directions=directions,
        hidden_size=None if hidden is None else int(hidden),
        clip=None if clip is None else float(clip),
        layout=int(node.attr("layout", 0)) if node.since_version >= 14 else 0,
        acts=tuple(tuple(acts[i * per_dir : (i + 1) * per_dir]) for i in range(nd)),
        linear_before_reset=bool(node.attr("linear_before_reset", 0)),
        input_forget=bool(node.attr("input_forget", 0)),
        n_outputs=len(node.node.outputs),
    )


@dataclass(frozen=True)
class RecurrentShapes:
    """Sizes of one run, time-major (after undoing layout 1)."""

    steps: int
    batch: int
    input_size: int
    hidden: int


def _shape(v: Any) -> tuple[int, ...] | None:
    return None if v is None else tuple(v.shape)


def recurrent_inputs(inputs: Sequence[Any]) -> tuple[Any, ...]:
    """The node's inputs padded with None to all eight: (X, W, R, B, sequence_lens, initial_h,
    initial_c, P)."""
    return (*inputs, *(None,) * (8 - len(inputs)))


def check_recurrent_inputs(a: RecurrentAttrs, inputs: Sequence[Any]) -> RecurrentShapes:
    """Check the shapes of the node's inputs (as `recurrent_inputs` orders them; X,
    initial_h and initial_c time-major: a kernel undoes layout 1 first). Arrays of any array
    module: only `.shape` is read."""
    x, w, r, b, _, init_h, init_c, p = recurrent_inputs(inputs)
    name, g, nd = a.name, a.gates, len(a.directions)
    if len(x.shape) != 3:
        raise InvalidArgument(f"{name}: X must be 3-D, got shape {tuple(x.shape)}")
    steps, batch, isz = (int(s) for s in x.shape)
    hs = a.hidden_size if a.hidden_size is not None else int(r.shape[-1])
    if tuple(w.shape) != (nd, g * hs, isz) or tuple(r.shape) != (nd, g * hs, hs):
        raise InvalidArgument(
            f"{name}: W {tuple(w.shape)} / R {tuple(r.shape)} do not match {nd} direction(s), "
            f"hidden size {hs} and input size {isz}"
        )
    if b is not None and _shape(b) != (nd, 2 * g * hs):
        raise InvalidArgument(f"{name}: B has shape {_shape(b)}, expected {(nd, 2 * g * hs)}")
    for what, v in (("initial_h", init_h), ("initial_c", init_c)):
        if v is not None and _shape(v) != (nd, batch, hs):
            raise InvalidArgument(
                f"{name}: {what} has shape {_shape(v)}, expected {(nd, batch, hs)}"
            )
    if p is not None and _shape(p) != (nd, 3 * hs):
        raise InvalidArgument(f"{name}: P has shape {_shape(p)}, expected {(nd, 3 * hs)}")
    return RecurrentShapes(steps, batch, isz, hs)


def check_sequence_lens(name: str, seq_lens: Any, batch: int, steps: int) -> np.ndarray | None:
    """sequence_lens as int64 host values, or None when every sequence runs all steps."""
    if seq_lens is None:
        return None
    lens = np.asarray(seq_lens).astype(np.int64).reshape(-1)
    if lens.shape != (batch,) or (lens < 0).any() or (lens > steps).any():
        raise InvalidArgument(
            f"{name}: sequence_lens {lens.tolist()} must be {batch} values in [0, {steps}]"
        )
    return None if (lens == steps).all() else lens
