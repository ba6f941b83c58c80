"""Which providers a session gets: the requested list, resolved, with the host behind the CPU.

Applications written for onnxruntime hardcode `providers=["CPUExecutionProvider"]` (or pass
nothing). In turnout that name means *the host*: every installed, available provider whose
factory declares `serves_cpu_requests` (turnout-numba) is placed right before the numpy CPU
provider, so those applications get compiled host kernels without asking. The partition report
says which provider ran each node; `get_providers()` keeps the list the application asked for.

One switch keeps the numpy kernels only: the session config entry
`session.turnout.cpu_numpy_only` = "1", or the environment variable `TURNOUT_CPU_NUMPY_ONLY=1`
(the config entry wins when both are set).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from turnout.engine.options import EngineOptions
from turnout.engine.provider_creation import create_provider
from turnout.graph.errors import FallbackError, InvalidArgument
from turnout.graph.logs import logger
from turnout.sdk.plugins import registry
from turnout.sdk.provider import Availability, ExecutionProvider, ProviderFactory
from turnout.sdk.provider_options import CPU_NUMPY_ONLY_ENV, CPU_NUMPY_ONLY_KEY

__all__ = [
    "CPU_NUMPY_ONLY_ENV",
    "CPU_NUMPY_ONLY_KEY",
    "CPU_PROVIDER",
    "ORT_PROVIDER_NAMES",
    "ProviderSelection",
    "ProviderSpec",
    "apply_dynamic_options",
    "cpu_numpy_only",
    "host_candidates",
    "select_providers",
]

ProviderSpec = str | tuple[str, dict[str, Any]]
CPU_PROVIDER = "CPUExecutionProvider"

# onnxruntime's provider names: requesting one that turnout has no plugin for is "unavailable"
# (a warning, as in onnxruntime); so is a name nobody knows, with the installed ones listed.
ORT_PROVIDER_NAMES = frozenset(
    {
        "CUDAExecutionProvider",
        "TensorrtExecutionProvider",
        "ROCMExecutionProvider",
        "MIGraphXExecutionProvider",
        "OpenVINOExecutionProvider",
        "DnnlExecutionProvider",
        "DmlExecutionProvider",
        "CoreMLExecutionProvider",
        "QNNExecutionProvider",
        "NnapiExecutionProvider",
        "XnnpackExecutionProvider",
        "WebGpuExecutionProvider",
        "AzureExecutionProvider",
        "ACLExecutionProvider",
        "ArmNNExecutionProvider",
        "CANNExecutionProvider",
        "VitisAIExecutionProvider",
        "NvTensorRTRTXExecutionProvider",
    }
)


@dataclass(frozen=True)
class ProviderSelection:
    """The providers of one session, in priority order (the numpy CPU provider last).

    `hosts` are the providers turnout added to serve the CPU request; `requested` is what
    `get_providers()` reports: the providers the caller named that are available, and the CPU.
    """

    instances: list[ExecutionProvider]
    requested: list[str]
    hosts: list[str]


def cpu_numpy_only(opts: EngineOptions) -> bool:
    """Whether CPU requests keep the numpy kernels only (config entry, else environment)."""
    return opts.switch(CPU_NUMPY_ONLY_KEY, CPU_NUMPY_ONLY_ENV)


def host_candidates(providers: Sequence[ProviderSpec] | None, opts: EngineOptions) -> list[str]:
    """The installed providers that would serve this session's CPU request, not probed
    (probing a host imports its compiler); none when the numpy kernels are asked for."""
    if cpu_numpy_only(opts):
        return []
    named = {getattr(registry.find(name), "name", name) for name, _ in _specs(providers, None)}
    return [f.name for f in registry.all() if f.serves_cpu_requests and f.name not in named]


def select_providers(
    providers: Sequence[ProviderSpec] | None,
    provider_options: Sequence[Mapping[str, Any]] | None,
    opts: EngineOptions,
    label: str,
    numpy_only: bool = False,
) -> ProviderSelection:
    """Resolve and create the session's providers; unavailable ones warn or raise by policy.

    `numpy_only` forces the numpy CPU provider alone behind the CPU request (run-time fallback
    after a host provider failed), whatever the switch says.
    """
    specs = _specs(providers, provider_options)
    instances: list[ExecutionProvider] = []
    requested: list[str] = []
    seen: set[str] = set()
    for name, popts in specs:
        factory = _available_factory(name, opts, label)
        if factory is None or factory.name in seen:
            continue
        instances.append(create_provider(factory, {**_session_threads(factory, opts), **popts}))
        requested.append(factory.name)
        seen.add(factory.name)
    cpu_at = requested.index(CPU_PROVIDER) if CPU_PROVIDER in seen else len(instances)
    if CPU_PROVIDER not in seen:
        cpu = registry.resolve(CPU_PROVIDER)
        instances.append(create_provider(cpu, _session_threads(cpu, opts)))
        requested.append(CPU_PROVIDER)
    hosts: list[str] = []
    if not numpy_only and not cpu_numpy_only(opts):
        for factory in registry.host_providers():
            if factory.name in seen:
                continue
            provider = create_provider(factory, _session_threads(factory, opts))
            instances.insert(cpu_at + len(hosts), provider)
            hosts.append(factory.name)
    return ProviderSelection(instances, requested, hosts)


def _specs(
    providers: Sequence[ProviderSpec] | None,
    provider_options: Sequence[Mapping[str, Any]] | None,
) -> list[tuple[str, dict[str, Any]]]:
    if providers is None:
        # No accelerator behind the caller's back (as onnxruntime >= 1.9 in GPU builds):
        # installed providers run only when asked for; the host serves the CPU request.
        return [(CPU_PROVIDER, {})]
    if provider_options is not None and len(provider_options) != len(providers):
        raise InvalidArgument("provider_options must have one dict per provider")
    specs = []
    for i, p in enumerate(providers):
        name, popts = (p, {}) if isinstance(p, str) else (p[0], dict(p[1]))
        if provider_options is not None:
            popts.update(provider_options[i])
        specs.append((name, popts))
    return specs


def _available_factory(name: str, opts: EngineOptions, label: str) -> ProviderFactory | None:
    """The factory for `name` when it can run here; else warn (or raise under policy error)."""
    factory = registry.find(name)
    if factory is None and name in ORT_PROVIDER_NAMES:
        avail = Availability(False, reason="no turnout provider for it is installed")
    elif factory is None:  # onnxruntime warns and falls back too; policy "error" raises
        installed = ", ".join(f.name for f in registry.all())
        avail = Availability(False, reason=f"no such provider (installed: {installed})")
    else:
        avail = registry.probe(factory)
    if factory is not None and avail.ok:
        return factory
    message = f"{name} is not available here: {avail.reason}"
    if opts.fallback == "error":
        raise FallbackError(f"{message} (fallback policy 'error')")
    # onnxruntime warns and carries on with the remaining providers
    warnings.warn(f"{message}; continuing without it", UserWarning, stacklevel=5)
    logger.warning("%s: %s", label, message)
    return None


def _session_threads(factory: ProviderFactory, opts: EngineOptions) -> dict[str, Any]:
    """`SessionOptions.intra_op_num_threads` for a provider that takes a thread count, as
    onnxruntime's CPU provider does (0: the provider's default, all cores); an explicit
    provider option wins."""
    threads = int(opts.intra_op_num_threads or 0)
    if threads > 0 and "intra_op_num_threads" in factory.option_names:
        return {"intra_op_num_threads": threads}
    return {}


def apply_dynamic_options(
    providers: Sequence[ExecutionProvider], options: Mapping[str, Any]
) -> set[str]:
    """Give each provider the options it declares `dynamic`, parsed to their types; return the
    keys no provider of the session takes. A value that does not parse raises before any
    provider changes."""
    changes: list[tuple[ExecutionProvider, str, Any]] = []
    used: set[str] = set()
    for provider in providers:
        factory = registry.find(provider.name)
        for key, raw in options.items():
            declared = factory.option(str(key)) if factory is not None else None
            if declared is not None and declared.dynamic:
                changes.append((provider, declared.name, declared.parse(provider.name, raw)))
                used.add(str(key))
    for provider, name, value in changes:
        provider.set_dynamic_option(name, value)
    return {str(k) for k in options} - used
