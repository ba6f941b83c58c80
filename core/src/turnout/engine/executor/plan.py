"""The execution plan: a flat list of prepared steps compiled into one straight-line function.

Each step is (kernel function, input names, output names). `Plan` turns the list into Python
source with one line per node and local variables for values, so the hot loop does no dict
lookups, no per-node bookkeeping, and a value is released (`v = None`) right after its last use.
A value whose producer's allocator pools is handed back to it (`free(v)`) just before that.
A kernel error is mapped back to its node through the line number of the generated code.
Chains of shape arithmetic run as one memoized step in the generated run (`shape_memo`).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from turnout.engine.executor.memory import value_bytes
from turnout.engine.executor.shape_memo import CHAIN_OP, memoize_shape_chains
from turnout.engine.executor.step import Step
from turnout.graph.errors import Fail, InvalidArgument, InvalidGraph, RuntimeException, TurnoutError

__all__ = ["Plan", "RunTerminated", "Step", "ignore_fp_errors", "restore_fp_errors"]

TERMINATE_EVERY = 16  # steps between checks of RunOptions.terminate


class RunTerminated(Fail):
    """The run was cancelled through `RunOptions.terminate` (onnxruntime raises Fail too)."""


_FP_STATE: Any = None  # numpy >= 2 keeps the floating-point error state in a context variable
_FP_IGNORE: Any = None
try:
    from numpy._core import umath as _umath

    _FP_IGNORE = _umath._make_extobj(all="ignore")
    _FP_STATE = _umath._extobj_contextvar
except (ImportError, AttributeError, TypeError):  # pragma: no cover - numpy 1.x
    pass


def ignore_fp_errors() -> Any:
    """What `with np.errstate(all="ignore"):` does on entry (kernels compute inf and NaN as
    ONNX says, silently), for a run: returns the token `restore_fp_errors` takes back.

    With numpy >= 2 the ignoring state is built once and a run only sets numpy's context
    variable (~0.1 us; an errstate builds its state per use, ~1-2 us of a sub-millisecond
    run). Per thread and nestable, as errstate is."""
    if _FP_STATE is not None:
        return _FP_STATE.set(_FP_IGNORE)
    return np.seterr(all="ignore")  # pragma: no cover - numpy 1.x: per thread there too


def restore_fp_errors(token: Any) -> None:
    """Undo the `ignore_fp_errors()` that returned `token`."""
    if _FP_STATE is not None:
        _FP_STATE.reset(token)
    else:  # pragma: no cover - numpy 1.x
        np.seterr(**token)


class _NoTerminate:
    terminate = False


NO_TERMINATE = _NoTerminate()
_counter = itertools.count()


class Plan:
    """A runnable graph: `run(*inputs, *outer_values, run_options)` returns the output tuple."""

    def __init__(
        self,
        graph_name: str,
        steps: Sequence[Step],
        input_names: Sequence[str],
        outer_names: Sequence[str],
        output_names: Sequence[str],
        constants: dict[str, Any],
        release: bool = True,
        memo_providers: frozenset[str] = frozenset(),
    ) -> None:
        """`memo_providers`: the host providers whose shape chains the generated run memoizes
        (`shape_memo`); none when empty."""
        self.graph_name = graph_name
        self.release = release  # free each intermediate after its last reader
        self.steps = tuple(steps)
        self.input_names = tuple(input_names)
        self.outer_names = tuple(outer_names)
        self.output_names = tuple(output_names)
        self.constants = constants
        self.memo_providers = memo_providers
        # what the generated run calls: `steps` with shape chains merged (profiles time `steps`)
        self.run_steps = (
            memoize_shape_chains(
                self.steps, constants, self.output_names, memo_providers, self._explain_step
            )
            if memo_providers
            else list(self.steps)
        )
        self._pruned: dict[tuple[str, ...], Plan] = {}
        self._lock = threading.Lock()
        self.run: Callable[..., tuple[Any, ...]] = self._generate()

    # ---------------------------------------------------------------- code generation
    def _releases(
        self, steps: Sequence[Step]
    ) -> tuple[list[list[str]], dict[str, Callable[[Any], None]]]:
        """What each of `steps` leaves dead (its inputs' last read; outputs nobody reads), and the
        allocator `free` of each produced value whose allocator pools. Empty when the plan
        keeps every intermediate (`release=False`). Shared by the generated and the profiled
        run, so a profile sees the memory the plain run has (the plain run's shape chains, one
        step each there, release their sources no later than their Shape nodes would)."""
        if not self.release:
            return [[] for _ in steps], {}
        last_use: dict[str, int] = {}
        for i, st in enumerate(steps):
            for x in st.inputs:
                if x:
                    last_use[x] = i
        keep = set(self.output_names) | set(self.constants)
        dead_after: list[list[str]] = []
        for i, st in enumerate(steps):
            dead = [x for x in dict.fromkeys(st.inputs) if x and last_use[x] == i and x not in keep]
            dead += [  # produced, never read, not an output: nothing needs it
                y for y in dict.fromkeys(st.outputs) if y and y not in last_use and y not in keep
            ]
            dead_after.append(dead)
        free_fn = {y: st.free for st in steps if st.free is not None for y in st.outputs if y}
        return dead_after, free_fn

    def _generate(self) -> Callable[..., tuple[Any, ...]]:
        steps = self.run_steps
        slot: dict[str, str] = {}
        params: list[str] = []
        for name in self.input_names + self.outer_names:
            if name not in slot:
                slot[name] = f"v{len(slot)}"
                params.append(slot[name])
        consts = list(self.constants)
        for i, name in enumerate(consts):
            slot.setdefault(name, f"c{i}")
        dead_after, free_fn = self._releases(steps)
        free_of: dict[str, str] = {}  # produced value -> name of its allocator's free
        frees_fns: list[Callable[[Any], None]] = []
        for y, fn in free_fn.items():
            if fn not in frees_fns:
                frees_fns.append(fn)
            free_of[y] = f"fr{frees_fns.index(fn)}"
        body: list[str] = []
        body_step: dict[int, int] = {}  # body line index -> step index
        for i, st in enumerate(steps):
            args = []
            for x in st.inputs:
                if not x:
                    args.append("None")
                elif x in slot:
                    args.append(slot[x])
                else:
                    raise InvalidGraph(
                        f"graph {self.graph_name!r}: node {st.name!r} ({st.op_type}) reads "
                        f"{x!r}, which no node, input or initializer defines"
                    )
            outs = []
            for y in st.outputs:
                if y:
                    slot.setdefault(y, f"v{len(slot)}")
                    outs.append(slot[y])
                else:
                    outs.append("_")
            target = ", ".join(outs) + ("," if len(outs) == 1 else "")
            body_step[len(body)] = i
            body.append(
                f"    {target} = f{i}({', '.join(args)})"
                if outs
                else f"    f{i}({', '.join(args)})"
            )
            dead = dead_after[i]
            if dead:
                body.extend(f"    {free_of[x]}({slot[x]})" for x in dead if x in free_of)
                body.append("    " + " = ".join(slot[x] for x in dead) + " = None")
            if (i + 1) % TERMINATE_EVERY == 0 and i + 1 < len(steps):
                body.append("    if _ro.terminate: raise _Term(_TERM_MSG)")
        for y in self.output_names:
            if y not in slot:
                raise InvalidGraph(f"graph {self.graph_name!r}: output {y!r} is never produced")
        ret = ", ".join(slot[y] for y in self.output_names)
        fn_names = ", ".join(f"f{i}" for i in range(len(steps)))
        c_names = ", ".join(f"c{i}" for i in range(len(consts)))
        fr_names = "".join(f"fr{k}, " for k in range(len(frees_fns)))
        src = [
            "def _make(_fns, _consts, _frees, _explain):",
            f"    {fn_names + ',' if steps else '_'} = _fns" if steps else "    pass",
            f"    {c_names + ',' if consts else '_'} = _consts" if consts else "    pass",
            f"    {fr_names} = _frees" if frees_fns else "    pass",
            f"    def run({', '.join([*params, '_ro=_NO_TERM'])}):",
            "        try:",
        ]
        # 1-based line number of each step's line in the generated source
        self._line_step = {len(src) + k + 1: v for k, v in body_step.items()}
        src += ["        " + line for line in (body or ["    pass"])]
        src.append(f"            return ({ret}{',' if len(self.output_names) == 1 else ''})")
        # the error context inside the run itself: a wrapper was one more Python call (and
        # an argument tuple) per run, and per call of a nested graph (If, Loop bodies)
        src += [
            "        except _Term:",
            "            raise",
            "        except Exception as e:",
            "            raise _explain(e) from e",
            "    return run",
        ]
        self.source = "\n".join(src)
        filename = f"<turnout plan {self.graph_name} #{next(_counter)}>"
        self._filename = filename
        code = compile(self.source, filename, "exec")
        ns: dict[str, Any] = {
            "_Term": RunTerminated,
            "_TERM_MSG": "run terminated by RunOptions.terminate",
            "_NO_TERM": NO_TERMINATE,
        }
        exec(code, ns)
        run: Callable[..., tuple[Any, ...]] = ns["_make"](
            [st.fn for st in steps],
            [self.constants[c] for c in consts],
            frees_fns,
            self._explain,
        )
        return run

    def _explain(self, e: Exception) -> Exception:
        step = None
        tb = e.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == self._filename:
                step = self._line_step.get(tb.tb_lineno)
            tb = tb.tb_next
        if step is None:
            return e
        st = self.run_steps[step]
        where = f"node {st.name!r} ({st.op_type}) on {st.provider}"
        if isinstance(e, TurnoutError) and st.op_type == CHAIN_OP:
            return e  # the chain named the node that failed in it
        if isinstance(e, TurnoutError):
            msg = str(e)
            cls: type[Exception] = type(e)
            if st.name in msg:
                return e
            return cls(f"{where}: {msg}")
        if isinstance(e, ValueError) and "unpack" in str(e):
            return RuntimeException(f"{where}: kernel returned the wrong number of outputs ({e})")
        if isinstance(e, (IndexError, KeyError)):
            return InvalidArgument(f"{where}: {type(e).__name__}: {e}")
        return RuntimeException(f"{where}: {type(e).__name__}: {e}")

    # ---------------------------------------------------------------- variants
    def pruned(self, outputs: tuple[str, ...]) -> Plan:
        """A plan computing only `outputs` (RunOptions.only_execute_path_to_fetches)."""
        with self._lock:
            if outputs in self._pruned:
                return self._pruned[outputs]
            need = set(outputs)
            keep: list[Step] = []
            for st in reversed(self.steps):
                if any(y in need for y in st.outputs):
                    keep.append(st)
                    need.update(x for x in st.inputs if x)
            plan = Plan(
                self.graph_name,
                list(reversed(keep)),
                self.input_names,
                self.outer_names,
                outputs,
                self.constants,
                self.release,
                self.memo_providers,
            )
            self._pruned[outputs] = plan
            return plan

    def run_profiled(
        self,
        args: Sequence[Any],
        record: Callable[[Step, int, int, list[Any], Sequence[Any]], None],
        run_options: Any = NO_TERMINATE,
    ) -> tuple[Any, ...]:
        """Interpreted run that times every step: record(step, start_ns, dur_ns, ins, outs).
        The sizes of the values it produced are left in `last_sizes` (for peak memory)."""
        sizes: dict[str, int] = {}
        self.last_sizes = sizes
        env: dict[str, Any] = dict(self.constants)
        names = self.input_names + self.outer_names
        env.update(zip(names, args))
        clock = time.perf_counter_ns
        dead_after, free_fn = self._releases(self.steps)
        for i, st in enumerate(self.steps):
            if run_options.terminate:
                raise RunTerminated("run terminated by RunOptions.terminate")
            ins = [env[x] if x else None for x in st.inputs]
            t0 = clock()
            try:
                outs = st.fn(*ins)
                if len(outs) != len(st.outputs):
                    raise ValueError(f"not enough values to unpack (expected {len(st.outputs)})")
            except Exception as e:
                raise self._explain_step(i, e) from e
            record(st, t0, clock() - t0, ins, outs)
            produced = {y: v for y, v in zip(st.outputs, outs) if y}
            env.update(produced)
            sizes.update((y, value_bytes(v)) for y, v in produced.items())
            del ins, outs, produced  # no local may keep a dead value alive
            for x in dead_after[i]:  # as the generated run does: a profile measures its memory
                free = free_fn.get(x)
                if free is None:
                    env.pop(x, None)
                elif x in env:
                    free(env.pop(x))
        return tuple(env[y] for y in self.output_names)

    def _explain_step(self, i: int, e: Exception) -> Exception:
        st = self.steps[i]
        where = f"node {st.name!r} ({st.op_type}) on {st.provider}"
        if isinstance(e, TurnoutError):
            return type(e)(f"{where}: {e}") if st.name not in str(e) else e
        return RuntimeException(f"{where}: {type(e).__name__}: {e}")
