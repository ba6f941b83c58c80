"""The on-disk compile cache: where numba keeps compiled kernels, and how they are compiled.

Every numba function of this provider (fixed kernels in `kernels/` and generated group kernels
from `codegen`) is compiled through `jit()`, which:

- points numba's cache at `<root>/numba/<key>/`, where `<root>` is turnout's cache root
  (`turnout.sdk.cache_dir.cache_root()`: `$TURNOUT_CACHE_DIR` or the user cache directory)
  and `<key>` names the numba version, the host CPU and this package's version: a kernel
  compiled by another numba, for another CPU or by another turnout-numba is never loaded
  (numba's own index also checks the source file's timestamp);
- compiles the requested signatures immediately (session creation, never the first run);
  a cached signature loads without numba's context refresh (`_load_cached`), and the array
  conversions a call will need are registered then too (`_accept_writable`);
- treats a corrupted cache entry as a miss: the entry is removed and the kernel recompiled.

Generated sources are written as modules under `<key>/src/` (named by the hash of their text),
so numba can cache them like any file-backed function.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import inspect
import itertools
import os
import secrets
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numba
from numba.core.typing.templates import Signature

from turnout.graph.errors import EPFail
from turnout.graph.logs import logger
from turnout.sdk.cache_dir import cache_root

__all__ = [
    "NUMBA_CONFIG",
    "Sig",
    "cache_dir",
    "cache_key",
    "compile_count",
    "distinct_helper",
    "file_digest",
    "jit",
    "load_source",
    "loaded_modules",
    "note_used",
    "recording",
]

Sig = str | Signature
"""A signature to compile: numba's text form or a `types.void(...)` object."""

# numba sets its options (CACHE_DIR, NUMBA_NUM_THREADS...) from the environment at import, by
# assigning module globals in a function: they exist at run time but not for a type checker.
NUMBA_CONFIG: Any = numba.config

_PRELUDE = (
    "from __future__ import annotations\nimport math\nimport numpy as np\n"
    "from numba import prange\n"
)
_LOCK = threading.RLock()
_DISPATCHERS: dict[tuple[Any, ...], Any] = {}
_MODULES: dict[str, ModuleType] = {}
_RECORDERS = threading.local()  # .stack: the sets `recording()` collects module names into


def _spread_function_ids() -> None:
    """Start numba's function counter (`distinct_helper` says what it names) at a random point
    of a 60-bit range, in this process and again in each forked child.

    Counting from 1, processes started alike, and children forked from one parent, number
    their functions alike, so two different functions of one qualified name (closures in
    numba's own overloads, say) compiled by two such processes can get one symbol, and a
    process loading both kernels runs one in place of the other (numba issue 10486). Apart,
    the counters' ranges do not meet. `distinct_helper` names this provider's closures; this
    covers the rest. numba without the counter: nothing to do."""
    from numba.core import bytecode

    if hasattr(bytecode.FunctionIdentity, "_unique_ids"):
        bytecode.FunctionIdentity._unique_ids = itertools.count(secrets.randbits(60))


_spread_function_ids()
os.register_at_fork(after_in_child=_spread_function_ids)


def _version() -> str:
    from . import __version__

    return __version__


@functools.cache
def cache_key() -> str:
    """numba version, host CPU name and turnout-numba version: the parts a kernel depends on
    (fixed for the life of the process, so computed once)."""
    import llvmlite.binding as ll

    cpu = ll.get_host_cpu_name() or "cpu"
    return f"numba{numba.__version__}-{cpu}-turnout_numba{_version()}"


def cache_dir() -> Path:
    """The keyed cache directory (created on demand)."""
    return cache_root() / "numba" / cache_key()


@contextlib.contextmanager
def _numba_cache_at(path: Path) -> Iterator[None]:
    """numba reads its cache location when a dispatcher enables caching: set it just then."""
    old = NUMBA_CONFIG.CACHE_DIR
    NUMBA_CONFIG.CACHE_DIR = str(path)
    try:
        yield
    finally:
        NUMBA_CONFIG.CACHE_DIR = old


_WRITABLE: set[Path] = set()  # directories a probe file was written to in this process


