"""turnout's logger, and onnxruntime's severity numbers mapped onto Python logging levels."""

from __future__ import annotations

import logging

from turnout.graph.errors import InvalidArgument

__all__ = ["SEVERITY_LEVELS", "logger", "set_severity", "set_verbosity"]

logger = logging.getLogger("turnout")

# ORT: 0 verbose, 1 info, 2 warning, 3 error, 4 fatal.
SEVERITY_LEVELS = {
    0: logging.DEBUG,
    1: logging.INFO,
    2: logging.WARNING,
    3: logging.ERROR,
    4: logging.CRITICAL,
}

verbosity = 0


def set_severity(level: int) -> None:
    """Set the `turnout` logger's level from an ORT severity number (0-4)."""
    if level not in SEVERITY_LEVELS:
        raise InvalidArgument(f"logger severity must be 0-4 (verbose..fatal), got {level!r}")
    logger.setLevel(SEVERITY_LEVELS[level])


def set_verbosity(level: int) -> None:
    """Record ORT's VLOG verbosity; like ORT it only matters at severity 0 (verbose)."""
    global verbosity
    verbosity = int(level)
