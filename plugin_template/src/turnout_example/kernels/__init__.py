"""ExampleExecutionProvider's kernels, registered on `KERNELS` by decorator.

One module per op family (`elementwise.py`; add `reduce.py`, `conv.py`, ... the same way) and the
fused-chain compiler (`fused.py`). Importing this package registers every kernel.

`CALLS` counts kernel calls per op type, so tests can prove that these kernels ran rather than
the CPU provider's. It is here to show that; a real provider keeps its hot path free of it.
"""

from __future__ import annotations

from collections import Counter

from turnout.sdk.ep import KernelTable

from .. import PROVIDER_NAME

__all__ = ["CALLS", "KERNELS"]

KERNELS = KernelTable(PROVIDER_NAME)
CALLS: Counter[str] = Counter()

from . import elementwise  # noqa: E402, F401 - importing registers the kernels
