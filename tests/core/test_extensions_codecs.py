"""onnxruntime-extensions' audio and image codecs (AudioDecoder; DecodeImage and EncodeImage of
`com.microsoft.extensions`) against onnxruntime + onnxruntime-extensions, on sounds and images
made in the test."""

from __future__ import annotations

import io
import struct
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper

import turnout
from turnout.graph.errors import RuntimeException
from turnout.providers import extensions
from turnout.providers.extensions import _registry

ort = pytest.importorskip("onnxruntime", reason="compares with onnxruntime")
ortx = pytest.importorskip("onnxruntime_extensions", reason="compares with onnxruntime-extensions")

CONTRIB = "ai.onnx.contrib"
VISION = "com.microsoft.extensions"
U8 = TensorProto.UINT8


def _model(op: str, domain: str, out_type: int, inputs: Sequence[Any] = (), **attrs: Any) -> bytes:
    names = ["x", *(name for name, _ in inputs)]
    node = helper.make_node(op, names, ["y"], domain=domain, name="n", **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("x", U8, None),
            *(helper.make_tensor_value_info(n, t, None) for n, t in inputs),
        ],
        [helper.make_tensor_value_info("y", out_type, None)],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(domain, 1)]
    return bytes(helper.make_model(graph, opset_imports=opsets).SerializeToString())


def _ours(model: bytes) -> Any:
    """turnout's session, made as applications make it."""
    opts = turnout.SessionOptions()
    opts.register_custom_ops_library(ortx.get_library_path())
    return turnout.InferenceSession(model, opts, providers=["CPUExecutionProvider"])


def _theirs(model: bytes) -> Any:
    opts = ort.SessionOptions()
    opts.register_custom_ops_library(ortx.get_library_path())
    return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])


def _sessions(model: bytes) -> tuple[Any, Any]:
    return _ours(model), _theirs(model)


