"""Input files to numpy rows: Parquet columns, `.npy` files and images. Plain functions, run
inside Ray's workers; no Ray here, so each format is testable on its own.

Parquet columns may hold scalars, (nested) lists of equal length, fixed-size lists, or Arrow's
fixed-shape tensors; a column of lists of unequal length comes back as one array per row, and
the predictor names the first row that does not fit the model. An image is decoded with Pillow,
converted to the model's channel count (1: grayscale, 3: RGB), resized to its height and width
when they are fixed, and laid out as the input declares (channels first or last); a float input
gets pixels scaled to [0, 1].
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from turnout.graph import errors
from turnout.graph.errors import InvalidArgument
from turnout.tools.ray.batching import InputSpec

__all__ = ["IMAGE_SUFFIXES", "column_values", "load_image", "load_npy", "stack_rows"]

IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp"})


def column_values(column: Any, name: str, first_row: int) -> np.ndarray:
    """A pyarrow column as a numpy array with one entry per row (rows first)."""
    import pyarrow as pa

    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if column.null_count:
        null_at = int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
        raise InvalidArgument(f"column {name!r}: row {first_row + null_at} is null")
    kind = column.type
    if isinstance(kind, pa.FixedShapeTensorType):
        return np.asarray(column.to_numpy_ndarray())
    if pa.types.is_fixed_size_list(kind) or pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return _lists(column, name, first_row)
    return np.asarray(column.to_numpy(zero_copy_only=False))


def _lists(column: Any, name: str, first_row: int) -> np.ndarray:
    """A list column as (rows, length, ...) when every row has the same length, else an object
    array of one array per row."""
    import pyarrow as pa

    if pa.types.is_fixed_size_list(column.type):
        lengths = np.full(len(column), column.type.list_size)
    else:
        lengths = column.value_lengths().to_numpy(zero_copy_only=False)
    values = column_values(column.flatten(), name, first_row)
    if len(lengths) == 0 or (lengths == lengths[0]).all():
        size = int(lengths[0]) if len(lengths) else 0
        return values.reshape((len(column), size, *values.shape[1:]))
    ragged = np.empty(len(column), dtype=object)
    ragged[:] = np.split(values, np.cumsum(lengths)[:-1])
    return ragged


def stack_rows(rows: list[np.ndarray]) -> np.ndarray:
    """Rows as one array when they agree in shape and dtype; else an object array of them
    (the predictor then names the row that does not fit)."""
    if rows and all(r.shape == rows[0].shape and r.dtype == rows[0].dtype for r in rows):
        return np.stack(rows)
    out = np.empty(len(rows), dtype=object)
    out[:] = rows
    return out


def load_npy(path: str | Path) -> np.ndarray:
    """One row from a `.npy` file (never unpickles)."""
    return np.asarray(np.load(path, allow_pickle=False))


def image_layout(spec: InputSpec) -> tuple[str, int, int | None, int | None]:
    """(layout "NCHW" or "NHWC", channels, height, width) of an image input; a dimension the
    model leaves free is None."""
    shape = spec.shape
    if len(shape) != 4:
        raise InvalidArgument(
            f"input {spec.name!r} has shape {list(shape)}: images need a 4-D (batch, C, H, W) "
            "or (batch, H, W, C) input"
        )
    if shape[1] in (1, 3):
        layout, channels, h, w = "NCHW", shape[1], shape[2], shape[3]
    elif shape[3] in (1, 3):
        layout, channels, h, w = "NHWC", shape[3], shape[1], shape[2]
    else:
        raise InvalidArgument(
            f"input {spec.name!r} has shape {list(shape)}: no channel axis of 1 or 3 "
            "(first or last after the batch)"
        )
    size = [d if isinstance(d, int) else None for d in (h, w)]
    return layout, int(channels), size[0], size[1]


def load_image(path: str | Path, spec: InputSpec) -> np.ndarray:
    """One row for image input `spec` from an image file (see the module docstring)."""
    try:
        from PIL import Image
    except ImportError as e:
        raise errors.NotImplemented(
            f"reading images needs Pillow ({e}): pip install 'turnout[image]'"
        ) from e
    layout, channels, height, width = image_layout(spec)
    with Image.open(path) as img:
        img = img.convert("L" if channels == 1 else "RGB")
        if height is not None and width is not None and img.size != (width, height):
            img = img.resize((width, height), Image.Resampling.BILINEAR)
        pixels = np.asarray(img)
    pixels = pixels.reshape(pixels.shape[0], pixels.shape[1], channels)
    if layout == "NCHW":
        pixels = pixels.transpose(2, 0, 1)
    if spec.dtype.kind == "f":
        scaled: np.ndarray = np.ascontiguousarray(pixels, dtype=spec.dtype) / spec.dtype.type(255)
        return scaled
    return np.ascontiguousarray(pixels.astype(spec.dtype))
