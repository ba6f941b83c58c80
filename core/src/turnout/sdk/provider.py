"""The provider contract's former single module, kept as a re-export of `turnout.sdk.ep`.

The contract is split by concern in `turnout.sdk.ep` (public name `turnout.ep`): devices,
kernels, capability and compile, memory and transfer, provider, factory, and contract 1 in
`legacy`. Every name that was importable from here still is, as the same object.
"""

from __future__ import annotations

from turnout.sdk.ep import *  # noqa: F403 - the whole surface, by design
from turnout.sdk.ep import __all__ as __all__
