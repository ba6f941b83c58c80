"""The provider's logger (a child of turnout's)."""

from __future__ import annotations

import logging

__all__ = ["log"]

log = logging.getLogger("turnout.opencl")