def _run_both(model: bytes, feeds: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    ours, theirs = _sessions(model)
    return ours.run(None, feeds)[0], theirs.run(None, feeds)[0]


# -- AudioDecoder ----------------------------------------------------------------------------


def _tones(rate: int, seconds: float = 0.25, channels: int = 2) -> np.ndarray:
    """A tone and a little noise per channel, [frames, channels] float64 in [-1, 1]."""
    t = np.arange(int(rate * seconds)) / rate
    noise = np.random.default_rng(rate).standard_normal((len(t), channels))
    waves = [0.5 * np.sin(2 * np.pi * (440 + 700 * c) * t) for c in range(channels)]
    return np.clip(np.stack(waves, axis=1) + 0.05 * noise, -1, 1)


def _wav(sound: np.ndarray, rate: int, width: int, floating: bool = False) -> bytes:
    """A RIFF WAVE file: integer PCM of `width` bytes a sample (8-bit unsigned), or IEEE
    float of 4 or 8 bytes."""
    channels = sound.shape[1]
    if floating:
        data = sound.astype("<f4" if width == 4 else "<f8").tobytes()
    elif width == 1:
        data = np.round(sound * 127 + 128).astype(np.uint8).tobytes()
    else:
        scale = 2 ** (8 * width - 1) - 1
        ints = np.round(sound * scale).astype("<i4")
        data = b"".join(v.to_bytes(width, "little", signed=True) for v in ints.reshape(-1).tolist())
    fmt = struct.pack(
        "<HHIIHH", 3 if floating else 1, channels, rate, rate * channels * width,
        channels * width, 8 * width,
    )  # fmt: skip
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt
    body += b"data" + struct.pack("<I", len(data)) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body


def _soundfile(sound: np.ndarray, rate: int, fmt: str, subtype: str) -> bytes:
    sf = pytest.importorskip("soundfile", reason="the test writes FLAC and MP3 with soundfile")
    buf = io.BytesIO()
    try:
        sf.write(buf, sound, rate, format=fmt, subtype=subtype)
    except (TypeError, ValueError, RuntimeError) as e:  # an old libsndfile without MP3
        pytest.skip(f"soundfile cannot write {fmt}: {e}")
    return buf.getvalue()


STREAMS = {
    "wav-u8": lambda s, r: _wav(s, r, 1),
    "wav-16": lambda s, r: _wav(s, r, 2),
    "wav-24": lambda s, r: _wav(s, r, 3),
    "wav-32": lambda s, r: _wav(s, r, 4),
    "wav-float": lambda s, r: _wav(s, r, 4, floating=True),
    "wav-double": lambda s, r: _wav(s, r, 8, floating=True),
    "flac-16": lambda s, r: _soundfile(s, r, "FLAC", "PCM_16"),
    "flac-24": lambda s, r: _soundfile(s, r, "FLAC", "PCM_24"),
    "mp3": lambda s, r: _soundfile(s, r, "MP3", "MPEG_LAYER_III"),
}
MP3_TOLERANCE = 2.0**-14
"""miniaudio's dr_mp3 rounds to 16 bits before float; onnxruntime-extensions' decodes to float:
samples differ by up to two steps of 16-bit audio."""
RESAMPLED_TOLERANCE = 1e-6
"""Down-sampled samples: the same arithmetic in the same order, but the sines of numpy and of
the C library may differ in their last bit on some machine."""


def _audio(stream: bytes) -> np.ndarray:
    return np.frombuffer(stream, dtype=np.uint8).copy()


@pytest.mark.parametrize("stream", list(STREAMS))
@pytest.mark.parametrize("rate", [44100, 16000])
@pytest.mark.parametrize(
    "attrs",
    [{}, {"stereo_to_mono": 1}, {"downsampling_rate": 16000}, {"downsampling_rate": 8000}],
    ids=["as-is", "mono", "to16k", "to8k"],
)
def test_audio_decoder_gives_onnxruntimes_samples(
    stream: str, rate: int, attrs: dict[str, Any]
) -> None:
    data = _audio(STREAMS[stream](_tones(rate), rate))
    model = _model("AudioDecoder", CONTRIB, TensorProto.FLOAT, **attrs)
    got, expected = _run_both(model, {"x": data})
    assert got.dtype == expected.dtype == np.float32
    assert got.shape == expected.shape and got.shape[0] == 1
    resampled = attrs.get("downsampling_rate", rate) != rate
    atol = MP3_TOLERANCE if stream == "mp3" else RESAMPLED_TOLERANCE if resampled else 0.0
    np.testing.assert_allclose(got, expected, rtol=0, atol=atol)


@pytest.mark.parametrize("channels", [1, 3])
def test_audio_decoder_mono_and_many_channels(channels: int) -> None:
    """A mono stream is left as it is; more than two channels are mixed in pairs of
    consecutive samples, as onnxruntime-extensions mixes them."""
    data = _audio(_wav(_tones(22050, channels=channels), 22050, 2))
    for attrs in ({"stereo_to_mono": 1}, {"stereo_to_mono": 1, "downsampling_rate": 8000}):
        got, expected = _run_both(
            _model("AudioDecoder", CONTRIB, TensorProto.FLOAT, **attrs), {"x": data}
        )
        np.testing.assert_allclose(got, expected, rtol=0, atol=RESAMPLED_TOLERANCE)


@pytest.mark.parametrize("fmt", ["wav", "default", ""])
def test_audio_decoder_format_input_and_a_row_of_bytes(fmt: str) -> None:
    data = _audio(_wav(_tones(16000), 16000, 2)).reshape(1, -1)
    model = _model("AudioDecoder", CONTRIB, TensorProto.FLOAT, [("format", TensorProto.STRING)])
    feeds = {"x": data, "format": np.array([fmt], dtype=object)}
    got, expected = _run_both(model, feeds)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize(
    ("data", "fmt", "attrs", "match"),
    [
        (b"not audio at all", "", {}, "cannot detect"),
        (None, "ogg", {}, "unknown audio stream format"),
        (None, "", {"downsampling_rate": 48000}, "only down-sampling"),
        (b"RIFF" + b"\0" * 40, "", {}, "cannot decode the wav stream"),
    ],
)
def test_audio_decoder_refuses_what_onnxruntime_refuses(
    data: bytes | None, fmt: str, attrs: dict[str, Any], match: str
) -> None:
    stream = _audio(data if data is not None else _wav(_tones(16000), 16000, 2))
    model = _model(
        "AudioDecoder", CONTRIB, TensorProto.FLOAT, [("format", TensorProto.STRING)], **attrs
    )
    feeds = {"x": stream, "format": np.array([fmt], dtype=object)}
    ours, theirs = _sessions(model)
    with pytest.raises(ort.capi.onnxruntime_pybind11_state.RuntimeException):
        theirs.run(None, feeds)
    with pytest.raises(RuntimeException, match=match):
        ours.run(None, feeds)


# -- DecodeImage -----------------------------------------------------------------------------


def _png(
    pixels: np.ndarray, color_type: int, depth: int, trns: bytes = b"", plte: bytes = b""
) -> bytes:
    """A PNG file written by hand (so that every color type and bit depth can be made):
    `pixels` [H, W, samples] of integers below 2**depth, one row after another, unfiltered."""
    height, width = pixels.shape[:2]
    rows = []
    for row in pixels.reshape(height, -1):
        if depth == 16:
            raw = row.astype(">u2").tobytes()
        elif depth == 8:
            raw = row.astype(np.uint8).tobytes()
        else:
            bits = np.unpackbits(row.astype(np.uint8)[:, None], axis=1)[:, 8 - depth :]
            raw = np.packbits(bits.reshape(-1)).tobytes()
        rows.append(b"\0" + raw)

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body)
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    ihdr = struct.pack(">IIBBBBB", width, height, depth, color_type, 0, 0, 0)
    out = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr)
    if plte:
        out += chunk(b"PLTE", plte)
    if trns:
        out += chunk(b"tRNS", trns)
    return out + chunk(b"IDAT", zlib.compress(b"".join(rows))) + chunk(b"IEND", b"")


