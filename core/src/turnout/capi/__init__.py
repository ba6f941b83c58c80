"""Module paths of `onnxruntime.capi`, so imports written for onnxruntime resolve in turnout."""

__all__: list[str] = []
