"""Regenerate the shipped example models: `python -m turnout.datasets`."""

import onnx

from . import BUILDERS, DATASETS_DIR

for name, build in BUILDERS.items():
    onnx.save(build(), DATASETS_DIR / name)
