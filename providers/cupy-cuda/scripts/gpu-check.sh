#!/usr/bin/env bash
# The CuPy provider's check on a machine with an NVIDIA GPU and no network (CuPy, numpy, onnx,
# numba and onnxruntime preinstalled; torch optional). It installs turnout from this checkout
# without dependencies or build isolation (that machine has setuptools, not hatchling, and the
# entry points need installed metadata), then writes everything into one folder:
#   providers.txt      `turnout providers` (the probe's view of the GPU)
#   compile-only.txt   every generated kernel through nvcc/NVRTC (python -m turnout_cupy.check)
#   pytest.txt         the GPU tests and the probe's tests
#   conformance.*      isolated conformance of CuPyExecutionProvider (node cases; json, md)
#   bench.json/.txt    bert_like, mlp, resnet18_like: CuPy vs onnxruntime CPU vs torch eager CUDA
# Usage: providers/cupy-cuda/scripts/gpu-check.sh [OUT_DIR] [--dry-run]
# --dry-run: no install, no GPU needed; runs the Python parts up to where they need a GPU, and
# the isolated conformance on the emulated provider (numpy for CuPy: kernel logic, not CUDA).
set -uo pipefail
cd "$(dirname "$0")/../../.."
OUT=${1:-gpu-check-$(date +%Y%m%d-%H%M%S)}
DRY=0
[ "${2:-}" = "--dry-run" ] || [ "${1:-}" = "--dry-run" ] && DRY=1
[ "${1:-}" = "--dry-run" ] && OUT=gpu-check-dry-run
mkdir -p "$OUT"
PY=${PYTHON:-python3}
status=0
step() {  # step NAME SECONDS CMD...: run with a time limit, output to $OUT/NAME.txt
  local name=$1 limit=$2
  shift 2
  echo "=== $name (limit ${limit}s)"
  local t0=$SECONDS
  timeout "$limit" "$@" >"$OUT/$name.txt" 2>&1
  local rc=$?
  echo "    rc=$rc in $((SECONDS - t0))s; last lines:"
  tail -n 5 "$OUT/$name.txt" | sed 's/^/    /'
  [ $rc -eq 0 ] || status=1
}

# time limits sum to 8 minutes (480 s): the whole check stays under it
if [ $DRY -eq 0 ]; then
  step install 45 "$PY" -m pip install --no-deps --no-build-isolation -q \
    -e ./core -e ./conformance -e ./providers/cupy-cuda
fi
missing=$("$PY" - <<'PY'
import importlib.util
need = ["numpy", "onnx", "ml_dtypes", "onnxruntime", "pluggy", "cupy", "turnout", "turnout_cupy"]
print(" ".join(n for n in need if importlib.util.find_spec(n) is None))
PY
)
if [ -n "$missing" ]; then
  echo "missing Python packages (no network here to install them): $missing" | tee "$OUT/missing.txt"
  [ $DRY -eq 1 ] || exit 1
fi
step providers 20 "$PY" -m turnout providers
step compile-only 45 "$PY" -m turnout_cupy.check --compile-only
if [ $DRY -eq 1 ]; then
  step emulated-conformance 300 "$PY" providers/cupy-cuda/scripts/emulated_conformance.py \
    --mode isolated -j 2 -q --json "$OUT/emulated-conformance.json"
  step bench 300 "$PY" providers/cupy-cuda/scripts/gpu_bench.py --out "$OUT" --dry-run
  echo "=== dry run done: $OUT (nothing ran on a GPU)"
  exit $status
fi
# the GPU tests and the probe's (the emulated and compile tests run in CI)
if "$PY" -c "import pytest" 2>/dev/null; then
  step pytest 90 "$PY" -m pytest -q -p no:cacheprovider -rs \
    providers/cupy-cuda/tests/test_gpu.py providers/cupy-cuda/tests/test_probe.py
else
  echo "=== pytest is not installed here: GPU tests not run" | tee "$OUT/pytest.txt"
fi
step conformance 170 "$PY" -m turnout conformance --provider CuPyExecutionProvider \
  --mode isolated --kinds node -j 8 -q --json "$OUT/conformance.json" \
  --markdown "$OUT/conformance.md"
step bench 110 "$PY" providers/cupy-cuda/scripts/gpu_bench.py --out "$OUT" --rounds 30
echo "=== results in $OUT (status $status)"
exit $status
