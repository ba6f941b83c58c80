"""Regenerate the shipped example models: `python -m turnout.tools.models`."""

import onnx

from turnout.tools.models import MODELS_DIR, build_tiny_cnn

onnx.save(build_tiny_cnn(), MODELS_DIR / "tiny_cnn.onnx")
