"""onnxruntime-extensions' operators (domains `ai.onnx.contrib` and `com.microsoft.extensions`)
run by turnout in Python.

Exported text, audio and vision models carry pre- and post-processing as nodes of these domains
(tokenizers, string ops, audio and image decoders), and applications load them with
`so.register_custom_ops_library(onnxruntime_extensions.get_library_path())`. turnout cannot
load that native library; given its path, `SessionOptions.register_custom_ops_library`
installs these op sets instead (`enable()`): one `turnout.graph.contrib.OpSpec` schema and
one numpy/Python kernel per op, in one module per family (`strings`, `wordpiece`,
`sentencepiece`, `bpe`, `hfjson`, `trie`, `audio`, `vision`). The tokenizers and codecs run on
maintained Python libraries (`sentencepiece`, `tokenizers`, `miniaudio`, `Pillow`: the
`turnout[extensions]` extra); a node whose library is not installed is refused at session
creation (`MissingExtensionsLibrary`, naming the node and the pip command).
docs/extensions-ops.md lists every op of the domains and what runs it.

The package sits in the providers layer: its kernels are the CPU provider's custom-op kernels
(`turnout.sdk.custom_ops`), and the api layer enables it.
"""

from __future__ import annotations

import re
from pathlib import Path

from turnout.providers.extensions import (
    audio,
    bpe,
    hfjson,
    sentencepiece,
    strings,
    trie,
    vision,
    wordpiece,
)
from turnout.providers.extensions._registry import (
    DOMAIN,
    KERNELS,
    LIBRARIES,
    SPECS,
    VISION_DOMAIN,
    MissingExtensionsLibrary,
)
from turnout.sdk.custom_ops import CustomOpSet, install

__all__ = [
    "DOMAIN",
    "LIBRARIES",
    "VISION_DOMAIN",
    "MissingExtensionsLibrary",
    "enable",
    "is_extensions_library",
    "op_sets",
    "ops",
]

_MODULES = (
    audio,
    bpe,
    hfjson,
    sentencepiece,
    strings,
    trie,
    vision,
    wordpiece,
)  # for their registrations

_NATIVE_NAMES = re.compile(
    r"^(_extensions_pydll\..*\.(so|pyd)|_extensions_pydll\.(so|pyd)"
    r"|(lib)?ortextensions\.(so|dll|dylib)(\.\d+)*)$"
)


def is_extensions_library(path: str | Path) -> bool:
    """Whether `path` names onnxruntime-extensions' native library: the Python package's
    (`onnxruntime_extensions.get_library_path()`) or the C API build (`libortextensions.so`,
    `ortextensions.dll`)."""
    name = Path(path).name
    if _NATIVE_NAMES.match(name):
        return True
    try:
        import onnxruntime_extensions
    except ImportError:
        return False
    try:
        return Path(path).resolve() == Path(onnxruntime_extensions.get_library_path()).resolve()
    except (OSError, AttributeError):
        return False


def op_sets() -> list[CustomOpSet]:
    """The `ai.onnx.contrib` and `com.microsoft.extensions` op sets: the schemas and kernels
    turnout has."""
    return [
        CustomOpSet(domain, KERNELS, tuple(s for s in SPECS if s.domain == domain))
        for domain in (DOMAIN, VISION_DOMAIN)
    ]


def ops() -> list[str]:
    """The op types turnout runs, sorted."""
    return sorted(spec.name for spec in SPECS)


def enable(source: str = "onnxruntime-extensions") -> None:
    """Install the op sets for the whole process (again is a no-op)."""
    install(op_sets(), source)
