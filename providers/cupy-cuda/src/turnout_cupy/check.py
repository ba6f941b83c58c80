"""`python -m turnout_cupy.check --compile-only`: compile every CUDA source this provider can
generate, for sm_80 and sm_90, with no GPU.

The sources come from the provider's own code path: each representative graph
(`representative.cases`) is run through a session on the emulated backend, which makes the same
capability and fusion decisions and generates the same kernels a GPU session would (for the
launch layouts those inputs produce); the sources are collected from the provider. They are
compiled with nvcc (`-cubin` per architecture), or with NVRTC from its pip wheel
(`nvidia-cuda-nvrtc`, through CuPy's bindings) when nvcc is missing. Every generated source is
the same prelude followed by one kernel, so the kernels of all sources, deduplicated by name,
are compiled as one translation unit per architecture, which is what keeps this under a few
seconds. Exit 0 and a count on success; nonzero with the compiler's message otherwise.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Sequence

from .codegen import DEVICE_PRELUDE
from .fusion import Generated

__all__ = [
    "ARCHS",
    "collect_generated",
    "collect_sources",
    "compile_sources",
    "main",
    "translation_unit",
]

ARCHS = ("sm_80", "sm_90")
_KERNEL = re.compile(r'extern "C" __global__ void (\w+)\(')


def collect_sources() -> list[str]:
    """Every source the emulated sessions of the representative graphs generated."""
    return [program.source(variant) for program, variant in collect_generated()]


def collect_generated() -> Generated:
    """Each (program, layout) the emulated sessions of the representative graphs generated."""
    from turnout import InferenceSession, SessionOptions
    from turnout.sdk.plugins import registry

    from .emulated import EMULATED_NAME, EmulatedFactory
    from .representative import cases

    factory = EmulatedFactory()
    registry.register(factory)  # in this process, for these sessions only
    generated: Generated = []
    try:
        for name, model, feeds in cases():
            so = SessionOptions()
            so.fallback = "warn"  # a node the provider declines runs on CPU; groups still count
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                sess = InferenceSession(model.SerializeToString(), so, providers=[EMULATED_NAME])
                sess.run(None, feeds)
            found = [g for p in factory.created for g in getattr(p, "generated", [])]
            factory.created.clear()
            if not found:
                raise RuntimeError(f"representative graph {name!r} generated no CUDA source")
            generated.extend(found)
    finally:
        registry.unregister(EMULATED_NAME)
    return generated


def translation_unit(sources: Sequence[str]) -> tuple[str, list[str]]:
    """The prelude and each distinct kernel once; the kernel names."""
    kernels: dict[str, str] = {}
    for src in sources:
        if not src.startswith(DEVICE_PRELUDE):
            raise ValueError("a generated source does not start with the shared prelude")
        body = src[len(DEVICE_PRELUDE) :]
        names = _KERNEL.findall(body)
        if len(names) != 1:
            raise ValueError(f"expected one kernel per source, found {names}")
        kernels.setdefault(names[0], body)
    return DEVICE_PRELUDE + "\n".join(kernels.values()), list(kernels)


def _nvcc() -> str | None:
    found = shutil.which("nvcc")
    if found:
        return found
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    path = os.path.join(home, "bin", "nvcc")
    return path if os.path.exists(path) else None


def compile_sources(tu: str, archs: Sequence[str] = ARCHS) -> str:
    """Compile `tu` for each arch; return which compiler did. Raises RuntimeError with the
    compiler's message on a failure, or when neither nvcc nor NVRTC is present."""
    nvcc = _nvcc()
    if nvcc is not None:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "turnout_cupy_kernels.cu")
            with open(path, "w") as f:
                f.write(tu)
            for arch in archs:
                cmd = [nvcc, "-cubin", f"-arch={arch}", "--std=c++14", "-o", path + ".cubin", path]
                r = subprocess.run(cmd, capture_output=True, text=True)
                if r.returncode != 0:
                    raise RuntimeError(f"nvcc -arch={arch} failed:\n{r.stderr or r.stdout}")
            version = subprocess.run([nvcc, "--version"], capture_output=True, text=True)
        return f"nvcc ({version.stdout.strip().splitlines()[-1]})"
    try:
        from cupy_backends.cuda.libs import nvrtc
    except Exception as e:
        raise RuntimeError(f"neither nvcc nor NVRTC (CuPy's bindings) is usable: {e}") from e
    for arch in archs:
        prog = nvrtc.createProgram(tu, "turnout_cupy_kernels.cu", [], [])
        try:
            nvrtc.compileProgram(prog, [f"-arch={arch}", "--std=c++14"])
        except Exception as e:
            raise RuntimeError(f"NVRTC -arch={arch} failed: {nvrtc.getProgramLog(prog)}") from e
        finally:
            nvrtc.destroyProgram(prog)
    return "NVRTC {}.{}".format(*nvrtc.getVersion())


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m turnout_cupy.check", description=__doc__)
    ap.add_argument(
        "--compile-only",
        action="store_true",
        required=True,
        help="generate and compile every kernel; no GPU needed (the only mode so far)",
    )
    ap.add_argument("--arch", action="append", help="override the architectures (sm_80, sm_90)")
    args = ap.parse_args(argv)
    archs = tuple(args.arch or ARCHS)
    try:
        sources = collect_sources()
        tu, names = translation_unit(sources)
        compiler = compile_sources(tu, archs)
    except Exception as e:
        print(f"turnout_cupy.check: FAILED: {e}", file=sys.stderr)
        return 1
    print(
        f"turnout_cupy.check: compiled {len(names)} kernels ({len(sources)} generated sources) "
        f"for {', '.join(archs)} with {compiler}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
