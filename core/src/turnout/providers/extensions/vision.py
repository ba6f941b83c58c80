"""DecodeImage and EncodeImage (domain `com.microsoft.extensions`): PNG and JPEG bytes to an
[H, W, 3] uint8 image, BGR unless `color_space` is "rgb", and back; on Pillow.

PNG pixels are the same as onnxruntime-extensions' (both lossless, 16-bit samples cut to their
high byte, alpha dropped, grey repeated into three channels). JPEG pixels differ by a few levels:
onnxruntime-extensions' libjpeg and Pillow's libjpeg-turbo scale chroma differently
(docs/extensions-ops.md).
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from turnout.graph.contrib import Arg, Attr, NodeTypes, TensorType
from turnout.graph.errors import RuntimeException
from turnout.providers.extensions._registry import UINT8, VISION_DOMAIN, attr_text, op
from turnout.sdk.provider import KernelNode

__all__ = ["decode", "encode"]

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_MAX_SIDE = 16384
_MAX_PIXELS = 100 * 1024 * 1024
_JPEG_QUALITY = 95
_JPEG_SUBSAMPLING = 2  # 4:2:0, as onnxruntime-extensions' encoder writes
_PNG_LEVEL = 1


def decode(data: bytes) -> np.ndarray:
    """A PNG or JPEG image's RGB pixels, [H, W, 3] uint8.

    :raises ValueError: not a PNG or JPEG image, a CMYK JPEG, over 16384 pixels a side or
        100 megapixels, or corrupt.
    """
    from PIL import Image

    if len(data) < 8:
        raise ValueError("invalid image data (fewer than 8 bytes)")
    if data.startswith(_PNG_SIGNATURE):
        kind = "PNG"
    elif data.startswith(b"\xff\xd8"):
        kind = "JPEG"
    else:
        raise ValueError("only PNG and JPEG images are decoded")
    try:
        with warnings.catch_warnings():
            # the size limit below is onnxruntime-extensions', not Pillow's
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data), formats=[kind])
        width, height = image.size
        if width > _MAX_SIDE or height > _MAX_SIDE or width * height > _MAX_PIXELS:
            raise ValueError(f"{kind} dimensions {width}x{height} exceed the maximum size")
        if image.mode == "CMYK":  # YCCK JPEGs open as CMYK too
            raise ValueError("CMYK/YCCK JPEG images are not supported, only RGB and grey")
        if image.mode.startswith("I;16") or image.mode == "I":
            grey = (np.asarray(image).astype(np.uint32) >> 8).astype(np.uint8)
            return np.repeat(grey[:, :, None], 3, axis=2)
        if "transparency" in image.info:  # a tRNS chunk: dropped as the alpha it becomes
            return np.ascontiguousarray(np.asarray(image.convert("RGBA"))[:, :, :3])
        return np.asarray(image.convert("RGB"))
    except (OSError, SyntaxError, Image.DecompressionBombError) as e:
        raise ValueError(f"cannot decode the {kind} image: {e}") from None


def encode(rgb: np.ndarray, fmt: str) -> bytes:
    """[H, W, 3] uint8 RGB pixels as PNG (lossless) or JPEG (quality 95, 4:2:0) bytes."""
    from PIL import Image

    out = io.BytesIO()
    image = Image.fromarray(np.ascontiguousarray(rgb), "RGB")
    if fmt == "jpg":
        image.save(out, format="JPEG", quality=_JPEG_QUALITY, subsampling=_JPEG_SUBSAMPLING)
    else:
        image.save(out, format="PNG", compress_level=_PNG_LEVEL)
    return out.getvalue()


def _color_space(kn: KernelNode) -> bool:
    """Whether the node's pixels are BGR (its `color_space`: "bgr", the default, or "rgb")."""
    value = attr_text(kn, "color_space", "bgr") or "bgr"
    if value not in ("bgr", "rgb"):
        raise RuntimeException(
            f"node {kn.name!r} ({kn.domain}::{kn.op_type}): color_space must be 'bgr' or "
            f"'rgb', not {value!r}"
        )
    return value == "bgr"


def _image_shape(types: NodeTypes) -> list[TensorType | None]:
    return [TensorType(UINT8, (None, None, 3))]


def _bytes_shape(types: NodeTypes) -> list[TensorType | None]:
    return [TensorType(UINT8, (None,))]


@op(
    "DecodeImage",
    [Arg("encoded_stream", "tensor(uint8)")],
    [Arg("decoded_image", "tensor(uint8)")],
    _image_shape,
    attrs=[Attr("color_space", "string", "bgr")],
    library="PIL",
    domain=VISION_DOMAIN,
)
def decode_image(kn: KernelNode) -> Callable[..., tuple[Any]]:
    """The bytes of one PNG or JPEG image ([n]) to its pixels, [H, W, 3] uint8, BGR unless
    `color_space` is "rgb"."""
    bgr = _color_space(kn)

    def run(stream: Any) -> tuple[Any]:
        arr = np.asarray(stream)
        if arr.ndim != 1:
            raise RuntimeException(
                f"node {kn.name!r} ({kn.domain}::DecodeImage): the encoded image must be a "
                f"1-D byte tensor, not shape {list(arr.shape)}"
            )
        try:
            rgb = decode(np.ascontiguousarray(arr, dtype=np.uint8).tobytes())
        except ValueError as e:
            raise RuntimeException(f"node {kn.name!r} ({kn.domain}::DecodeImage): {e}") from None
        return (np.ascontiguousarray(rgb[:, :, ::-1]) if bgr else rgb,)

    return run


@op(
    "EncodeImage",
    [Arg("image", "tensor(uint8)")],
    [Arg("encoded_stream", "tensor(uint8)")],
    _bytes_shape,
    attrs=[Attr("format", "string"), Attr("color_space", "string", "bgr")],
    library="PIL",
    domain=VISION_DOMAIN,
)
def encode_image(kn: KernelNode) -> Callable[..., tuple[Any]]:
    """An [H, W, 3] uint8 image (BGR unless `color_space` is "rgb") to PNG or JPEG bytes, as
    the `format` attribute ("png" or "jpg") asks."""
    bgr = _color_space(kn)
    fmt = attr_text(kn, "format")
    if fmt not in ("png", "jpg"):
        raise RuntimeException(
            f"node {kn.name!r} ({kn.domain}::EncodeImage): the format attribute must be 'png' "
            f"or 'jpg', not {fmt!r}"
        )

    def run(image: Any) -> tuple[Any]:
        arr = np.asarray(image)
        if arr.ndim != 3 or arr.shape[2] != 3:
            raise RuntimeException(
                f"node {kn.name!r} ({kn.domain}::EncodeImage): the image must be [H, W, 3] "
                f"(channels last), not shape {list(arr.shape)}"
            )
        data = encode(arr[:, :, ::-1] if bgr else arr, fmt)
        return (np.frombuffer(data, dtype=np.uint8).copy(),)

    return run
