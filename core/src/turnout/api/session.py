"""InferenceSession: onnxruntime's Python API over turnout's pipeline.

load -> infer shapes -> partition (providers by priority, CPU last) -> plan -> run.
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from turnout._version import __version__
from turnout.api.compiler import read_artifact
from turnout.api.ep_assignment import OrtEpAssignedSubgraph, assigned_subgraphs, input_ep_devices
from turnout.api.ep_devices import OrtEpDevice, model_metadata, policy_provider_specs
from turnout.api.options import RunOptions, SessionOptions
from turnout.api.values import CPU_MEMORY_INFO, OrtDevice, OrtMemoryInfo, OrtValue, OrtValueVector
from turnout.engine import pipeline
from turnout.engine.executor.memory import peak_live_bytes, static_sizes
from turnout.engine.executor.plan import (
    NO_TERMINATE,
    Plan,
    RunTerminated,
    ignore_fp_errors,
    restore_fp_errors,
)
from turnout.engine.feeds import InputSpec, ort_invalid_argument
from turnout.engine.partition import PartitionReport
from turnout.engine.profiling import Profiler
from turnout.engine.provider_selection import (
    CPU_PROVIDER,
    ProviderSpec,
    apply_dynamic_options,
    select_providers,
)
from turnout.graph.dtypes import value_type_string
from turnout.graph.errors import EPFail, Fail, FallbackError, InvalidArgument, ModelLoadCanceled
from turnout.graph.ir import ValueInfo
from turnout.graph.logs import logger
from turnout.graph.model import ModelSource, model_label
from turnout.sdk.plugins import registry

__all__ = [
    "InferenceSession",
    "ModelMetadata",
    "NodeArg",
    "get_all_providers",
    "get_available_providers",
    "get_build_info",
    "get_device",
    "get_version_string",
]


@dataclass(frozen=True)
class NodeArg:
    """A graph input/output as ORT describes it: name, shape (ints, dim names or None), type."""

    name: str
    type: str
    shape: list[int | str | None]

    @staticmethod
    def from_info(info: ValueInfo) -> NodeArg:
        tp = info.type_proto
        type_str = value_type_string(tp) if tp is not None else "undefined"
        shape: list[int | str | None] = []
        if info.shape is not None:
            # onnx shape inference names unknown dims "unk__N"; onnxruntime reports None
            shape = [
                None
                if d is None or d == "" or (isinstance(d, str) and d.startswith("unk__"))
                else d
                for d in info.shape
            ]
        return NodeArg(info.name, type_str, shape)


def _invented_dim(d: int | str | None) -> bool:
    return d is None or d == "" or (isinstance(d, str) and d.startswith("unk__"))


@dataclass(frozen=True)
class ModelMetadata:
    producer_name: str
    graph_name: str
    domain: str
    description: str
    graph_description: str
    version: int
    custom_metadata_map: dict[str, str] = field(default_factory=dict)


def get_version_string() -> str:
    return __version__


def get_device() -> str:
    return "CPU"


def get_build_info() -> str:
    return f"turnout {__version__} (python, numpy {np.__version__}, onnx {onnx.__version__})"


def get_all_providers() -> list[str]:
    return [f.name for f in registry.all()]


def get_available_providers() -> list[str]:
    return [f.name for f in registry.available()]


class InferenceSession:
    """Load a model, place its nodes on providers, and run it (onnxruntime-compatible)."""

    def __init__(
        self,
        path_or_bytes: ModelSource,
        sess_options: SessionOptions | None = None,
        providers: Sequence[ProviderSpec] | None = None,
        provider_options: Sequence[dict[str, Any]] | None = None,
        **kwargs: Any,
    ) -> None:
        t0 = time.perf_counter_ns()
        self._sess_options = sess_options or SessionOptions()
        self._enable_fallback = int(kwargs.get("enable_fallback", 1)) == 1
        self._numpy_only = False  # set by the run-time fallback: the numpy kernels alone
        self._label = model_label(path_or_bytes)
        self._check_canceled()
        self._model_path = (
            os.fspath(path_or_bytes) if isinstance(path_or_bytes, (str, os.PathLike)) else None
        )
        self._lock = threading.Lock()
        self._profiler: Profiler | None = None
        if self._sess_options.enable_profiling:
            self._profiler = Profiler(self._sess_options.profile_file_prefix)
        model = pipeline.load(path_or_bytes, self._sess_options)
        self._check_canceled()
        pipeline.validate(model, self._label)
        self._check_canceled()
        base_dir = Path(self._model_path).resolve().parent if self._model_path else None
        self._artifact = read_artifact(model, base_dir)  # a compiled model, or None
        self._loaded = model  # optimized per provider list in _set_providers
        if providers is None and self._sess_options.has_providers():
            providers = list(self._sess_options._providers)
        elif providers is None and self._sess_options.has_selection_policy():
            providers = policy_provider_specs(
                self._sess_options._ep_policy,
                self._sess_options._ep_delegate,
                model_metadata(model),
            )
        self._set_providers(providers, provider_options)
        self._check_canceled()
        if self._sess_options.optimized_model_filepath:
            pipeline.save_optimized(self._model, self._sess_options)
        if self._profiler is not None:
            self._profiler.event(
                "Session", "session_initialization", t0, time.perf_counter_ns() - t0, {}
            )

    # ------------------------------------------------------------------ setup
    def _check_canceled(self) -> None:
        if self._sess_options._cancel_load:
            raise ModelLoadCanceled(
                "[ONNXRuntimeError] : 12 : MODEL_LOAD_CANCELED : session creation of "
                f"{self._label} canceled by SessionOptions.set_load_cancellation_flag(True)"
            )

    def _init_io(self) -> None:
        g = self._graph
        opts = self._sess_options
        inits = set(g.initializers)
        self._required = [i for i in g.inputs if i.name not in inits]
        self._overridable = [i for i in g.inputs if i.name in inits]
        self._required_names = [i.name for i in self._required if i.kind != "optional"]
        self._specs = {i.name: InputSpec(i) for i in g.inputs}
        self._input_order = [i.name for i in g.inputs]
        self._output_names = [o.name for o in g.outputs]
        self._overrides: dict[str, Any] = {}
        for name, value in opts._initializers.items():
            if name not in inits:
                raise InvalidArgument(
                    f"{self._label}: add_initializer({name!r}): no such initializer"
                )
            self._overrides[name] = (
                value._value if isinstance(value, OrtValue) else np.asarray(value)
            )

    def _set_providers(
        self,
        providers: Sequence[ProviderSpec] | None,
        provider_options: Sequence[dict[str, Any]] | None,
    ) -> None:
        chosen = select_providers(
            providers, provider_options, self._sess_options, self._label, self._numpy_only
        )
        instances = chosen.instances
        if self._artifact is not None:  # its providers take their compiled blobs first
            self._artifact.install(instances, self._label)
        optimized = pipeline.optimize(
            self._loaded,
            instances,
            self._sess_options,
            self._label,
            already_optimized=self._artifact is not None,
        )
        self._model, self._graph = optimized.model, optimized.graph
        self._optimization_report = optimized.report
        self._init_io()
        self._providers = instances
        self._selection = chosen
        self._provider_specs = [
            (p.name, dict(p.requested_options)) for p in instances if p.name not in chosen.hosts
        ]
        self._reports: dict[str, PartitionReport] = {}
        part = pipeline.partition(self._graph, instances)
        self._prepared = pipeline.compile(part, instances, self._reports, self._overrides)
        self._reports[""].mark_hosts(chosen.hosts)
        self._plan: Plan = pipeline.plan(self._prepared, self._sess_options)
        report = self._reports[""]
        sizes, report.unsized = static_sizes(self._plan.steps, self._graph.value_infos)
        report.peak_bytes = self._peak(self._plan, sizes)
        self._device_plans: dict[frozenset[str], Plan] = {}
        if providers is not None and chosen.requested != [CPU_PROVIDER]:
            self._apply_fallback_policy()
        logger.info("%s: placed nodes %s", self._label, self.partition_report().counts())

    def optimization_report(self) -> Any:
        """What the graph optimizer did for this session (`OptimizationReport`)."""
        return self._optimization_report

    def _apply_fallback_policy(self) -> None:
        """Nodes the requested providers declined landed on CPU: allow, warn once, or refuse."""
        policy = self._sess_options.fallback
        if policy == "allow":
            return
        fell = self.partition_report().fallbacks(CPU_PROVIDER)
        if not fell:
            return
        if policy == "error":
            lines = [f"  {node} ({op}): {why}" for node, op, why in fell]
            raise FallbackError(
                f"{self._label}: {len(fell)} node(s) would fall back to {CPU_PROVIDER} "
                f"(fallback policy 'error'):\n" + "\n".join(lines)
            )
        kinds: dict[str, int] = {}
        for _, op, why in fell:
            key = f"{op} ({why})"
            kinds[key] = kinds.get(key, 0) + 1
        summary = "; ".join(f"{k} x{n}" for k, n in sorted(kinds.items(), key=lambda x: -x[1]))
        logger.warning(
            "%s: %d node(s) fell back to %s: %s", self._label, len(fell), CPU_PROVIDER, summary
        )

    # ------------------------------------------------------------------ metadata
    def get_inputs(self) -> list[NodeArg]:
        return [NodeArg.from_info(i) for i in self._required]

    def get_outputs(self) -> list[NodeArg]:
        return [NodeArg.from_info(o) for o in self._graph.outputs]

    def get_overridable_initializers(self) -> list[NodeArg]:
        return [NodeArg.from_info(i) for i in self._overridable]

    def get_modelmeta(self) -> ModelMetadata:
        m = self._model
        return ModelMetadata(
            producer_name=m.producer_name,
            graph_name=m.graph.name,
            domain=m.domain,
            description=m.doc_string,
            graph_description=m.graph.doc_string,
            version=m.model_version,
            custom_metadata_map={p.key: p.value for p in m.metadata_props},
        )

    def get_providers(self) -> list[str]:
        """The providers asked for (and available), CPU last, as onnxruntime lists them; host
        providers serving the CPU request show in `partition_report()`, not here."""
        return list(self._selection.requested)

    def get_provider_options(self) -> dict[str, dict[str, str]]:
        return {name: {k: str(v) for k, v in opts.items()} for name, opts in self._provider_specs}

    def get_session_options(self) -> SessionOptions:
        return self._sess_options

    def set_providers(
        self,
        providers: Sequence[ProviderSpec] | None = None,
        provider_options: Sequence[dict[str, Any]] | None = None,
    ) -> None:
        """Re-partition the model onto a new provider list (like ORT, this rebuilds the session)."""
        with self._lock:
            self._set_providers(providers, provider_options)

    def partition_report(self) -> PartitionReport:
        """Where every node runs and why, the copies inserted, nested graphs under their node."""
        return self._reports[""]

    def get_provider_graph_assignment_info(self) -> list[OrtEpAssignedSubgraph]:
        """onnxruntime's form of the partition: one entry per fused group or single node.
        Needs the session config entry `session.record_ep_graph_assignment_info` = "1"."""
        return assigned_subgraphs(self._reports[""], self._graph, self._sess_options._config)

    def get_input_epdevices(self) -> list[OrtEpDevice | None]:
        """For each input (as `get_inputs()` lists them), the EP device that reads it first."""
        return input_ep_devices(self._reports[""], self._graph, [i.name for i in self._required])

    # ------------------------------------------------------------------ running
    def _prepare_feeds(self, input_feed: dict[str, Any], adapters: Any = None) -> list[Any]:
        if not isinstance(input_feed, dict):
            raise InvalidArgument(
                f"input_feed must be a dict of input name -> value, not {type(input_feed).__name__}"
            )
        for name in self._required_names:  # onnxruntime checks these first
            if name not in input_feed:
                raise self._missing_inputs(input_feed)
        if adapters:  # active LoRA adapters feed their parameters (turnout.api.lora)
            from turnout.api.lora import adapter_feeds

            input_feed = adapter_feeds(adapters, input_feed)
        specs = self._specs
        for name in input_feed:
            if name not in specs:
                raise ort_invalid_argument(
                    f"Invalid input name: {name}",
                    f"{self._label}: input {name!r} is not one of the model's inputs "
                    + ", ".join(map(repr, self._input_order)),
                )
        args = []
        for name in self._input_order:
            if name in input_feed:
                value = input_feed[name]
                if isinstance(value, OrtValue) and value.device_name() != "cpu":
                    args.append(value._value)  # a device buffer: its provider checks it
                else:
                    args.append(specs[name].convert(value))
            elif name in self._graph.initializers:
                args.append(self._overrides.get(name, self._graph.initializers[name]))
            else:
                args.append(None)  # an optional-typed input: onnxruntime requires none
        return args

    def _missing_inputs(self, input_feed: dict[str, Any]) -> InvalidArgument:
        """onnxruntime's missing-input error, verbatim: applications parse its two lists."""
        missing = [n for n in self._required_names if n not in input_feed]
        return InvalidArgument(
            f"Required inputs ({missing}) are missing from input feed ({list(input_feed)})."
        )

    def _peak(self, plan: Plan, sizes: dict[str, int]) -> dict[str, int]:
        """Peak live bytes of `plan`'s intermediates per device, given their sizes."""
        devices = {p.name: str(p.device) for p in self._providers}
        return peak_live_bytes(
            plan.steps,
            sizes,
            lambda st: devices.get(st.provider, "cpu"),
            set(plan.output_names),
            plan.release,
        )

    def _plan_keeping_on_device(self, names: frozenset[str]) -> Plan:
        """The plan variant whose outputs `names` stay on their device (IO binding)."""
        with self._lock:
            plan = self._device_plans.get(names)
            if plan is None:
                plan = pipeline.plan(self._prepared, self._sess_options, names)
                self._device_plans[names] = plan
            return plan

    def _select_plan(
        self,
        output_names: Sequence[str] | None,
        run_options: RunOptions | None,
        device_outputs: frozenset[str] = frozenset(),
    ) -> tuple[Plan, list[int] | None]:
        base = self._plan_keeping_on_device(device_outputs) if device_outputs else self._plan
        if not output_names:
            return base, None
        names = list(output_names)
        for n in names:
            if n not in self._output_names:
                raise ort_invalid_argument(
                    f"Invalid output name:{n}",
                    f"{self._label}: output {n!r} is not one of the model's outputs "
                    + ", ".join(map(repr, self._output_names)),
                )
        picks = [self._output_names.index(n) for n in names]
        if run_options is not None and run_options.only_execute_path_to_fetches:
            return base.pruned(tuple(base.output_names[i] for i in picks)), None
        return base, picks

    def _execute(
        self,
        output_names: Sequence[str] | None,
        input_feed: dict[str, Any],
        run_options: RunOptions | None,
        device_outputs: frozenset[str] = frozenset(),
    ) -> list[Any]:
        adapters = run_options._adapters if run_options is not None else None
        args = self._prepare_feeds(input_feed, adapters)
        plan, pick = self._select_plan(output_names, run_options, device_outputs)
        ro = run_options if run_options is not None else NO_TERMINATE
        if ro.terminate:
            raise RunTerminated("run terminated by RunOptions.terminate")
        providers = self._providers
        started = 0
        try:
            for p in providers:  # a provider may lock its device until on_run_end
                p.on_run_start()
                started += 1
            fp = ignore_fp_errors()  # np.errstate(all="ignore") for the run, set cheaply
            try:
                if self._profiler is not None:
                    t0 = time.perf_counter_ns()
                    outs = plan.run_profiled(args, self._profiler.record_step, ro)
                    self._profiler.event(
                        "Session", "model_run", t0, time.perf_counter_ns() - t0, {}
                    )
                    peak = self._peak(plan, plan.last_sizes)
                    self._profiler.event("Session", "peak_memory", t0, 0, {"bytes": peak})
                else:
                    outs = plan.run(*args, ro)
            finally:
                restore_fp_errors(fp)
        finally:
            for k in range(started - 1, -1, -1):
                providers[k].on_run_end()
        if pick is not None:
            outs = tuple(outs[i] for i in pick)
        return _owned_outputs(outs, args)

    def run(
        self,
        output_names: Sequence[str] | None,
        input_feed: dict[str, Any],
        run_options: RunOptions | None = None,
    ) -> list[Any]:
        """Run the model: outputs in `output_names` order (all outputs when None or empty)."""
        try:
            return self._execute(output_names, input_feed, run_options)
        except EPFail:
            if not self._fall_back_to_cpu():
                raise
            return self._execute(output_names, input_feed, run_options)

    def _fall_back_to_cpu(self) -> bool:
        """onnxruntime's run-time fallback: after a provider failure, rebuild the session on
        the CPU provider alone and retry once (when enabled and another provider was in use)."""
        if not self._enable_fallback or [p.name for p in self._providers] == [CPU_PROVIDER]:
            return False
        warnings.warn(
            f"{self._label}: a provider failed; falling back to {CPU_PROVIDER} and retrying",
            UserWarning,
            stacklevel=3,
        )
        self._numpy_only = True  # a host provider may be what failed
        self.set_providers([CPU_PROVIDER])
        self._enable_fallback = False  # only once, as in onnxruntime
        return True

    def disable_fallback(self) -> None:
        """A provider failure in run() raises instead of retrying on CPU."""
        self._enable_fallback = False

    def enable_fallback(self) -> None:
        """A provider failure in run() rebuilds the session on CPU and retries once."""
        self._enable_fallback = True

    def run_with_ortvaluevector(
        self,
        run_options: RunOptions | None,
        feed_names: Sequence[str],
        feeds: OrtValueVector,
        fetch_names: Sequence[str],
        fetches: OrtValueVector,
        fetch_devices: Sequence[OrtDevice],
    ) -> None:
        """Run with OrtValueVectors: `fetches` receives the outputs of `fetch_names` (its
        previous contents are replaced). Output devices other than the host are not kept."""
        if len(feed_names) != len(feeds):
            raise InvalidArgument(
                f"run_with_ortvaluevector: {len(feed_names)} feed names for {len(feeds)} feeds"
            )
        feed = dict(zip(feed_names, feeds))
        outs = self._execute(list(fetch_names), feed, run_options)
        fetches._items[:] = [OrtValue._wrap(v) for v in outs]

    def get_input_memory_infos(self) -> list[OrtMemoryInfo]:
        """Where each input (as get_inputs lists them) is read from: host memory."""
        return [CPU_MEMORY_INFO for _ in self._required]

    def get_output_memory_infos(self) -> list[OrtMemoryInfo]:
        """Where each output is written: host memory (run() returns host arrays)."""
        return [CPU_MEMORY_INFO for _ in self._graph.outputs]

    def create_ortvalue_from_shape_and_type(
        self,
        shape: Sequence[int],
        element_type: Any,
        device_type: str,
        device_id: int = 0,
        vendor_id: int = -1,
    ) -> OrtValue:
        """A zero-filled tensor on a device this session uses; a device no provider of the
        session serves raises Fail, as onnxruntime finds no session allocator for it."""
        device = OrtDevice.make(device_type, device_id, vendor_id)
        kind = "cpu" if device.device_type() == 0 else device_type
        served = {"cpu"} | {str(getattr(p, "device_type", "cpu")) for p in self._providers}
        if kind not in served:
            raise Fail(
                f"No session allocator found for device {device_type}:{device_id} (this session "
                f"runs on {', '.join(sorted(served))})"
            )
        return OrtValue.ortvalue_from_shape_and_type(shape, element_type, kind, device_id)

    def get_tuning_results(self) -> list[dict[str, Any]]:
        """Tuned kernel choices per provider (onnxruntime's TunableOp); none here."""
        return []

    def set_tuning_results(
        self, results: list[dict[str, Any]], *, error_on_invalid: bool = False
    ) -> None:
        """No provider of turnout tunes kernels: results are ignored, or refused with
        `error_on_invalid` (as onnxruntime's CPU provider refuses them)."""
        if error_on_invalid and results:
            ep = results[0].get("ep", "?") if isinstance(results[0], dict) else "?"
            raise Fail(f"Invalid TuningResults (index=0). {ep} does not support TunableOp.")

    def set_ep_dynamic_options(self, options: dict[str, str]) -> None:
        """Change providers' `dynamic` options between runs (`turnout providers --options
        NAME` marks them). onnxruntime ignores keys no provider takes; turnout applies the
        rest and warns naming those keys, so a typo is not silent."""
        if not options:
            raise InvalidArgument("No options were provided")
        with self._lock:
            unused = apply_dynamic_options(self._providers, options)
        if unused:
            warnings.warn(
                f"{self._label}: no provider of this session takes dynamic option(s) "
                f"{', '.join(sorted(unused))}; ignored",
                UserWarning,
                stacklevel=2,
            )

    def release_captured_graph(self, graph_annotation_id: int = 0) -> None:
        """Nothing to release: no turnout provider captures graphs (a no-op, as in onnxruntime
        for providers without graph capture)."""

    def run_with_ort_values(
        self,
        output_names: Sequence[str] | None,
        input_dict_ort_values: dict[str, OrtValue],
        run_options: RunOptions | None = None,
    ) -> list[OrtValue]:
        # OrtValues pass through: _prepare_feeds unwraps host ones and keeps device buffers
        feeds = dict(input_dict_ort_values)
        return [OrtValue._wrap(v) for v in self._execute(output_names, feeds, run_options)]

    def run_async(
        self,
        output_names: Sequence[str] | None,
        input_feed: dict[str, Any],
        callback: Callable[[list[Any], Any, str], None],
        user_data: Any = None,
        run_options: RunOptions | None = None,
    ) -> None:
        """Run on a worker thread; `callback(outputs, user_data, error_message)` when done."""

        def work() -> None:
            try:
                outs = self._execute(output_names, input_feed, run_options)
            except Exception as e:
                callback([], user_data, str(e))
                return
            callback(outs, user_data, "")

        _async_pool().submit(work)

    def io_binding(self) -> Any:
        from turnout.api.io_binding import IOBinding

        return IOBinding(self)

    def run_with_iobinding(self, iobinding: Any, run_options: RunOptions | None = None) -> None:
        iobinding._run(run_options)

    def end_profiling(self) -> str:
        """Write the Chrome-trace JSON of this session's runs; returns its path ("" if off)."""
        if self._profiler is None:
            return ""
        path = self._profiler.end()
        self._profiler = None  # like onnxruntime: profiling stops once it is written
        return path

    def get_profiling_start_time_ns(self) -> int:
        return self._profiler.start_wall_ns if self._profiler is not None else 0


