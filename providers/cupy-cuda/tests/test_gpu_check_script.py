"""scripts/gpu-check.sh runs only on a GPU machine; its Python parts run here up to the point
where they need a GPU: the benchmark's dry run checks the models, onnxruntime, the PyTorch
eager interpreter (on the CPU) and the provider's decisions on the emulated backend."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def test_benchmark_dry_run(tmp_path: Path) -> None:
    has_torch = importlib.util.find_spec("torch") is not None
    r = subprocess.run(
        [
            sys.executable,
            str(SCRIPTS / "gpu_bench.py"),
            "--out",
            str(tmp_path),
            "--dry-run",
            "--small",
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    results = json.loads((tmp_path / "bench.json").read_text())
    for name in ("bert_like", "mlp", "resnet18_like"):
        entry = results[name]
        assert entry["emulated_nodes_on_cpu"] == [], name  # the whole model on the provider
        assert entry["emulated_max_abs_err"] < 1e-3
        if has_torch:  # the PyTorch eager interpreter, on the CPU here
            assert entry["torch_max_abs_err"] < 1e-3


def test_the_shell_script_parses() -> None:
    subprocess.run(["bash", "-n", str(SCRIPTS / "gpu-check.sh")], check=True)
