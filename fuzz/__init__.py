"""turnout's fuzzer: random variations of the ONNX node tests, run on every provider in
crash-isolated workers and compared with onnxruntime and turnout's CPU provider.

`seeds` loads the node tests, `generate` mutates them into cases, `execute` runs one case in a
worker, `pool` keeps the workers, `known` lists the reviewed differences, `run.py` is the
long-run command line. `tests/fuzz/` runs a short seeded campaign and replays the corpus.
"""
