"""ExampleAllocator: where the provider's buffers live.

This template keeps its values in host memory as numpy arrays, so it runs anywhere. Its device
is the one the factory declares (`ExampleFactory.device_type`): turnout passes it in, so the
allocator does not name a device of its own. A real accelerator allocates device memory in
`_empty` and returns its own array type; turnout calls `empty` for kernels' outputs
(`KernelContext.allocate`) and copy destinations, and `free` on each of them once the plan says
it is dead, so an allocator that keeps a pool declares `pools = True` and takes buffers back in
`_free`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from turnout.sdk.ep import Allocator

__all__ = ["ExampleAllocator"]


class ExampleAllocator(Allocator):
    def _empty(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Any:
        return np.empty(shape, dtype)