def _gradient(height: int = 37, width: int = 53) -> np.ndarray:
    """A smooth RGB picture, [H, W, 3] uint8: what JPEG is made for."""
    yy, xx = np.mgrid[0:height, 0:width]
    planes = [xx * 255 // width, yy * 255 // height, (xx + yy) * 127 // (width + height) + 60]
    return np.stack(planes, axis=-1).astype(np.uint8)


def _noise(height: int = 19, width: int = 23, samples: int = 3, top: int = 256) -> np.ndarray:
    rng = np.random.default_rng(height * width + samples)
    return rng.integers(0, top, (height, width, samples)).astype(np.int64)


PNGS = {
    "rgb8": lambda: _png(_noise(), 2, 8),
    "rgba8": lambda: _png(_noise(samples=4), 6, 8),
    "rgb16": lambda: _png(_noise(top=65536), 2, 16),
    "rgba16": lambda: _png(_noise(samples=4, top=65536), 6, 16),
    "grey1": lambda: _png(_noise(samples=1, top=2), 0, 1),
    "grey2": lambda: _png(_noise(samples=1, top=4), 0, 2),
    "grey4": lambda: _png(_noise(samples=1, top=16), 0, 4),
    "grey8": lambda: _png(_noise(samples=1), 0, 8),
    "grey16": lambda: _png(_noise(samples=1, top=65536), 0, 16),
    "grey-alpha8": lambda: _png(_noise(samples=2), 4, 8),
    "grey-alpha16": lambda: _png(_noise(samples=2, top=65536), 4, 16),
    "grey8-trns": lambda: _png(_noise(samples=1), 0, 8, trns=b"\0\x07"),
    "rgb8-trns": lambda: _png(_noise(), 2, 8, trns=b"\0\x07\0\x08\0\x09"),
    "palette4": lambda: _png(_noise(samples=1, top=16), 3, 4, plte=bytes(range(48))),
    "palette8-trns": lambda: _png(
        _noise(samples=1, top=200),
        3,
        8,
        plte=(np.arange(600) % 251).astype(np.uint8).tobytes(),
        trns=bytes(range(9)),
    ),
}


@pytest.mark.parametrize("kind", list(PNGS))
@pytest.mark.parametrize("color_space", ["bgr", "rgb", None])
def test_decode_image_png_gives_onnxruntimes_pixels(kind: str, color_space: str | None) -> None:
    pytest.importorskip("PIL", reason="DecodeImage runs on Pillow")
    attrs = {} if color_space is None else {"color_space": color_space}
    model = _model("DecodeImage", VISION, U8, **attrs)
    got, expected = _run_both(model, {"x": _audio(PNGS[kind]())})
    assert got.dtype == expected.dtype == np.uint8
    np.testing.assert_array_equal(got, expected)


def _pillow(image: np.ndarray, **options: Any) -> bytes:
    pil = pytest.importorskip("PIL.Image", reason="DecodeImage runs on Pillow")
    buf = io.BytesIO()
    pil.fromarray(image).save(buf, **options)
    return buf.getvalue()


JPEG_TOLERANCE = (8, 1.0)
"""(largest, mean) difference of pixel values where chroma is subsampled: onnxruntime-extensions'
libjpeg upsamples chroma in the DCT domain, Pillow's libjpeg-turbo interpolates between samples.
Without subsampling the two decode the same pixels."""


@pytest.mark.parametrize(
    "options",
    [
        {"quality": 80, "subsampling": 0},
        {"quality": 95},
        {"quality": 90, "progressive": True},
        {"quality": 75, "subsampling": 1},
    ],
    ids=["444", "420", "progressive", "422"],
)
@pytest.mark.parametrize("color_space", ["bgr", "rgb"])
def test_decode_image_jpeg(options: dict[str, Any], color_space: str) -> None:
    data = _audio(_pillow(_gradient(), format="JPEG", **options))
    got, expected = _run_both(
        _model("DecodeImage", VISION, U8, color_space=color_space), {"x": data}
    )
    assert got.shape == expected.shape and got.dtype == expected.dtype
    diff = np.abs(got.astype(np.int64) - expected)
    if options.get("subsampling") == 0:
        assert diff.max() == 0
    else:
        assert diff.max() <= JPEG_TOLERANCE[0] and diff.mean() <= JPEG_TOLERANCE[1], diff.max()


def test_decode_image_grey_jpeg_has_three_channels() -> None:
    """onnxruntime-extensions 0.15 gives a grey JPEG one channel (and, asked for BGR, swaps its
    bytes three by three); its later releases, like turnout, repeat grey into three channels,
    as for every PNG."""
    pil = pytest.importorskip("PIL.Image", reason="DecodeImage runs on Pillow")
    grey = _gradient()[:, :, 0]
    data = _audio(_pillow(grey, format="JPEG", quality=90))
    got, expected = _run_both(_model("DecodeImage", VISION, U8, color_space="rgb"), {"x": data})
    decoded = np.asarray(pil.open(io.BytesIO(data.tobytes())))
    assert got.shape == (*grey.shape, 3)
    for c in range(3):
        np.testing.assert_array_equal(got[:, :, c], decoded)
    np.testing.assert_array_equal(got[:, :, :1], expected)


@pytest.mark.parametrize(
    ("data", "match", "compared"),
    [
        # onnxruntime-extensions 0.15 hands other bytes to libjpeg, which ends the process
        (b"GIF89a" + b"\0" * 20, "only PNG and JPEG", False),
        (b"\x89PNG\r\n\x1a\n" + b"\0" * 20, "cannot decode the PNG", True),
        (b"\xff\xd8", "fewer than 8 bytes", True),
    ],
    ids=["gif", "corrupt-png", "short"],
)
def test_decode_image_refuses_bad_bytes(data: bytes, match: str, compared: bool) -> None:
    pytest.importorskip("PIL", reason="DecodeImage runs on Pillow")
    model = _model("DecodeImage", VISION, U8)
    if compared:
        with pytest.raises(ort.capi.onnxruntime_pybind11_state.RuntimeException):
            _theirs(model).run(None, {"x": _audio(data)})
    with pytest.raises(RuntimeException, match=match):
        _ours(model).run(None, {"x": _audio(data)})


# -- EncodeImage -----------------------------------------------------------------------------


def _segments(jpeg: bytes) -> dict[int, list[bytes]]:
    """A JPEG's marker segments before the scan, by marker: the quantization tables (DQT, 0xDB)
    and the frame header with its sampling factors (SOF0, 0xC0)."""
    out: dict[int, list[bytes]] = {}
    at = 2
    while at + 4 <= len(jpeg) and jpeg[at] == 0xFF and jpeg[at + 1] != 0xDA:
        size = int.from_bytes(jpeg[at + 2 : at + 4], "big")
        out.setdefault(jpeg[at + 1], []).append(jpeg[at + 4 : at + 2 + size])
        at += 2 + size
    return out


@pytest.mark.parametrize("color_space", ["bgr", "rgb"])
@pytest.mark.parametrize("fmt", ["png", "jpg"])
def test_encode_image_gives_onnxruntimes_image(fmt: str, color_space: str) -> None:
    """PNG: the same pixels (the compressed bytes differ). JPEG: the same quantization tables
    and sampling factors (quality 95, 4:2:0), and pixels within JPEG_TOLERANCE."""
    pil = pytest.importorskip("PIL.Image", reason="EncodeImage runs on Pillow")
    image = _gradient() if fmt == "jpg" else _noise().astype(np.uint8)
    model = _model("EncodeImage", VISION, U8, format=fmt, color_space=color_space)
    got, expected = _run_both(model, {"x": image})
    assert got.dtype == expected.dtype == np.uint8 and got.ndim == expected.ndim == 1

    def pixels(data: np.ndarray) -> np.ndarray:
        return np.asarray(pil.open(io.BytesIO(data.tobytes())).convert("RGB")).astype(np.int64)

    rgb = image if color_space == "rgb" else image[:, :, ::-1]
    if fmt == "png":
        np.testing.assert_array_equal(pixels(got), pixels(expected))
        np.testing.assert_array_equal(pixels(got), rgb)
        return
    ours, theirs = _segments(got.tobytes()), _segments(expected.tobytes())
    assert ours[0xDB] and ours[0xDB] == theirs[0xDB]
    assert ours[0xC0] == theirs[0xC0]
    diff = np.abs(pixels(got) - pixels(expected))
    assert diff.max() <= JPEG_TOLERANCE[0] and diff.mean() <= JPEG_TOLERANCE[1], diff.max()


def test_encode_then_decode_is_the_image() -> None:
    pytest.importorskip("PIL", reason="the codecs run on Pillow")
    image = _noise().astype(np.uint8)
    encoded = _ours(_model("EncodeImage", VISION, U8, format="png")).run(None, {"x": image})[0]
    decoded = _ours(_model("DecodeImage", VISION, U8)).run(None, {"x": encoded})[0]
    np.testing.assert_array_equal(decoded, image)


@pytest.mark.parametrize(
    ("op", "attrs"),
    [
        ("EncodeImage", {}),
        ("EncodeImage", {"format": "bmp"}),
        ("EncodeImage", {"format": "png", "color_space": "RGB"}),
        ("DecodeImage", {"color_space": "BGR"}),
    ],
)
def test_image_attributes_onnxruntime_refuses_are_refused(op: str, attrs: dict[str, Any]) -> None:
    pytest.importorskip("PIL", reason="the codecs run on Pillow")
    model = _model(op, VISION, U8, **attrs)
    with pytest.raises(ort.capi.onnxruntime_pybind11_state.RuntimeException):
        _theirs(model)
    with pytest.raises(RuntimeException, match="must be"):
        _ours(model)


def test_encode_image_needs_an_hwc_image() -> None:
    pytest.importorskip("PIL", reason="EncodeImage runs on Pillow")
    model = _model("EncodeImage", VISION, U8, format="png")
    with pytest.raises(RuntimeException, match=r"\[H, W, 3\]"):
        _ours(model).run(None, {"x": np.zeros((4, 4, 4), np.uint8)})


# -- a missing library -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("op", "domain", "library", "pip"),
    [
        ("AudioDecoder", CONTRIB, "miniaudio", "miniaudio"),
        ("DecodeImage", VISION, "PIL", "Pillow"),
        ("EncodeImage", VISION, "PIL", "Pillow"),
    ],
)
def test_a_missing_codec_library_is_refused_naming_the_op_and_package(
    op: str, domain: str, library: str, pip: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = _registry.importlib.import_module

    def without(name: str, *args: Any) -> Any:
        if name == library:
            raise ImportError(name)
        return real(name, *args)

    monkeypatch.setattr(_registry.importlib, "import_module", without)
    out = TensorProto.FLOAT if op == "AudioDecoder" else U8
    model = _model(op, domain, out, **({"format": "png"} if op == "EncodeImage" else {}))
    with pytest.raises(
        extensions.MissingExtensionsLibrary, match=rf"'n' \({domain}::{op}\).*pip install {pip}"
    ):
        _ours(model)
