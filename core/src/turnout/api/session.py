"""InferenceSession: onnxruntime's Python API over turnout's pipeline.

load -> infer shapes -> partition (providers by priority, CPU last) -> plan -> run.
"""

from __future__ import annotations

import os
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from turnout._version import __version__
from turnout.api.ep_context import check_compiled, with_reader
from turnout.api.feeds import InputSpec
from turnout.api.model_config import load_config_from_model, options_from_model
from turnout.api.native_session import NativeSession
from turnout.api.options import RunOptions, SessionOptions
from turnout.api.sparse_outputs import as_sparse_output, sparse_constant_outputs
from turnout.api.values import CPU_MEMORY_INFO, OrtDevice, OrtMemoryInfo, OrtValue, OrtValueVector
from turnout.engine import pipeline
from turnout.engine.artifact import read_artifact
from turnout.engine.partition import PartitionReport
from turnout.engine.provider_selection import (
    CPU_PROVIDER,
    ORT_PROVIDER_NAMES,
    ProviderSpec,
    apply_dynamic_options,
)
from turnout.engine.session import EngineSession
from turnout.graph.dtypes import value_type_string
from turnout.graph.errors import (
    EPFail,
    Fail,
    InvalidArgument,
    ModelLoadCanceled,
    ort_invalid_argument,
)
from turnout.graph.ir import ValueInfo
from turnout.graph.model import ModelSource, model_label
from turnout.sdk.plugins import registry

if TYPE_CHECKING:  # imported where used: a first session needs none of them
    import concurrent.futures

    from turnout.api.ep_assignment import OrtEpAssignedSubgraph
    from turnout.api.ep_devices import OrtEpDevice

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
    """onnxruntime's form (`ORT Build Info: key=value, ...`, which its tests look for) with
    turnout's facts."""
    return (
        f"turnout Build Info: version={__version__}, onnx={onnx.__version__}, "
        f"numpy={np.__version__}, build type=python"
    )


