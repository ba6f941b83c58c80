"""Op sets beyond `ai.onnx` that onnxruntime's tools emit: the `com.microsoft` contrib ops.

onnxruntime's transformer optimizer and quantization tools write models whose nodes live in the
`com.microsoft` domain (and a few contrib ops it registers in the ONNX domain, such as
`SimplifiedLayerNormalization`). turnout knows such an op when this package holds its schema:
the loader accepts the domain, `onnx.checker` and `onnx.shape_inference` see the schema
(registered with `onnx.defs.register_schema`), turnout's type checks hold inputs to its type
constraints as onnxruntime does, and output types and shapes come from the op's own inference
function. The CPU provider runs the op when it has a numpy kernel for it; an op onnxruntime
documents but turnout has no kernel for is refused at session creation, naming the op.

How to add a group of ops (one module per group; nothing else is edited by hand):

1. **Schema + inference**: a module `turnout/graph/contrib/ops/<group>.py` calling
   `define(OpSpec(...))` once per op, with the inputs and outputs (`Arg`, marked `optional` /
   `variadic`), type constraints, attributes with their defaults (`Attr`), and an `infer` function
   from the inputs' types and the attributes to the outputs' types and shapes (`NodeTypes` ->
   `TensorType | None` per output; `same_as(0)` covers element-wise ops). Write the facts from
   onnxruntime's `docs/ContribOperators.md` (and its behaviour), not its text. Modules under
   `ops/` are imported automatically; `tests/core/test_contrib_schemas.py` compares every
   schema with the one onnxruntime reports.
2. **Kernel**: a module `turnout/providers/cpu/kernels/contrib_<group>.py` with
   `@cpu_kernel("Op", since=1, domain=DOMAIN)` factories (numpy). Kernel modules are imported
   automatically, too.
3. **Parity test**: `tests/core/test_contrib_<group>.py`, running generated cases (shapes,
   dtypes, attributes, optional inputs present and absent, optional outputs requested) on
   turnout and onnxruntime, tolerance relative to the output range: the `contrib_parity`
   fixture of `tests/core/conftest.py` does the running and comparing (`reference=` for cases
   onnxruntime's CPU provider cannot run; `float32_oracle` for float16 ones it runs in float32
   only). A kernel that cannot run some case declines it with `supports=` (a reason), which
   turnout reports at session creation.
4. **Docs row**: run `python -m turnout.tools.contrib_table > docs/contrib-ops.md`; the
   table's supported columns come from the kernel registries, and `tests/core/test_contrib_table.py`
   fails when the file disagrees with them.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

from turnout._submodules import submodule
from turnout.graph.contrib import ops as _ops
from turnout.graph.contrib.documented import DOCUMENTED_OPS, ORT_CPU_KERNELS
from turnout.graph.contrib.inference import NodeTypes, TensorType, same_as
from turnout.graph.contrib.spec import DOMAIN, OPSET, Arg, Attr, OpSpec, define, spec_of, specs

__all__ = [
    "DOCUMENTED_OPS",
    "DOMAIN",
    "OPSET",
    "ORT_CPU_KERNELS",
    "Arg",
    "Attr",
    "NodeTypes",
    "OpSpec",
    "TensorType",
    "define",
    "same_as",
    "spec_of",
    "specs",
    "unsupported_reason",
]


def unsupported_reason(domain: str, op_type: str) -> str | None:
    """Why turnout cannot run a com.microsoft node, for the error at session creation; None
    for other domains."""
    if domain != DOMAIN:
        return None
    if op_type in DOCUMENTED_OPS:
        return (
            f"{DOMAIN}::{op_type} is an onnxruntime contrib op that turnout does not support "
            "(docs/contrib-ops.md lists the supported ones)"
        )
    return f"{DOMAIN}::{op_type} is not an op onnxruntime defines in the {DOMAIN} domain"


def _load_groups() -> None:
    for mod in pkgutil.iter_modules(_ops.__path__):
        importlib.import_module(f"{_ops.__name__}.{mod.name}")


_load_groups()


def __getattr__(name: str) -> ModuleType:
    """A submodule, imported on first read (see `turnout._submodules`)."""
    return submodule(__name__, name)
