"""`onnxruntime.capi.build_and_package_info`: which onnxruntime package this stands in for.

turnout answers as onnxruntime's CPU package of the API version it mirrors.
"""

from turnout.api.environment import ORT_API_VERSION

__all__ = ["__version__", "package_name"]

package_name = "onnxruntime"
__version__ = ORT_API_VERSION
