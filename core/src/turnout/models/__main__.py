"""Regenerate the shipped example models: `python -m turnout.models`."""

import onnx

from . import MODELS_DIR, build_tiny_cnn

onnx.save(build_tiny_cnn(), MODELS_DIR / "tiny_cnn.onnx")
