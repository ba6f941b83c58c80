"""Op sets beyond `ai.onnx` that onnxruntime's tools emit: the `com.microsoft` contrib ops.

onnxruntime's transformer optimizer and quantization tools write models whose nodes live in the
`com.microsoft` domain (and a few contrib ops it registers in the ONNX domain, such as
`SimplifiedLayerNormalization`). turnout knows such an op when this package holds its schema:
the loader accepts the domain, `onnx.checker` and `onnx.shape_inference` see the schema
(registered with `onnx.defs.register_schema`), turnout's type checks hold inputs to its type
constraints as onnxruntime does, and output types and shapes come from the op's own inference
function. The CPU provider runs the op when it has a numpy kernel for it; an op onnxruntime
documents but turnout has no kernel for is refused at session creation, naming the op.

The schemas are registered when first needed, not on import (`register`, once per process: it
imports onnx.reference and defines every op, 15-20 ms): by the loader for a model that uses a
contrib op, by the graph stages for a model that imports a contrib domain (an optimizer pass
that emits a com.microsoft node adds the domain's opset first), and by `spec_of` / `specs`.
This package's names (`DOMAIN`, `unsupported_reason`, ...) import without them.

How to add a group of ops (one module per group; nothing else is edited by hand):

1. **Schema + inference**: a module `turnout/graph/contrib/ops/<group>.py` calling
   `define(OpSpec(...))` once per op, with the inputs and outputs (`Arg`, marked `optional` /
   `variadic`), type constraints, attributes with their defaults (`Attr`), and an `infer` function
   from the inputs' types and the attributes to the outputs' types and shapes (`NodeTypes` ->
   `TensorType | None` per output; `same_as(0)` covers element-wise ops). Write the facts from
   onnxruntime's `docs/ContribOperators.md` (and its behaviour), not its text. Modules under
   `ops/` are imported by `register`; an op in the ONNX domain is listed in
   `domains.ONNX_DOMAIN_OPS` too; `tests/core/test_contrib_schemas.py` compares every
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
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import onnx

from turnout._submodules import submodule
from turnout.graph.contrib.documented import DOCUMENTED_OPS, ORT_CPU_KERNELS
from turnout.graph.contrib.domains import DOMAIN, DOMAINS, NCHWC_DOMAIN, ONNX_DOMAIN_OPS, OPSET

if TYPE_CHECKING:
    from turnout.graph.contrib.inference import NodeTypes, TensorType, same_as
    from turnout.graph.contrib.spec import Arg, Attr, OpSpec, define

__all__ = [
    "DOCUMENTED_OPS",
    "DOMAIN",
    "DOMAINS",
    "NCHWC_DOMAIN",
    "ONNX_DOMAIN_OPS",
    "OPSET",
    "ORT_CPU_KERNELS",
    "Arg",
    "Attr",
    "NodeTypes",
    "OpSpec",
    "TensorType",
    "define",
    "register",
    "register_for",
    "register_for_op",
    "register_for_ops",
    "same_as",
    "spec_of",
    "specs",
    "unsupported_reason",
]

_LAZY = {
    "Arg": "spec",
    "Attr": "spec",
    "OpSpec": "spec",
    "define": "spec",
    "NodeTypes": "inference",
    "TensorType": "inference",
    "same_as": "inference",
}
"""The names of the modules that define schemas: read here, they import that module only."""

_LOCK = threading.Lock()
_registered = False


def register() -> None:
    """Define every contrib op with turnout and with onnx (its checker and shape inference):
    once per process, whichever thread asks first; the others wait for it."""
    global _registered
    if _registered:
        return
    with _LOCK:
        if _registered:
            return
        from turnout.graph.contrib import ops

        for mod in pkgutil.iter_modules(ops.__path__):
            importlib.import_module(f"{ops.__name__}.{mod.name}")
        _registered = True


def register_for(model: onnx.ModelProto) -> None:
    """`register`, when `model` or one of its functions imports a contrib domain: a model whose
    nodes use a contrib op, or one an optimizer pass has just given one (cheap: the opset
    imports only)."""
    if _registered:
        return
    domains = [o.domain for o in model.opset_import]
    domains += [o.domain for f in model.functions for o in f.opset_import]
    if not DOMAINS.isdisjoint(domains):
        register()


def register_for_ops(ops: Iterable[tuple[str, str]], onnx_opset: int) -> None:
    """`register`, when one of the (domain, op type) pairs a model uses is a contrib op (see
    `register_for_op`); `onnx_opset` is the model's ai.onnx opset."""
    if _registered:
        return
    for domain, op_type in ops:
        if _is_contrib(domain, op_type, onnx_opset):
            register()
            return


def register_for_op(domain: str, op_type: str, opset: int) -> None:
    """`register`, when the op is a contrib op: one in a contrib domain, or one of
    `ONNX_DOMAIN_OPS` that onnx does not define at `opset` (of the ONNX domain). A cached
    schema lookup calls this first, so that it never caches a contrib op as unknown."""
    if not _registered and _is_contrib(domain, op_type, opset):
        register()


def _is_contrib(domain: str, op_type: str, onnx_opset: int) -> bool:
    if domain in DOMAINS:
        return True
    return (
        domain in ("", "ai.onnx")
        and op_type in ONNX_DOMAIN_OPS
        and not onnx.defs.has(op_type, onnx_opset)
    )


def spec_of(domain: str, op_type: str) -> OpSpec | None:
    """The contrib schema of an op (the ONNX domain as "" or "ai.onnx"), None when there is
    none; registers them first."""
    register()
    from turnout.graph.contrib import spec

    return spec.spec_of(domain, op_type)


def specs() -> list[OpSpec]:
    """Every defined contrib op, by domain and name; registers them first."""
    register()
    from turnout.graph.contrib import spec

    return spec.specs()


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


def __getattr__(name: str) -> Any:
    """A schema-writing name (`Arg`, `OpSpec`, `define`, ...) from its module, or a submodule,
    imported on first read (see `turnout._submodules`)."""
    module = _LAZY.get(name)
    if module is not None:
        return getattr(importlib.import_module(f"{__name__}.{module}"), name)
    return submodule(__name__, name)