_POOL: concurrent.futures.ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _async_pool() -> concurrent.futures.ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = concurrent.futures.ThreadPoolExecutor(thread_name_prefix="turnout-async")
        return _POOL


def _owned_outputs(outs: Sequence[Any], feeds: Sequence[Any]) -> list[Any]:
    """Outputs the caller may write to without changing anything else: an output that is a
    view of a feed (Identity, Reshape, Transpose, Slice, ... return views) or of an earlier
    output is copied, as onnxruntime returns fresh buffers. (Inlined loops: this runs once
    per run, and function calls per array were ~3 us of a sub-millisecond model's run.)"""
    ndarray = np.ndarray
    taken = set()
    for a in feeds:
        if isinstance(a, ndarray):
            while isinstance(a.base, ndarray):
                a = a.base
            taken.add(id(a))
    result = []
    for v in outs:
        if isinstance(v, ndarray):
            if not v.flags.writeable:  # a read-only initializer: an owned copy
                v = v.copy()
            owner = v
            while isinstance(owner.base, ndarray):
                owner = owner.base
            if id(owner) in taken:
                v = v.copy()
            else:
                taken.add(id(owner))
        else:
            v = _finalize(v)
        result.append(v)
    return result


def _finalize(v: Any) -> Any:
    """Outputs are owned, writable arrays (a read-only initializer is copied)."""
    if isinstance(v, np.ndarray):
        return v if v.flags.writeable else v.copy()
    if isinstance(v, np.generic):
        return np.asarray(v)
    if isinstance(v, list):
        return [_finalize(x) for x in v]
    return v
