"""The engine's session: one model placed on providers and planned, and the run loop.

`turnout.api.session.InferenceSession` is onnxruntime's API over this: it loads the model,
turns feeds into arrays and outputs into what onnxruntime returns. Everything between, the
provider selection, the pipeline's stages, the plans (with their variants for IO binding), the
fallback policies and the run itself, lives here and takes plain arguments.
"""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import onnx

from turnout.engine import pipeline
from turnout.engine.artifact import CompiledArtifact
from turnout.engine.executor.build import PreparedGraph
from turnout.engine.executor.memory import peak_live_bytes, static_sizes
from turnout.engine.executor.plan import (
    NO_TERMINATE,
    Plan,
    RunTerminated,
    ignore_fp_errors,
    restore_fp_errors,
)
from turnout.engine.first_run import FirstRunInputs
from turnout.engine.options import EngineOptions
from turnout.engine.outputs import owned_outputs
from turnout.engine.partition import PartitionReport
from turnout.engine.placement import budget_seconds, placement_policy, unknown_shapes
from turnout.engine.profiling import Profiler, placement_by_step
from turnout.engine.provider_selection import (
    CPU_PROVIDER,
    ProviderSelection,
    ProviderSpec,
    host_candidates,
    select_providers,
)
from turnout.engine.run_hooks import end_run
from turnout.engine.tiers import (
    TIER_HOLD_S,
    WAIT_ENV,
    WAIT_KEY,
    BackgroundBuild,
    TierState,
    log_failure,
)
from turnout.graph.errors import FallbackError, InvalidArgument, ort_invalid_argument
from turnout.graph.ir import Graph
from turnout.graph.logs import logger
from turnout.graph.shared_arrays import SharedArrays
from turnout.sdk.provider import ExecutionProvider

__all__ = ["EngineSession", "RunControl"]


@dataclass(frozen=True)
class _Placement:
    """What placing builds: the providers, the optimized model, the kernels and the plan."""

    selection: ProviderSelection
    optimized: pipeline.OptimizedModel
    overrides: dict[str, Any]
    reports: dict[str, PartitionReport]
    prepared: PreparedGraph
    plan: Plan


_ShapePlacement = tuple[dict[str, PartitionReport], PreparedGraph, Plan]
"""What placing again for input shapes builds: the reports, the kernels and the plan."""


def _providers_used(report: PartitionReport) -> set[str] | None:
    """The providers that run a node of `report`'s graph or of its nested graphs; None while
    a control-flow node (If, Loop, Scan) has no body built yet."""
    used = {a.provider for a in report.assignments}
    for a in report.assignments:
        if a.op_type in ("If", "Loop", "Scan") and not any(
            key.startswith(f"{a.node}/") for key in report.subgraphs
        ):
            return None
    for sub in report.subgraphs.values():
        inner = _providers_used(sub)
        if inner is None:
            return None
        used |= inner
    return used


class RunControl(Protocol):
    """What a run reads from the caller's run options: whether to stop (checked between
    steps). onnxruntime's `RunOptions` is one."""

    terminate: bool