def _writable(path: Path) -> bool:
    """Whether `path` exists (created on demand) and takes files. A directory that took the
    probe once is only checked to still exist afterwards: a session asks for every kernel."""
    if path in _WRITABLE and path.is_dir():
        return True
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".probe{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError:
        _WRITABLE.discard(path)
        return False
    _WRITABLE.add(path)
    return True


def jit(
    pyfunc: Callable[..., Any],
    sigs: Sequence[Sig],
    *,
    parallel: bool = False,
    imports: str = "",
    contract: bool = False,
    reassoc: bool = False,
) -> Callable[..., Any]:
    """A numba dispatcher for `pyfunc` with `sigs` compiled now (loaded from cache if there).

    The function is compiled from a copy of its source with the standard prelude (math, np,
    prange) and `imports` (import lines for the other names it calls, such as an intrinsic).
    `contract` lets LLVM fuse a multiply and an add into one FMA (fast-math `contract` only: no
    reassociation, no NaN/inf assumptions); kernels that evaluate `vecmath` polynomials ask for
    it (a vectorized float32 sigmoid 1.1 -> 0.8 ns an element), the others keep numpy's
    two-rounding arithmetic bit for bit. `reassoc` also lets it reorder sums (vector lanes of
    a dot product, as BLAS sums them): for products only.
    Dispatchers are shared in-process per (function, parallel); asking again for a signature
    already compiled costs nothing.
    """
    with _LOCK:
        key = (pyfunc, parallel, contract, reassoc)
        disp = _DISPATCHERS.get(key)
        root = cache_dir()
        use_cache = _writable(root)
        if disp is None:
            module = _variant_module(pyfunc, parallel, imports, contract, reassoc)
            variant = getattr(module, pyfunc.__name__)
            opts: dict[str, Any] = {"nogil": True, "parallel": parallel, "error_model": "numpy"}
            if contract or reassoc:
                opts["fastmath"] = {"contract", "reassoc"} if reassoc else {"contract"}
            if use_cache:
                with _numba_cache_at(root):
                    disp = numba.njit(cache=True, **opts)(variant)
            else:
                disp = numba.njit(**opts)(variant)
            _DISPATCHERS[key] = disp
        note_used(disp)
        disp.disable_compile(False)
        try:
            for sig in sigs:
                _compile(disp, sig, root if use_cache else None)
            _accept_writable(disp)
        finally:
            # a call never compiles: arguments convert to a compiled signature (a writable
            # array to a read-only one) or the call fails loudly
            disp.disable_compile(True)
        return disp  # type: ignore[no-any-return]


def _accept_writable(disp: Any) -> None:
    """Register now the conversions a call makes to the arrays of the compiled signatures:
    from a writable array to a read-only one, from any layout to an 'A' one. numba would find
    them on the first such call, typing every argument in Python (1-20 ms a kernel, paid by
    the first run)."""
    from numba.core import types

    ctx = disp.typingctx
    for sig in disp.nopython_signatures:
        for formal in sig.args:
            if not isinstance(formal, types.Array):
                continue
            layouts: tuple[Any, ...] = ("C", "F", "A") if formal.layout == "A" else (formal.layout,)
            flags = (False, True) if not formal.mutable else (False,)
            for layout in layouts:
                for readonly in flags:
                    actual = formal.copy(layout=layout, readonly=readonly)
                    if actual != formal:
                        ctx.install_possible_conversions([actual], [formal])


