"""AudioDecoder: wav, flac and mp3 bytes to float PCM, as onnxruntime-extensions decodes them.

The streams are decoded by `miniaudio`, whose dr_wav, dr_flac and dr_mp3 are the decoders
onnxruntime-extensions builds in. The optional mix to mono and down-sampling follow
onnxruntime-extensions' arithmetic step by step (in float32 where it computes in float, in
float64 where it computes in double), so that outputs are the same to the bit: a 4-pole
Butterworth low-pass at half the target rate, then Kaiser-windowed sinc interpolation.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import cache
from typing import Any

import numpy as np

from turnout.graph.contrib import Arg, Attr, NodeTypes, TensorType
from turnout.graph.errors import RuntimeException
from turnout.providers.extensions._registry import FLOAT, attr_int, op, strings
from turnout.sdk.provider import KernelNode

__all__ = ["butterworth_lowpass", "detect_format", "kaiser_resample", "lowpass"]

_FORMATS = ("default", "wav", "mp3", "flac")
_KAISER_BETA = 6.0
_POLES = 4


def detect_format(data: bytes, given: str = "") -> str:
    """The stream format: `given` when it names one, else sniffed from the first bytes (FLAC's
    "fLaC", WAV's "RIFF", an MPEG audio sync word).

    :raises ValueError: `given` is not a format, or nothing is recognised.
    """
    if given and given not in _FORMATS:
        raise ValueError(f"unknown audio stream format {given!r} (one of {', '.join(_FORMATS)})")
    if given and given != "default":
        return given
    head = data[:4]
    if head == b"fLaC":
        return "flac"
    if head == b"RIFF":
        return "wav"
    if len(head) >= 2 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0:
        return "mp3"
    raise ValueError("cannot detect the audio stream format (not WAV, FLAC or MP3)")


def _without_info_tag(data: bytes) -> bytes:
    """MP3 bytes whose first frame no longer reads as a Xing/Info/VBRI header.

    Recent dr_mp3 releases read the encoder delay and padding from that header and trim them
    (gapless playback); the release in onnxruntime-extensions decodes the header frame as a
    frame of silence and keeps every sample. Blanking the tag gives the latter."""
    if len(data) < 4:
        return data
    first_frame = data[4:64]
    for tag in (b"Xing", b"Info", b"VBRI"):
        at = first_frame.find(tag)
        if at >= 0:
            at += 4
            return data[:at] + b"\0\0\0\0" + data[at + 4 :]
    return data


def _decode(data: bytes, fmt: str) -> tuple[np.ndarray, int, int]:
    """Interleaved float32 samples, channels and sample rate."""
    import miniaudio

    if fmt == "mp3":
        sound = miniaudio.mp3_read_f32(_without_info_tag(data))
    elif fmt == "flac":
        sound = miniaudio.flac_read_f32(data)
    else:
        sound = miniaudio.wav_read_f32(data)
    return np.asarray(sound.samples, dtype=np.float32), sound.nchannels, sound.sample_rate


def _pole_pair(p: int, poles: int, fc: float) -> tuple[list[float], list[float]]:
    """One biquad of the low-pass: the p-th pole pair on the unit circle, through the bilinear
    transform (with its tan(1/2) warping) and a low-pass to low-pass shift to cutoff `fc`
    (a fraction of the sampling rate). Returns (feed-forward a0..a2, feedback [0, b1, b2])."""
    angle = math.pi / (poles * 2.0) + (p - 1.0) * math.pi / poles
    rp, ip = -math.cos(angle), math.sin(angle)
    t = 2.0 * math.tan(0.5)
    w = 2.0 * math.pi * fc
    m = rp * rp + ip * ip
    d = 4.0 - 4.0 * rp * t + m * t * t
    x0, x1, x2 = t * t / d, 2.0 * t * t / d, t * t / d
    y1 = (8.0 - 2.0 * m * t * t) / d
    y2 = (-4.0 - 4.0 * rp * t - m * t * t) / d
    k = math.sin(0.5 - w / 2.0) / math.sin(0.5 + w / 2.0)
    d = 1.0 + y1 * k - y2 * k * k
    a = [
        (x0 - x1 * k + x2 * k * k) / d,
        (-2.0 * x0 * k + x1 + x1 * k * k - 2.0 * x2 * k) / d,
        (x0 * k * k - x1 * k + x2) / d,
    ]
    b = [0.0, (2.0 * k + y1 + y1 * k * k - 2.0 * y2 * k) / d, (-k * k - y1 * k + y2) / d]
    return a, b


def butterworth_lowpass(cutoff: float, rate: float) -> tuple[list[float], list[float]]:
    """The 4-pole Butterworth low-pass at `cutoff` Hz for `rate` Hz samples, as the
    coefficients (numerator, denominator with denominator[0] = 1) of its difference equation,
    with unit gain at DC."""
    fc = cutoff / rate
    size = _POLES + 3
    num, den = [0.0] * size, [0.0] * size
    num[2] = den[2] = 1.0
    for p in range(1, _POLES // 2 + 1):
        a, b = _pole_pair(p, _POLES, fc)
        prev_num, prev_den = num[:], den[:]
        for i in range(2, _POLES + 3):
            num[i] = a[0] * prev_num[i] + a[1] * prev_num[i - 1] + a[2] * prev_num[i - 2]
            den[i] = prev_den[i] - b[1] * prev_den[i - 1] - b[2] * prev_den[i - 2]
    den[2] = 0.0
    num = num[2:]
    den = [-v for v in den[2:]]
    total_num = total_den = 0.0
    for v, u in zip(num, den, strict=True):
        total_num += v
        total_den += u
    gain = total_num / (1.0 - total_den)
    num = [v / gain for v in num]
    den = [-v for v in den]
    den[0] = 1.0
    return num, den


def lowpass(x: np.ndarray, num: list[float], den: list[float]) -> np.ndarray:
    """`x` (float32) through the filter, computed in float64 and rounded to float32 per sample
    (the feedback keeps float64)."""
    n = len(x)
    taps = len(num)
    padded = np.concatenate([np.zeros(taps - 1), x.astype(np.float64)])
    ff = num[0] * padded[taps - 1 :]
    for k in range(1, taps):
        ff = ff + num[k] * padded[taps - 1 - k : taps - 1 - k + n]
    a1, a2, a3, a4 = den[1:5]
    out = np.empty(n, dtype=np.float64)
    y1 = y2 = y3 = y4 = 0.0
    for i, f in enumerate(ff.tolist()):
        y = f - a1 * y1 - a2 * y2 - a3 * y3 - a4 * y4
        out[i] = y
        y4, y3, y2, y1 = y3, y2, y1, y
    return out.astype(np.float32)


def _bessel_i0(x: float) -> float:
    """The modified Bessel function I0 by its power series, to a relative 1e-8."""
    total, term, quarter_sq, n = 0.0, 1.0, x * x / 4.0, 0
    while term > 1e-8 * total:
        total += term
        n += 1
        term *= quarter_sq / (n * n)
    return total


@cache
def _kaiser(length: int) -> np.ndarray:
    """The Kaiser window (beta 6) of `length` points spanning [-1, 1]."""
    i0_beta = _bessel_i0(_KAISER_BETA)
    if length == 1:
        return np.array([1.0 / i0_beta])
    window = []
    for i in range(length):
        x = 2.0 * i / (length - 1.0) - 1.0
        window.append(_bessel_i0(_KAISER_BETA * math.sqrt(1 - x * x)) / i0_beta)
    return np.asarray(window)


def kaiser_resample(x: np.ndarray, rate: float, target: float) -> np.ndarray:
    """`x` (float32, at `rate`) at `target` Hz: each output sample is the sinc-weighted,
    Kaiser-windowed sum of the input samples within ceil(beta / (2 * target / rate)) of it."""
    f32 = np.float32
    factor = f32(target) / f32(rate)
    size = math.ceil(f32(len(x)) * factor)
    index = np.arange(size, dtype=f32) / factor
    whole = index.astype(np.int64)
    reach = math.ceil(_KAISER_BETA / (2.0 * float(factor)))
    start = np.maximum(0, whole - reach)
    end = np.minimum(len(x) - 1, whole + reach)
    length = end - start + 1
    out = np.empty(size, dtype=f32)
    samples = x.astype(np.float64)
    for span in np.unique(length).tolist():
        rows = np.nonzero(length == span)[0]
        at = start[rows, None] + np.arange(span)
        distance = np.abs(at.astype(f32) - index[rows, None]).astype(np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            sinc = np.where(
                distance < f32(1e-6), 1.0, np.sin(math.pi * distance) / (math.pi * distance)
            )
        weights = _kaiser(span)[None, :] * sinc
        acc = np.zeros(len(rows))
        for k in range(span):
            acc = acc + samples[at[:, k]] * weights[:, k]
        out[rows] = acc.astype(f32)
    return out


def _mono(pcm: np.ndarray) -> np.ndarray:
    """Consecutive sample pairs averaged (in float32), as onnxruntime-extensions mixes any
    stream of more than one channel."""
    if pcm.size <= 1:
        return pcm
    half = pcm.size // 2
    pairs = pcm[: half * 2].reshape(half, 2)
    mixed: np.ndarray = (pairs[:, 0] + pairs[:, 1]) / np.float32(2)
    return mixed


def _infer(types: NodeTypes) -> list[TensorType | None]:
    return [TensorType(FLOAT, (1, None))]


@op(
    "AudioDecoder",
    [Arg("audio_stream", "tensor(uint8)"), Arg("format", "tensor(string)", optional=True)],
    [Arg("floatPCM", "tensor(float)")],
    _infer,
    attrs=[Attr("downsampling_rate", "int", 0), Attr("stereo_to_mono", "int", 0)],
    library="miniaudio",
)
def audio_decoder(kn: KernelNode) -> Callable[..., tuple[Any]]:
    """The bytes of one wav, flac or mp3 stream ([n] or [1, n]; the format given by the
    optional string input or sniffed) to its samples, [1, samples]: channels interleaved
    unless `stereo_to_mono`, at the stream's rate unless `downsampling_rate` is lower."""
    target = attr_int(kn, "downsampling_rate", 0)
    to_mono = bool(attr_int(kn, "stereo_to_mono", 0))

    def fail(message: str) -> RuntimeException:
        return RuntimeException(f"node {kn.name!r} ({kn.domain}::AudioDecoder): {message}")

    def run(stream: Any, fmt: Any = None) -> tuple[Any]:
        arr = np.asarray(stream)
        if not (arr.ndim == 1 or (arr.ndim == 2 and arr.shape[0] == 1)):
            raise fail(f"the stream must have shape [n] or [1, n], not {list(arr.shape)}")
        data = np.ascontiguousarray(arr, dtype=np.uint8).tobytes()
        given = "" if fmt is None or np.size(fmt) == 0 else str(strings(fmt).reshape(-1)[0])
        try:
            kind = detect_format(data, given)
        except ValueError as e:
            raise fail(str(e)) from None
        try:
            pcm, channels, rate = _decode(data, kind)
        except Exception as e:  # miniaudio.DecodeError and the like: a corrupt stream
            raise fail(f"cannot decode the {kind} stream: {e}") from None
        if target and rate < target:
            raise fail(f"only down-sampling: the stream's rate {rate} is below {target}")
        if to_mono and channels > 1:
            pcm = _mono(pcm)
        if target and target != rate:
            num, den = butterworth_lowpass(0.5 * target, rate)
            pcm = kaiser_resample(lowpass(pcm, num, den), rate, target)
        return (pcm.reshape(1, -1),)

    return run
