"""`onnxruntime.capi.onnxruntime_validation`: onnxruntime's install checks. turnout is pure
Python, so there is no platform or build to validate: the checks pass and say what they saw."""

from __future__ import annotations

from turnout.api.capi.build_and_package_info import __version__, package_name

__all__ = ["check_distro_info", "check_training_module", "get_package_name_and_version_info"]


def check_distro_info() -> None:
    """Nothing to check: turnout runs wherever Python and numpy run."""


def get_package_name_and_version_info() -> tuple[str, str, str]:
    """(package name, version, CUDA version): a CPU package has no CUDA version."""
    return package_name, __version__, ""


def check_training_module() -> tuple[bool, str, str, str]:
    """(has the training module, package name, version, CUDA version): turnout has none."""
    return (False, *get_package_name_and_version_info())
