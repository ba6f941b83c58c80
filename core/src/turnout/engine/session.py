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
from collections.abc import Sequence
from typing import Any, Protocol

import onnx

from turnout.engine import pipeline
from turnout.engine.artifact import CompiledArtifact
from turnout.engine.executor.memory import peak_live_bytes, static_sizes
from turnout.engine.executor.plan import (
    NO_TERMINATE,
    Plan,
    RunTerminated,
    ignore_fp_errors,
    restore_fp_errors,
)
from turnout.engine.options import EngineOptions
from turnout.engine.outputs import owned_outputs
from turnout.engine.partition import PartitionReport
from turnout.engine.profiling import Profiler
from turnout.engine.provider_selection import (
    CPU_PROVIDER,
    ProviderSelection,
    ProviderSpec,
    select_providers,
)
from turnout.graph.errors import FallbackError, InvalidArgument, ort_invalid_argument
from turnout.graph.ir import Graph
from turnout.graph.logs import logger
from turnout.sdk.provider import ExecutionProvider

__all__ = ["EngineSession", "RunControl"]


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
    ) -> None:
        self.loaded = model
        self.options = options
        self.label = label
        self.artifact = artifact
        self.lock = threading.Lock()
        self.numpy_only = False  # set by the run-time fallback: the numpy kernels alone
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
        """Select the providers, optimize for them, partition, compile and plan."""
        chosen = select_providers(
            providers, provider_options, self.options, self.label, self.numpy_only
        )
        instances = chosen.instances
        if self.artifact is not None:  # its providers take their compiled blobs first
            self.artifact.install(instances, self.label)
        optimized = pipeline.optimize(
            self.loaded,
            instances,
            self.options,
            self.label,
            already_optimized=self.artifact is not None,
        )
        self.model: onnx.ModelProto = optimized.model
        self.graph: Graph = optimized.graph
        self.output_names = [o.name for o in self.graph.outputs]
        self.optimization_report: Any = optimized.report
        self.overrides = self._overrides()
        self.providers: list[ExecutionProvider] = instances
        self.selection: ProviderSelection = chosen
        self.reports: dict[str, PartitionReport] = {}
        part = pipeline.partition(self.graph, instances)
        self.prepared = pipeline.compile(part, instances, self.reports, self.overrides)
        self.reports[""].mark_hosts(chosen.hosts)
        self.plan: Plan = pipeline.plan(self.prepared, self.options)
        report = self.reports[""]
        sizes, report.unsized = static_sizes(self.plan.steps, self.graph.value_infos)
        report.peak_bytes = self.peak(self.plan, sizes)
        self.device_plans: dict[frozenset[str], Plan] = {}
        if providers is not None and chosen.requested != [CPU_PROVIDER]:
            self._apply_fallback_policy()
        logger.info("%s: placed nodes %s", self.label, self.reports[""].counts())

    def _overrides(self) -> dict[str, Any]:
        """The initializers the options replace; naming one the graph lacks is an error."""
        inits = self.graph.initializers
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
        providers = self.providers
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
            for k in range(started - 1, -1, -1):
                providers[k].on_run_end()
        if pick is not None:
            outs = tuple(outs[i] for i in pick)
        return owned_outputs(outs, args)
