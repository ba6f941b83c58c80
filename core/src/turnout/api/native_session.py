"""`InferenceSession._sess`: the native session object onnxruntime's Python class wraps.

Scripts and onnxruntime's own tests call it directly for its cheaper signatures:
`sess._sess.run_with_ort_values(feeds, output_names, run_options)` returns an `OrtValueVector`
(the Python class's method of that name takes `output_names` first and returns a list).
turnout has one session class, so this view only reorders arguments and wraps results.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from turnout.api.options import RunOptions
from turnout.api.values import OrtValue, OrtValueVector

if TYPE_CHECKING:
    from turnout.api.session import InferenceSession, NodeArg

__all__ = ["NativeSession"]


class NativeSession:
    """onnxruntime's `C.InferenceSession` methods that applications reach through `_sess`."""

    __slots__ = ("_session",)

    def __init__(self, session: InferenceSession) -> None:
        self._session = session

    def run(
        self,
        output_names: Sequence[str] | None,
        input_feed: dict[str, Any],
        run_options: RunOptions | None = None,
    ) -> list[Any]:
        return self._session.run(output_names, input_feed, run_options)

    def run_with_ort_values(
        self,
        input_feed: dict[str, OrtValue],
        output_names: Sequence[str] | None,
        run_options: RunOptions | None = None,
    ) -> OrtValueVector:
        outs = self._session.run_with_ort_values(output_names, input_feed, run_options)
        return OrtValueVector(outs)

    @property
    def inputs_meta(self) -> list[NodeArg]:
        return self._session.get_inputs()

    @property
    def outputs_meta(self) -> list[NodeArg]:
        return self._session.get_outputs()

    @property
    def overridable_initializers(self) -> list[NodeArg]:
        return self._session.get_overridable_initializers()