def _variant_module(
    pyfunc: Callable[..., Any],
    parallel: bool,
    imports: str = "",
    contract: bool = False,
    reassoc: bool = False,
) -> ModuleType:
    """The generated module holding `pyfunc`'s source for one compile flag. numba's cache
    index does not record compile flags: the serial and the parallel variant of a function
    get their own source file, hence their own cache entries.

    Reading a function's source tokenizes it (about 10 ms a kernel); a note in the cache,
    keyed by the defining file's path, size and modification time, names the module made
    from it last time, so a warm session reads no source."""
    origin = inspect.getsourcefile(pyfunc) or ""
    try:
        st = os.stat(origin)
        stamp = (
            f"{origin}|{st.st_size}|{st.st_mtime_ns}|{pyfunc.__qualname__}|{parallel}|{imports}"
            f"|{contract}" + ("|reassoc" if reassoc else "")
        )
    except OSError:
        stamp = ""
    note = cache_dir() / "src" / f"note_{hashlib.sha256(stamp.encode()).hexdigest()[:20]}"
    if stamp:
        try:
            modname = note.read_text().strip()
            found = _load_module(modname, note.parent / f"{modname}.py")
        except Exception:  # no note, or a module the cache lost or mangled: made again below
            found = None
        if found is not None and hasattr(found, pyfunc.__name__):
            return found  # (a module without it: a note written from a stale source, below)
    text = (
        f"# turnout-numba kernel {pyfunc.__name__}, parallel={parallel}"
        + (", fastmath=reassoc" if reassoc else ", fastmath=contract" if contract else "")
        + f"\n{_PRELUDE}{imports}\n\n"
        + textwrap.dedent(inspect.getsource(pyfunc))
    )
    try:
        mod = load_source(text, "k")
    except SyntaxError as e:
        raise _stale_source(pyfunc, origin) from e
    if not hasattr(mod, pyfunc.__name__):
        raise _stale_source(pyfunc, origin)
    if stamp and mod.__file__ and Path(mod.__file__).parent == note.parent:
        with contextlib.suppress(OSError):
            tmp = note.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(mod.__name__)
            os.replace(tmp, note)
    return mod


def _stale_source(pyfunc: Callable[..., Any], origin: str) -> EPFail:
    """The source read for `pyfunc` is not its definition: its file changed on disk after it
    was imported (the line numbers point into the new text). No note is written for it."""
    return EPFail(
        f"turnout-numba kernel {pyfunc.__qualname__}: {origin} changed since it was imported, "
        "so its source cannot be read back; restart the process"
    )


_COMPILES = [0]  # signatures compiled by LLVM in this process (cache loads excluded)


def compile_count() -> int:
    """How many kernel signatures this process compiled rather than loaded from the cache
    (a compiled model is loaded with none)."""
    return _COMPILES[0]


def _compile(disp: Any, sig: Sig, root: Path | None) -> None:
    misses = sum(disp.stats.cache_misses.values()) if root is not None else 0
    compiled = len(disp.overloads)
    try:
        if root is not None and _load_cached(disp, sig):
            return
        disp.compile(sig)
        if root is None:
            _COMPILES[0] += len(disp.overloads) - compiled
        else:
            _COMPILES[0] += sum(disp.stats.cache_misses.values()) - misses
    except Exception as e:
        if root is None or isinstance(e, numba.core.errors.TypingError):
            raise
        # A corrupted or unreadable cache entry: drop this function's entries and recompile.
        logger.warning("numba cache entry for %s unusable (%s); recompiling", disp.__name__, e)
        _purge(disp, root)
        disp._cache = numba.core.caching.NullCache()
        disp.compile(sig)
        _COMPILES[0] += 1


_LAZY_READY: list[bool] = []  # the run-time symbols a cached kernel links to are installed


def _load_cached(disp: Any, sig: Sig) -> bool:
    """Load `sig` from numba's disk cache without numba's context refresh; False on a miss.

    numba's own load first refreshes its target context: it imports and installs every
    lowering and typing registry (~200 ms per process, most of a warm session's creation),
    which only compiling needs (the compiler refreshes by itself on a miss). A cached kernel
    links only to run-time symbols: numba's helpers and math (installed with the context),
    NRT (initialized here), hash secrets (installed by importing numba's hashing module) and
    the threading layer (re-run by the parallel kernel's own reload hooks). numba internals
    that moved make this a miss, and `disp.compile` takes the documented path."""
    cache = getattr(disp, "_cache", None)
    load = getattr(cache, "_load_overload", None)
    guard = getattr(cache, "_guard_against_spurious_io_errors", None)
    if load is None or guard is None or not hasattr(disp, "_cache_hits"):
        return False
    from numba.core import sigutils
    from numba.core.compiler_lock import global_compiler_lock

    with global_compiler_lock:
        args, _ = sigutils.normalize_signature(sig)  # type: ignore[no-untyped-call]
        if tuple(args) in disp.overloads:
            return True
        ctx = disp.targetctx
        if not _LAZY_READY:
            import numba.cpython.hashing  # noqa: F401 - installs the hash-secret symbols
            from numba.core.runtime import nrt

            nrt.rtsys.initialize(ctx)
            _LAZY_READY.append(True)
        cres = None
        try:
            with guard():
                cres = load(sig, ctx)
        except Exception:  # a corrupted entry, or internals that moved: numba's own path
            return False  # decides (`_compile` purges an entry it cannot load)
        if cres is None:
            return False
        disp._cache_hits[sig] += 1
        if not cres.objectmode:
            ctx.insert_user_function(cres.entry_point, cres.fndesc, [cres.library])
        disp.add_overload(cres)
        return True


