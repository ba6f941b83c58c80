"""turnout's version, in a module of its own so any layer can read it without the package root."""

__version__ = "0.1.0"

ORT_API_VERSION = "1.32.0"
"""The onnxruntime Python API version turnout mirrors (`onnxruntime.__version__` under the
drop-in)."""
