"""What loading a model may cost: limits a session config sets and every stage reads.

The limits are data of the graph layer so that the optimizer, shape inference and the engine
read them without the onnxruntime façade (which sets them from `session.turnout.*` entries).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from turnout.graph.errors import InvalidArgument

__all__ = ["LIMIT_KEYS", "ResourceLimits", "positive_int"]


@dataclass(frozen=True)
class ResourceLimits:
    """What loading a model may cost, so a tiny file cannot make session creation take minutes
    or gigabytes. Each is a session config entry `session.turnout.<field name>`.

    - `max_tensor_elements`: a value whose inferred static shape holds more elements is refused
      at load (InvalidGraph naming the node), before anything allocates it.
    - `fold_max_elements`: the largest tensor constant folding may create (bigger ones are
      computed at run time, like any other node).
    - `fold_max_total_bytes`: all tensors that constant folding keeps, together.
    - `shape_data_max_elements`: the largest value onnx's data propagation may read while
      inferring shapes (shape tensors are small; see `turnout.graph.shape_inference`).
    """

    max_tensor_elements: int = 1 << 32
    fold_max_elements: int = 1 << 20
    fold_max_total_bytes: int = 1 << 28
    shape_data_max_elements: int = 4096

    @staticmethod
    def from_config(config: dict[str, str]) -> ResourceLimits:
        values = {}
        for f in fields(ResourceLimits):
            key = f"session.turnout.{f.name}"
            if key in config:
                values[f.name] = positive_int(key, config[key])
        return ResourceLimits(**values)


def positive_int(key: str, value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number <= 0:
        raise InvalidArgument(
            f"session config entry {key!r} must be a positive integer, not {value!r}"
        )
    return number


LIMIT_KEYS = frozenset(f"session.turnout.{f.name}" for f in fields(ResourceLimits))