def get_all_providers() -> list[str]:
    """Every installed provider, highest default priority first and `CPUExecutionProvider`
    last, as onnxruntime orders its list."""
    ranked = sorted(registry.all(), key=lambda f: -f.default_priority)
    names = [f.name for f in ranked if f.name != CPU_PROVIDER]
    return [*names, CPU_PROVIDER]


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
        self._label = model_label(path_or_bytes)
        if not self._sess_options.use_per_session_threads and _global_pools() is None:
            raise Fail(  # onnxruntime's words (a RuntimeError there too)
                f"{self._label}: use_per_session_threads is False, but no global thread pools "
                "were created. When the session is not configured to use per session "
                "threadpools, the env must be created with the CreateEnvWithGlobalThreadPools "
                "API (in Python: set_global_thread_pool_sizes)."
            )
        self._check_canceled()
        self._model_path = (
            os.fspath(path_or_bytes) if isinstance(path_or_bytes, (str, os.PathLike)) else None
        )
        options = self._sess_options.engine_options()
        decoded: dict[str, Any] = {}  # big initializers as arrays: mapped, then checked
        model = pipeline.load(path_or_bytes, options, decoded)
        if load_config_from_model():  # ORT_LOAD_CONFIG_FROM_MODEL=1: the model's options rule
            self._sess_options = options_from_model(model, self._label)
            options = self._sess_options.engine_options()
        self._check_canceled()
        pipeline.validate(model, self._label, decoded)
        self._sparse_outputs = sparse_constant_outputs(model)
        self._check_canceled()
        base_dir = Path(self._model_path).resolve().parent if self._model_path else None
        artifact = with_reader(read_artifact(model, base_dir), self._sess_options)
        label = self._label

        def reload() -> onnx.ModelProto:  # to place again after the engine let go of it
            again = pipeline.load(path_or_bytes, options)
            pipeline.validate(again, label)
            return again

        model = pipeline.drop_decoded_bytes(model, decoded)  # the weights held once, as arrays
        self._engine = EngineSession(model, options, self._label, artifact, reload, decoded)
        self._engine.enable_fallback = int(kwargs.get("enable_fallback", 1)) == 1
        if providers is None and self._sess_options.has_providers():
            providers = list(self._sess_options._providers)
        elif providers is None and self._sess_options.has_selection_policy():
            from turnout.api.ep_devices import model_metadata, policy_provider_specs

            providers = policy_provider_specs(
                self._sess_options._ep_policy,
                self._sess_options._ep_delegate,
                model_metadata(model),
            )
        self._set_providers(providers, provider_options)
        self._check_canceled()
        if options.optimized_model_filepath:
            self._engine.adopt_compiled_tier()  # the model the session runs once compiled
            pipeline.save_optimized(self._engine.full_model(), options)
        profiler = self._engine.profiler
        if profiler is not None:
            profiler.event("Session", "session_initialization", t0, time.perf_counter_ns() - t0, {})

    # ------------------------------------------------------------------ setup
    def _check_canceled(self) -> None:
        if self._sess_options._cancel_load:
            raise ModelLoadCanceled(
                "[ONNXRuntimeError] : 12 : MODEL_LOAD_CANCELED : session creation of "
                f"{self._label} canceled by SessionOptions.set_load_cancellation_flag(True)"
            )

    def _init_io(self) -> None:
        g = self._engine.graph
        inits = set(g.initializers)
        self._required = [i for i in g.inputs if i.name not in inits]
        self._overridable = [i for i in g.inputs if i.name in inits]
        self._required_names = [i.name for i in self._required if i.kind != "optional"]
        self._specs = {i.name: InputSpec(i) for i in g.inputs}
        self._input_order = [i.name for i in g.inputs]
        self._output_names = [o.name for o in g.outputs]

    def _set_providers(
        self,
        providers: Sequence[ProviderSpec] | None,
        provider_options: Sequence[dict[str, Any]] | None,
    ) -> None:
        compiled = self._engine.artifact is not None
        config = self._sess_options._config
        check_compiled(config, compiled, providers, provider_options, self._label)
        self._engine.place(providers, provider_options)
        self._init_io()

    def optimization_report(self) -> Any:
        """What the graph optimizer did for this session (`OptimizationReport`)."""
        return self._engine.optimization_report

    # ------------------------------------------------------------------ metadata
    def get_inputs(self) -> list[NodeArg]:
        return [NodeArg.from_info(i) for i in self._required]

    def get_outputs(self) -> list[NodeArg]:
        return [NodeArg.from_info(o) for o in self._engine.graph.outputs]

    def get_overridable_initializers(self) -> list[NodeArg]:
        return [NodeArg.from_info(i) for i in self._overridable]

    def get_modelmeta(self) -> ModelMetadata:
        m = self._engine.model
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
        return list(self._engine.selection.requested)

    def _provider_specs(self) -> list[tuple[str, dict[str, Any]]]:
        """The providers the caller asked for, with their options (hosts not included)."""
        hosts = self._engine.selection.hosts
        return [
            (p.name, dict(p.requested_options))
            for p in self._engine.providers
            if p.name not in hosts
        ]

    def get_provider_options(self) -> dict[str, dict[str, str]]:
        return {name: {k: str(v) for k, v in opts.items()} for name, opts in self._provider_specs()}

    def get_session_options(self) -> SessionOptions:
        return self._sess_options

    def set_providers(
        self,
        providers: Sequence[ProviderSpec] | None = None,
        provider_options: Sequence[dict[str, Any]] | None = None,
    ) -> None:
        """Re-partition the model onto a new provider list (like ORT, this rebuilds the session).
        A name that is neither a turnout provider (or alias) nor one of onnxruntime's raises
        here, as in onnxruntime (a session being created warns and falls back instead)."""
        for spec in providers or []:
            name = spec if isinstance(spec, str) else spec[0]
            if registry.find(name) is None and name not in ORT_PROVIDER_NAMES:
                raise Fail(
                    f"Unknown Provider Type: {name} (turnout providers: "
                    f"{', '.join(get_all_providers())})"
                )
        with self._engine.lock:
            self._set_providers(providers, provider_options)

    def partition_report(self) -> PartitionReport:
        """Where every node runs and why, the copies inserted, nested graphs under their node."""
        return self._engine.reports[""]

    def get_provider_graph_assignment_info(self) -> list[OrtEpAssignedSubgraph]:
        """onnxruntime's form of the partition: one entry per fused group or single node.
        Needs the session config entry `session.record_ep_graph_assignment_info` = "1"."""
        from turnout.api.ep_assignment import assigned_subgraphs

        return assigned_subgraphs(
            self._engine.reports[""], self._engine.graph, self._sess_options._config
        )

    def get_input_epdevices(self) -> list[OrtEpDevice | None]:
        """For each input (as `get_inputs()` lists them), the EP device that reads it first."""
        from turnout.api.ep_assignment import input_ep_devices

        return input_ep_devices(
            self._engine.reports[""], self._engine.graph, [i.name for i in self._required]
        )

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
        initializers, overrides = self._engine.graph.initializers, self._engine.overrides
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
            elif name in initializers:
                args.append(overrides.get(name, initializers[name]))
            else:
                args.append(None)  # an optional-typed input: onnxruntime requires none
        return args

    def _missing_inputs(self, input_feed: dict[str, Any]) -> InvalidArgument:
        """onnxruntime's missing-input error, verbatim: applications parse its two lists."""
        missing = [n for n in self._required_names if n not in input_feed]
        return InvalidArgument(
            f"Required inputs ({missing}) are missing from input feed ({list(input_feed)})."
        )

    def _execute(
        self,
        output_names: Sequence[str] | None,
        input_feed: dict[str, Any],
        run_options: RunOptions | None,
        device_outputs: frozenset[str] = frozenset(),
    ) -> list[Any]:
        self._engine.at_run_boundary()  # the compiled tier takes over between runs
        adapters = run_options._adapters if run_options is not None else None
        args = self._prepare_feeds(input_feed, adapters)
        self._engine.place_for_shapes(args)  # measured placement waiting for shapes
        prune = run_options is not None and run_options.only_execute_path_to_fetches
        plan, pick = self._engine.select_plan(output_names, prune, device_outputs)
        outs = self._engine.execute(plan, args, pick, run_options)
        if self._sparse_outputs:
            names = list(output_names) if output_names else self._output_names
            for i, name in enumerate(names):
                if name in self._sparse_outputs:
                    outs[i] = as_sparse_output(outs[i], name, self._label)
        return outs

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
            if not self._engine.fall_back_to_cpu():
                raise
            self._init_io()
            return self._execute(output_names, input_feed, run_options)

    @property
    def _sess(self) -> NativeSession:
        """onnxruntime's native session object, which scripts call directly
        (`sess._sess.run_with_ort_values(feeds, names, run_options)`)."""
        return NativeSession(self)

    @property
    def _enable_fallback(self) -> bool:
        """onnxruntime's InferenceSession attribute of this name, which applications read."""
        return self._engine.enable_fallback

    def disable_fallback(self) -> None:
        """A provider failure in run() raises instead of retrying on CPU."""
        self._engine.enable_fallback = False

    def enable_fallback(self) -> None:
        """A provider failure in run() rebuilds the session on CPU and retries once."""
        self._engine.enable_fallback = True

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
        return [CPU_MEMORY_INFO for _ in self._engine.graph.outputs]

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
        served = {"cpu"} | {str(getattr(p, "device_type", "cpu")) for p in self._engine.providers}
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
        with self._engine.lock:
            unused = apply_dynamic_options(self._engine.providers, options)
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
        profiler = self._engine.profiler
        if profiler is None:
            return ""
        path = profiler.end()
        self._engine.profiler = None  # like onnxruntime: profiling stops once it is written
        return path

    def get_profiling_start_time_ns(self) -> int:
        profiler = self._engine.profiler
        return profiler.start_wall_ns if profiler is not None else 0


def _global_pools() -> tuple[int, int] | None:
    """`set_global_thread_pool_sizes`'s pools, None when unset (the environment module is
    imported for the sessions that ask: per-session threads are the default)."""
    from turnout.api.environment import global_thread_pool_sizes

    return global_thread_pool_sizes()


_POOL: concurrent.futures.ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _async_pool() -> concurrent.futures.ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            import concurrent.futures

            _POOL = concurrent.futures.ThreadPoolExecutor(thread_name_prefix="turnout-async")
        return _POOL
