"""Regenerate the shipped example models: `python -m turnout.api.datasets`."""

import onnx

from turnout.api.datasets import BUILDERS, DATASETS_DIR

for name, build in BUILDERS.items():
    onnx.save(build(), DATASETS_DIR / name)
