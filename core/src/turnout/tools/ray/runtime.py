"""What turnout.tools.ray asks of the Ray runtime: the module itself (with a clear error when the
extra is missing), who this worker is, its GPUs, and a cluster to run on (joined or embedded)."""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from turnout.graph import errors

__all__ = ["cluster", "gpu_ids", "require_ray", "worker_name"]

# The embedded local Ray keeps its shared-memory object store small: a batch job streams, and
# other processes share the machine.
LOCAL_OBJECT_STORE_BYTES = 512 * 2**20


def require_ray() -> ModuleType:
    """`ray` itself, with `ray.data` loaded; a typed error naming the extra when absent."""
    try:
        import ray
        import ray.data  # registers Ray's tensor column types
    except ImportError as e:
        raise errors.NotImplemented(
            f"turnout.tools.ray needs Ray Data ({e}); install it with: pip install 'turnout[ray]'"
        ) from e
    return ray


def _ray_if_running() -> Any:
    """The `ray` module when this process is a connected Ray worker or driver, else None."""
    try:
        import ray
    except ImportError:
        return None
    return ray if ray.is_initialized() else None


def worker_name() -> str:
    """A short name for this worker, stable across actor restarts (the actor id's unique part),
    or host:pid outside a Ray actor."""
    ray = _ray_if_running()
    actor = ray.get_runtime_context().get_actor_id() if ray is not None else None
    return str(actor)[:8] if actor else f"{socket.gethostname()}:{os.getpid()}"


def gpu_ids() -> list[Any]:
    """The GPUs Ray gave this worker (`num_gpus`); empty outside Ray."""
    ray = _ray_if_running()
    return list(ray.get_gpu_ids()) if ray is not None else []


@contextlib.contextmanager
def cluster(address: str | None = None, num_cpus: int | None = None) -> Iterator[ModuleType]:
    """Ray, connected: to the cluster at `address`, or to an embedded local Ray on this machine
    (`num_cpus`, default all cores). Shuts down only what it started; a caller that already
    connected keeps its connection."""
    ray = require_ray()
    if ray.is_initialized():
        yield ray
        return
    if address is not None:
        ray.init(address=address)
    else:
        ray.init(
            num_cpus=num_cpus,
            include_dashboard=False,
            object_store_memory=LOCAL_OBJECT_STORE_BYTES,
        )
    try:
        yield ray
    finally:
        ray.shutdown()