def file_digest(path: str | Path) -> str:
    """The first 16 hex digits of the SHA-256 of a file: the tag a module whose code is compiled
    into generated kernels (an intrinsic's tile) writes into their sources, since numba's cache
    checks only a kernel's own source and would serve one compiled with the old code."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def distinct_helper(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    """Name `fn`, a numba helper a factory makes (an overload's `impl` closing over one tile
    of several), after what it is; returns it.

    numba names a compiled function by its module, qualified name, a counter of the process
    that compiled it and its argument types, and a kernel calls its helpers by those names.
    Closures of one factory share a qualified name (and here their argument types), so two
    processes writing one cache can give the same name to two different helpers; a third
    process that loads both kernels links one kernel's calls to the other's helper. It
    happened: an int16 GEMM called its one-row tile where its four-row tile belonged, and rows
    1-3 of every tile came out wrong. A distinct qualified name per helper rules it out."""
    fn.__name__ = fn.__qualname__ = name
    return fn


def _purge(disp: Any, root: Path) -> None:
    stem = f"{disp.py_func.__qualname__}".split(".")[-1]
    for p in root.rglob(f"*{stem}*"):
        with contextlib.suppress(OSError):
            p.unlink()


@contextlib.contextmanager
def recording(into: set[str]) -> Iterator[set[str]]:
    """Collect into `into` the generated modules whose kernels this thread asks for meanwhile
    (`jit`, `note_used`): a session's compiled model carries those, not every module the
    process loaded for other sessions."""
    stack = _RECORDERS.__dict__.setdefault("stack", [])
    stack.append(into)
    try:
        yield into
    finally:
        stack.pop()


def note_used(*dispatchers: Any) -> None:
    """Record the modules of `dispatchers` for the `recording()`s open on this thread: a
    builder that reuses a kernel it memoized (no `jit` call) says so here."""
    stack = getattr(_RECORDERS, "stack", None)
    if not stack:
        return
    for disp in dispatchers:
        name = getattr(getattr(disp, "py_func", None), "__module__", None)
        if name in _MODULES:
            for into in stack:
                into.add(name)


def loaded_modules() -> dict[str, Path]:
    """Generated kernel modules this process loaded (name -> source file), oldest first."""
    with _LOCK:
        return {name: Path(str(mod.__file__)) for name, mod in _MODULES.items()}


def load_source(source: str, name_hint: str = "group") -> ModuleType:
    """Import generated `source` as a module stored in the cache (named by its hash)."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:20]
    modname = f"turnout_numba_gen_{name_hint}_{digest}"
    with _LOCK:
        mod = _MODULES.get(modname)
        if mod is not None:
            return mod
        src_dir = cache_dir() / "src"
        path = src_dir / f"{modname}.py"
        if not _writable(src_dir):
            import tempfile

            src_dir = Path(tempfile.mkdtemp(prefix="turnout_numba_"))
            path = src_dir / f"{modname}.py"
        if not path.exists() or path.read_text() != source:
            # an existing file with other text is a corrupted entry: replace it (atomically)
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(source)
            os.replace(tmp, path)
        found = _load_module(modname, path)
        assert found is not None
        return found


def _load_module(modname: str, path: Path) -> ModuleType | None:
    """Import the generated module `modname` from `path` (once per process); None when the
    file is not there or is not a generated module of that name."""
    with _LOCK:
        mod = _MODULES.get(modname)
        if mod is not None:
            return mod
        if not modname.startswith("turnout_numba_gen_") or not path.is_file():
            return None
        spec = importlib.util.spec_from_file_location(modname, path)
        if spec is None or spec.loader is None:
            return None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[modname] = mod
        try:
            spec.loader.exec_module(mod)
        except BaseException:
            del sys.modules[modname]
            raise
        _MODULES[modname] = mod
        return mod
