"""Typed provider options: name, type, default and doc, checked once at session creation.

onnxruntime passes provider options as strings ("1", "0", "4"); Python callers pass bools and
ints. A `ProviderOption` accepts both and hands the provider a value of its declared type, so
every provider parses the same way and an error always names the provider, the option, what
it takes and what it got. `turnout providers --options NAME` prints a provider's schema.

An option marked `dynamic` may also change after creation, through
`InferenceSession.set_ep_dynamic_options`; the provider applies it in `set_dynamic_option`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from turnout.graph.errors import InvalidArgument

__all__ = [
    "CPU_NUMPY_ONLY_ENV",
    "CPU_NUMPY_ONLY_KEY",
    "ProviderOption",
    "parse_bool",
    "schema_table",
]

CPU_NUMPY_ONLY_KEY = "session.turnout.cpu_numpy_only"
"""Session config entry: "1" keeps CPU requests on the numpy kernels, without the host
providers (turnout-numba) that serve them by default; "0" lets the hosts serve them."""
CPU_NUMPY_ONLY_ENV = "TURNOUT_CPU_NUMPY_ONLY"
"""The same switch for a whole process (the session config entry wins when both are set)."""

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def parse_bool(raw: Any) -> bool | None:
    """A bool from a bool or onnxruntime's strings; None when it is neither."""
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    return True if text in _TRUE else False if text in _FALSE else None


@dataclass(frozen=True)
class ProviderOption:
    """One provider option.

    `types` is what the value may be, in the order strings are tried: `(int,)`, `(bool,)`,
    `(float,)`, `(str,)`, or `(int, str)` for "an index or a name". `minimum` bounds numbers;
    `choices` lists the allowed strings (compared in lower case).
    """

    name: str
    types: tuple[type, ...]
    default: Any
    doc: str
    minimum: float | None = None
    choices: tuple[str, ...] | None = None
    dynamic: bool = False

    @property
    def type_name(self) -> str:
        base = " or ".join(t.__name__ for t in self.types)
        if self.choices:
            return f"{base}: {' | '.join(self.choices)}"
        if self.minimum is not None:
            return f"{base} >= {self.minimum:g}"
        return base

    def parse(self, provider: str, raw: Any) -> Any:
        """The value as the provider uses it; `InvalidArgument` naming everything otherwise."""
        for kind in self.types:
            value = _convert(kind, raw)
            if isinstance(value, str) and self.choices is not None:
                value = value.strip().lower()
            if value is not None and self._allowed(value):
                return value
        raise InvalidArgument(
            f"{provider}: option {self.name!r} must be {self.type_name}, not {raw!r}"
        )

    def _allowed(self, value: Any) -> bool:
        if self.choices is not None and isinstance(value, str):
            return value in self.choices
        if self.minimum is not None and isinstance(value, (int, float)):
            return not isinstance(value, bool) and value >= self.minimum
        return True


def _convert(kind: type, raw: Any) -> Any:
    """`raw` as `kind`, or None; a bool never passes for a number (True is not a thread count)."""
    if kind is bool:
        return parse_bool(raw)
    if isinstance(raw, bool):
        return None
    if kind is int:
        if isinstance(raw, int):
            return raw
        text = str(raw).strip()
        return int(text) if text.lstrip("-").isdigit() else None
    if kind is float:
        try:
            return float(raw)
        except (TypeError, ValueError):
            return None
    if kind is str:
        return raw if isinstance(raw, str) else str(raw) if isinstance(raw, int) else None
    raise TypeError(f"unsupported option type {kind.__name__}")


def schema_table(options: Sequence[ProviderOption]) -> list[tuple[str, str, str, str, str]]:
    """(name, type, default, dynamic, doc) rows, for `turnout providers --options`."""
    return [
        (o.name, o.type_name, repr(o.default), "yes" if o.dynamic else "no", o.doc) for o in options
    ]
