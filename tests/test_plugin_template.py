"""The provider template: `turnout new-provider` renders a package that pip installs, turnout
discovers through its entry point, and whose own kernels run a session; plugin_template/ is that
rendering for NAME=example, byte for byte.
"""

from __future__ import annotations

import os
import site
import subprocess
import sys
import textwrap
from importlib.metadata import PackageNotFoundError, version
from importlib.util import find_spec
from pathlib import Path

import pytest

from turnout.graph.errors import InvalidArgument
from turnout.tools.cli import main
from turnout.tools.scaffold import render_provider, render_template, template_names

ROOT = Path(__file__).resolve().parents[1]
PLUGIN_TEMPLATE = ROOT / "plugin_template"
# What building, installing or testing plugin_template/ in place may leave behind.
LEFTOVERS = {"__pycache__", ".pytest_cache", ".ruff_cache", ".mypy_cache", "build", "dist"}


def _tree(folder: Path) -> dict[str, bytes]:
    out = {}
    for path in folder.rglob("*"):
        rel = path.relative_to(folder)
        if path.is_file() and not any(p in LEFTOVERS or p.endswith(".egg-info") for p in rel.parts):
            out[rel.as_posix()] = path.read_bytes()
    return out


def test_plugin_template_is_a_fresh_rendering(tmp_path: Path) -> None:
    fresh = _tree(render_template("example", tmp_path / "example"))
    kept = _tree(PLUGIN_TEMPLATE)
    differ = sorted(k for k in fresh.keys() | kept.keys() if fresh.get(k) != kept.get(k))
    assert not differ, (
        f"plugin_template/ differs from the template in {differ}; regenerate it with "
        "`rm -rf plugin_template && python -m turnout.tools.scaffold example plugin_template`"
    )


def test_names_derived_from_name() -> None:
    assert template_names("my_accel") == {
        "name": "my_accel",
        "Name": "MyAccel",
        "pkg": "turnout_my_accel",
        "dist": "turnout-my-accel",
    }


@pytest.mark.parametrize(
    "name", ["", "MyAccel", "1accel", "my-accel", "my accel", "a__b", "accel_", "cpu", "class"]
)
def test_bad_names_are_refused(name: str, tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="provider name"):
        render_provider(name, tmp_path)
    assert not any(tmp_path.iterdir())


def test_rendering_names_nothing_after_the_example(tmp_path: Path) -> None:
    target = render_provider("zork", tmp_path)
    assert target == tmp_path / "turnout-zork"
    assert (target / "src" / "turnout_zork" / "kernels" / "fused.py").is_file()
    for rel, data in _tree(target).items():
        for leftover in (b"Example", b"_example", b"-example", b"`example`", b'"example"'):
            assert leftover not in data, f"{rel} still names the example: {leftover!r}"
    assert b'zork = "turnout_zork.plugin"' in (target / "pyproject.toml").read_bytes()


def test_refuses_a_non_empty_folder(tmp_path: Path) -> None:
    (tmp_path / "turnout-zork").mkdir()
    render_provider("zork", tmp_path)  # an empty folder is fine
    with pytest.raises(InvalidArgument, match="not an empty folder"):
        render_provider("zork", tmp_path)


def test_cli_creates_and_explains(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["new-provider", "zork", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "src/turnout_zork/provider.py" in out
    assert f"pip install -e {tmp_path / 'turnout-zork'}" in out
    assert "turnout conformance --provider zork" in out
    assert main(["new-provider", "zork", "--dir", str(tmp_path)]) == 2
    assert "not an empty folder" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------
# The rendered package, pip-installed into a fresh virtual environment

SESSION_CHECK = textwrap.dedent(
    """
    import contextlib, io
    import numpy as np
    import turnout
    from onnx import TensorProto, helper
    from turnout.tools.cli import main
    from turnout_acme_npu.kernels import CALLS

    NAME = "AcmeNpuExecutionProvider"
    assert NAME in turnout.get_available_providers(), turnout.get_available_providers()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["providers"]) == 0
    (line,) = [x for x in out.getvalue().splitlines() if x.startswith(NAME)]
    assert " available " in line and "acme_npu" in line, line

    shape = [3, 5]
    nodes = [
        helper.make_node("Add", ["x", "b"], ["t1"], name="add0"),
        helper.make_node("Relu", ["t1"], ["t2"], name="relu0"),
        helper.make_node("Add", ["t2", "x"], ["t3"], name="add1"),
        helper.make_node("Relu", ["t3"], ["y"], name="relu1"),
    ]
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(
        nodes, "g", [vi("x", TensorProto.FLOAT, shape), vi("b", TensorProto.FLOAT, [5])],
        [vi("y", TensorProto.FLOAT, shape)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    so = turnout.SessionOptions()
    so.fallback = "error"
    sess = turnout.InferenceSession(model.SerializeToString(), so, providers=[NAME, "cpu"])
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    (y,) = sess.run(None, {"x": x, "b": b})
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, np.maximum(np.maximum(x + b, 0) + x, 0), rtol=1e-6)
    assert sum(CALLS.values()) == 4, CALLS
    report = sess.partition_report()
    assert {a.provider for a in report.assignments} == {NAME}, report.to_text()
    assert {(a.source, a.group) for a in report.assignments} == {
        ("fused", "acme_npu_fused_add0")
    }, report.to_text()
    print("session check passed")
    """
)


def _python_in(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _make_venv(venv: Path) -> Path:
    """A venv that sees this interpreter's packages (turnout, numpy, onnx, pip, pytest).

    `--system-site-packages` is not enough: when these tests run inside a virtualenv it exposes
    the base interpreter's packages, not the running one's. A .pth file adds the running
    interpreter's site directories instead (their own .pth files, like editable installs, too).
    """
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = _python_in(venv)
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    dirs = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    lines = [f"import site; site.addsitedir({d!r})" for d in dirs if os.path.isdir(d)]
    Path(purelib, "_turnout_outer_env.pth").write_text("\n".join(lines) + "\n")
    return python


def _can_build_offline() -> bool:
    """Whether this environment builds the wheel itself (no isolated build env to download)."""
    try:
        major, minor = (int(x) for x in version("setuptools").split(".")[:2])
    except (PackageNotFoundError, ValueError):
        return False
    return (major, minor) >= (70, 1) or find_spec("wheel") is not None


def _run(args: list[str | Path], cwd: Path, timeout: int) -> str:
    """`args` in a clean environment: plugins enabled, and no pytest-xdist worker variables (a
    nested pytest reading them takes itself for a worker of this run)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k != "TURNOUT_DISABLE_PLUGINS" and not k.startswith("PYTEST_XDIST")
    }
    result = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, f"{args}\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    return result.stdout


@pytest.mark.slow
def test_rendered_provider_installs_is_discovered_and_runs_its_kernels(tmp_path: Path) -> None:
    pytest.importorskip("pip", reason="pip is needed to install the rendered package")
    package = render_provider("acme_npu", tmp_path)
    python = _make_venv(tmp_path / "venv")
    install = [python, "-m", "pip", "install", "-q", "--no-deps", "--disable-pip-version-check"]
    if _can_build_offline():
        install.append("--no-build-isolation")
    _run([*install, package], tmp_path, timeout=300)

    work = tmp_path / "work"
    work.mkdir()
    (work / "check.py").write_text(SESSION_CHECK)
    assert "session check passed" in _run([python, work / "check.py"], work, timeout=120)
    # the package's own tests, as its author runs them
    out = _run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider"], package, timeout=120)
    assert " passed" in out and "failed" not in out