class EngineSession:
    """A loaded, validated model and what the engine built for it.

    `place` (re)builds everything for a provider list; `execute` runs a plan. The attributes
    after `place`: `model` (the optimized proto), `graph` (its IR), `providers` (instances in
    priority order), `selection`, `reports` (partition reports, the main graph's under ""),
    `plan`, `overrides` (initializers the options replace) and `optimization_report`.
    """

    def __init__(
        self,
        model: onnx.ModelProto,
        options: EngineOptions,
        label: str,
        artifact: CompiledArtifact | None = None,
        reload: Callable[[], onnx.ModelProto] | None = None,
        decoded: dict[str, Any] | None = None,
    ) -> None:
        """`reload` loads the model again (from the caller's path or bytes): given, the session
        lets go of the loaded proto once placed and reloads it to place again. `decoded`: the
        model's initializers already decoded, by name (`pipeline.validate` fills it); it holds
        the values of those `pipeline.drop_decoded_bytes` took out of `model`."""
        self._loaded: onnx.ModelProto | None = model
        self._reload = reload
        self.options = options
        self.label = label
        self.artifact = artifact
        self.lock = threading.Lock()
        self.numpy_only = False  # set by the run-time fallback: the numpy kernels alone
        self.runs = 0  # runs started, for the reports' "since run N"
        # the model's initializers as arrays, both tiers
        self._decoded: dict[str, Any] = decoded if decoded is not None else {}
        self._tier_build: BackgroundBuild[_Placement] | None = None
        self._first_run = FirstRunInputs()  # the build's warm-up inputs (`_start_tier_build`)
        self.enable_fallback = True
        self.profiler: Profiler | None = None
        if options.profile_file_prefix is not None:
            self.profiler = Profiler(options.profile_file_prefix)

    # ------------------------------------------------------------------ placing
    def place(
        self,
        providers: Sequence[ProviderSpec] | None,
        provider_options: Sequence[dict[str, Any]] | None,
    ) -> None:
        """Select the providers, optimize for them, partition, compile and plan.

        When host providers would serve the CPU request and their kernels are not to be
        waited for (`turnout.engine.tiers`), the session is placed on the numpy kernels now and
        the host providers' placement is built in the background.
        """
        self._stop_tier_build()
        hosts = [] if self.numpy_only else host_candidates(providers, self.options)
        background = bool(hosts) and self.artifact is None and not self._waits_for_hosts()
        running: Graph | None = getattr(self, "graph", None)  # placed before: shared weights
        placed = self._build(
            self._source(),
            providers,
            provider_options,
            self.numpy_only or background,
            shared=None if running is None else SharedArrays(running.initializers.values()),
        )
        self._adopt(placed)
        if providers is not None and placed.selection.requested != [CPU_PROVIDER]:
            self._apply_fallback_policy()
        self.tier: TierState | None = None
        if background:
            self.tier = TierState("numpy", self.runs, hosts, building=True)
            self._start_tier_build(providers, provider_options)
        elif placed.selection.hosts:
            self.tier = TierState("compiled", self.runs, list(placed.selection.hosts))
        self.reports[""].tier = self.tier
        self._release_source()
        logger.info("%s: placed nodes %s", self.label, self.reports[""].counts())
        # measured placement without static shapes: placed again at the first run, with its
        # shapes, and at each run whose input shapes were not placed for yet
        self._by_shapes: dict[tuple[Any, ...], _ShapePlacement] = {}
        self._shapes_placed: tuple[Any, ...] | None = None
        self._replace_for_shapes = unknown_shapes(self.reports[""].placement)

    def _waits_for_hosts(self) -> bool:
        return self.options.switch(WAIT_KEY, WAIT_ENV)

    def _source(self) -> onnx.ModelProto:
        """The loaded model: held, or loaded again after `_release_source`."""
        model = self._loaded
        if model is None:
            assert self._reload is not None
            model = self._loaded = self._reload()
        return model

    def _release_source(self) -> None:
        """Let go of the loaded proto, and of the decoded originals the IR does not hold (the
        weights folded into new ones), when nothing will build from them: the weights live
        on in the IR's arrays, and placing again reloads the model. Kept while a tier builds
        from them."""
        if self._reload is not None and self._tier_build is None:
            self._loaded = None
            held = {id(a) for a in self.graph.initializers.values()}
            # a new dict: a build that was cancelled may still read the old one
            self._decoded = {k: v for k, v in self._decoded.items() if id(v) in held}

    def _build(
        self,
        model: onnx.ModelProto,
        providers: Sequence[ProviderSpec] | None,
        provider_options: Sequence[dict[str, Any]] | None,
        numpy_only: bool,
        checkpoint: Callable[[], None] | None = None,
        shared: SharedArrays | None = None,
    ) -> _Placement:
        """Everything `place` builds, without touching the session (a background build runs
        this while the session runs its current placement; `shared`: the running
        placement's arrays, which equal ones the optimizer makes become)."""
        chosen = select_providers(providers, provider_options, self.options, self.label, numpy_only)
        instances = chosen.instances
        if self.artifact is not None:  # its providers take their compiled blobs first
            self.artifact.install(instances, self.label)
        if checkpoint is not None:
            checkpoint()
        optimized = pipeline.optimize(
            model,
            instances,
            self.options,
            self.label,
            already_optimized=self.artifact is not None,
            decoded=self._decoded,
            shared=shared,
        )
        overrides = self._overrides(optimized.graph)
        reports: dict[str, PartitionReport] = {}
        if checkpoint is not None:
            checkpoint()
        policy = placement_policy(self.options, optimized.model)
        part = pipeline.partition(optimized.graph, instances, policy)
        prepared = pipeline.compile(part, instances, reports, overrides, checkpoint)
        reports[""].mark_hosts(chosen.hosts)
        plan = pipeline.plan(prepared, self.options)
        return _Placement(chosen, optimized, overrides, reports, prepared, plan)

    def _adopt(self, placed: _Placement) -> None:
        """Make `placed` the session's placement (at creation, or at a run boundary)."""
        self.model: onnx.ModelProto = placed.optimized.model
        self.graph: Graph = placed.optimized.graph
        self.output_names = [o.name for o in self.graph.outputs]
        self.optimization_report: Any = placed.optimized.report
        self.overrides = placed.overrides
        self.providers: list[ExecutionProvider] = placed.selection.instances
        self.selection: ProviderSelection = placed.selection
        self.reports: dict[str, PartitionReport] = placed.reports
        self.prepared = placed.prepared
        self.plan: Plan = placed.plan
        report = self.reports[""]
        sizes, report.unsized = static_sizes(self.plan.steps, self.graph.value_infos)
        report.peak_bytes = self.peak(self.plan, sizes)
        if self.profiler is not None:
            self.profiler.placement = placement_by_step(report)
        self.run_providers = self._running(report)
        self.device_plans: dict[frozenset[str], Plan] = {}

    def full_model(self) -> onnx.ModelProto:
        """The optimized model with its weights (`model` holds none: the IR's arrays do)."""
        return pipeline.full_model(self.model, self.graph)

    def place_for_shapes(self, args: Sequence[Any]) -> None:
        """At a run boundary: when measured placement waits for shapes and these inputs' shapes
        are new, place the main graph again at them (their times cached like the others'); a
        placement made for shapes seen before is taken back at once."""
        if not self._replace_for_shapes or self._tier_build is not None:
            return
        key = tuple(tuple(a.shape) if hasattr(a, "shape") else None for a in args)
        if key == self._shapes_placed:
            return
        with self.lock:
            placed = self._by_shapes.get(key)
            if placed is None:
                placed = self._place_at(key)
                self._by_shapes[key] = placed
            reports, prepared, plan = placed
            self.reports, self.prepared, self.plan = reports, prepared, plan
            self.run_providers = self._running(reports[""])
            self.device_plans.clear()
            self._shapes_placed = key
        logger.info("%s: placed again for input shapes %s", self.label, key)

    def _running(self, report: PartitionReport) -> list[ExecutionProvider]:
        """The providers whose run hooks a run calls: a provider given no node (nested graphs'
        included) is left out: an OpenCL queue's finish costs tens of microseconds a run, and
        the CPU provider behind turnout-numba 0.6 us of a tiny model's ~5. While a control-flow
        node's bodies are not built yet (built on first use), every provider keeps its hooks."""
        used = _providers_used(report)
        if used is None:
            return self.providers
        return [p for p in self.providers if p.name in used]

    def _place_at(self, key: tuple[Any, ...]) -> _ShapePlacement:
        from turnout.engine.placement.cache import model_digest
        from turnout.engine.placement.measured import MeasuredPlacement, at_shapes

        names = [*self.plan.input_names, *self.plan.outer_names]
        inputs = {n: shape for n, shape in zip(names, key) if shape is not None}
        timed = at_shapes(
            self.model, self.graph, inputs, self.options.limits.shape_data_max_elements
        )
        policy = MeasuredPlacement(
            budget_seconds(self.options.config), model_digest(self.model), timed
        )
        reports: dict[str, PartitionReport] = {}
        part = pipeline.partition(self.graph, self.providers, policy)
        prepared = pipeline.compile(part, self.providers, reports, self.overrides)
        reports[""].mark_hosts(self.selection.hosts)
        reports[""].tier = self.tier
        plan = pipeline.plan(prepared, self.options)
        report = reports[""]
        sizes, report.unsized = static_sizes(plan.steps, self.graph.value_infos)
        report.peak_bytes = self.peak(plan, sizes)
        return reports, prepared, plan

    # ------------------------------------------------------------------ tiers
    def _start_tier_build(
        self,
        providers: Sequence[ProviderSpec] | None,
        provider_options: Sequence[dict[str, Any]] | None,
    ) -> None:
        model = self._source()
        running = self.graph  # its weights: the build's equal arrays are these (SharedArrays)
        first_run = self._first_run = FirstRunInputs()

        def build(checkpoint: Callable[[], None]) -> _Placement:
            shared = SharedArrays(running.initializers.values())
            placed = self._build(model, providers, provider_options, False, checkpoint, shared)
            checkpoint()
            first_run.warm(placed.plan, placed.selection.instances)
            return placed

        self._tier_build = BackgroundBuild(build, self.label, hold=TIER_HOLD_S)
        self._tier_request = (providers, provider_options)

    def _stop_tier_build(self) -> None:
        """A new placement supersedes a compiled tier still building for the old one."""
        if self._tier_build is not None:
            self._tier_build.cancel()
        self._tier_build = None

    def wait_for_compiled_tier(self, timeout: float | None = None) -> bool:
        """Block until the compiled tier is built (True; the next run adopts it) or `timeout`
        seconds passed (False). True at once when there is nothing to wait for."""
        build = self._tier_build
        if build is None:
            return True
        if build.orphaned:
            self.at_run_boundary()  # a forked child builds its own
            build = self._tier_build
        return build is None or build.wait(timeout)

    def adopt_compiled_tier(self) -> None:
        """Wait for the compiled tier and adopt it now (`turnout compile` exports its kernels;
        the config entry that waits at creation does this)."""
        self.wait_for_compiled_tier()
        self.at_run_boundary()

    def at_run_boundary(self) -> None:
        """Adopt the compiled tier once it is built (a run in progress keeps its plan); in a
        forked child, start the build its parent's thread was doing."""
        build = self._tier_build
        if build is None:
            return
        if build.orphaned:
            with self.lock:
                if self._tier_build is build:
                    self._start_tier_build(*self._tier_request)
            return
        if not build.done():
            return
        with self.lock:
            if self._tier_build is not build:
                return  # another thread adopted it
            self._tier_build = None
            assert self.tier is not None
            try:
                placed = build.result()
            except Exception as e:
                error = log_failure(self.label, e)
                self.tier = TierState("numpy", self.tier.since_run, self.tier.hosts, error=error)
                self.reports[""].tier = self.tier
                self._release_source()
                return
            self._adopt(placed)
            self.tier = TierState("compiled", self.runs, list(placed.selection.hosts))
            self.reports[""].tier = self.tier
            self._release_source()
        logger.info("%s: compiled tier adopted at run %d", self.label, self.runs)

    def _overrides(self, graph: Graph) -> dict[str, Any]:
        """The initializers the options replace; naming one the graph lacks is an error."""
        inits = graph.initializers
        for name in self.options.overrides:
            if name not in inits:
                raise InvalidArgument(
                    f"{self.label}: add_initializer({name!r}): no such initializer"
                )
        return dict(self.options.overrides)

    def _apply_fallback_policy(self) -> None:
        """Nodes the requested providers declined landed on CPU: allow, warn once, or refuse."""
        policy = self.options.fallback
        if policy == "allow":
            return
        fell = self.reports[""].fallbacks(CPU_PROVIDER)
        if not fell:
            return
        if policy == "error":
            lines = [f"  {node} ({op}): {why}" for node, op, why in fell]
            raise FallbackError(
                f"{self.label}: {len(fell)} node(s) would fall back to {CPU_PROVIDER} "
                f"(fallback policy 'error'):\n" + "\n".join(lines)
            )
        kinds: dict[str, int] = {}
        for _, op, why in fell:
            key = f"{op} ({why})"
            kinds[key] = kinds.get(key, 0) + 1
        summary = "; ".join(f"{k} x{n}" for k, n in sorted(kinds.items(), key=lambda x: -x[1]))
        logger.warning(
            "%s: %d node(s) fell back to %s: %s", self.label, len(fell), CPU_PROVIDER, summary
        )

    def fall_back_to_cpu(self) -> bool:
        """onnxruntime's run-time fallback: after a provider failure, rebuild on the CPU
        provider alone and retry once (when enabled and another provider was in use)."""
        if not self.enable_fallback or [p.name for p in self.providers] == [CPU_PROVIDER]:
            return False
        warnings.warn(
            f"{self.label}: a provider failed; falling back to {CPU_PROVIDER} and retrying",
            UserWarning,
            stacklevel=3,
        )
        self.numpy_only = True  # a host provider may be what failed
        with self.lock:
            self.place([CPU_PROVIDER], None)
        self.enable_fallback = False  # only once, as in onnxruntime
        return True

    # ------------------------------------------------------------------ plans
    def peak(self, plan: Plan, sizes: dict[str, int]) -> dict[str, int]:
        """Peak live bytes of `plan`'s intermediates per device, given their sizes."""
        devices = {p.name: str(p.device) for p in self.providers}
        return peak_live_bytes(
            plan.steps,
            sizes,
            lambda st: devices.get(st.provider, "cpu"),
            set(plan.output_names),
            plan.release,
        )

    def plan_keeping_on_device(self, names: frozenset[str]) -> Plan:
        """The plan variant whose outputs `names` stay on their device (IO binding)."""
        with self.lock:
            plan = self.device_plans.get(names)
            if plan is None:
                plan = pipeline.plan(self.prepared, self.options, names)
                self.device_plans[names] = plan
            return plan

    def select_plan(
        self,
        output_names: Sequence[str] | None,
        prune: bool,
        device_outputs: frozenset[str] = frozenset(),
    ) -> tuple[Plan, list[int] | None]:
        """The plan for these outputs, and which of its outputs to return (None: all, in
        order). `prune` runs only what the outputs need (a pruned copy of the plan)."""
        base = self.plan_keeping_on_device(device_outputs) if device_outputs else self.plan
        if not output_names:
            return base, None
        all_names = self.output_names
        for n in output_names:
            if n not in all_names:
                raise ort_invalid_argument(
                    f"Invalid output name:{n}",
                    f"{self.label}: output {n!r} is not one of the model's outputs "
                    + ", ".join(map(repr, all_names)),
                )
        picks = [all_names.index(n) for n in output_names]
        if prune:
            return base.pruned(tuple(base.output_names[i] for i in picks)), None
        return base, picks

    # ------------------------------------------------------------------ running
    def execute(
        self,
        plan: Plan,
        args: Sequence[Any],
        pick: list[int] | None,
        control: RunControl | None = None,
    ) -> list[Any]:
        """Run `plan` on `args` (its inputs in order): providers' run hooks around it,
        floating-point errors ignored, profiled when profiling; the outputs (`pick`ed) are
        owned arrays the caller may write to."""
        ro = control if control is not None else NO_TERMINATE
        if ro.terminate:
            raise RunTerminated("run terminated by RunOptions.terminate")
        self.runs += 1
        providers = self.run_providers
        started = 0
        try:
            for p in providers:  # a provider may lock its device until on_run_end
                p.on_run_start()
                started += 1
            fp = ignore_fp_errors()  # np.errstate(all="ignore") for the run, set cheaply
            try:
                if self.profiler is not None:
                    t0 = time.perf_counter_ns()
                    outs = plan.run_profiled(args, self.profiler.record_step, ro)
                    self.profiler.event("Session", "model_run", t0, time.perf_counter_ns() - t0, {})
                    peak = self.peak(plan, plan.last_sizes)
                    self.profiler.event("Session", "peak_memory", t0, 0, {"bytes": peak})
                else:
                    outs = plan.run(*args, ro)
            finally:
                restore_fp_errors(fp)
        finally:
            end_run(providers, started)
            build = self._tier_build
            if build is not None:  # the first run is over: the compiler may start
                self._first_run.offer(plan.input_names, args)  # its inputs warm the tier
                build.release()
        if pick is not None:
            outs = tuple(outs[i] for i in pick)
        return owned_outputs(outs, args)
