"""Calibration: run the float model on turnout over the user's data and take each activation's
range, by MinMax, Percentile or Entropy.

The model is run with the tensors to calibrate exposed as extra graph outputs (graph
optimizations off, so every one of them is computed as written); each batch is reduced into
a small per-tensor summary at once, so calibration memory does not grow with the data.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import onnx
from onnx import TensorProto, helper

from turnout.graph.errors import InvalidArgument
from turnout.tools.quantization.types import CalibrationMethod

__all__ = ["CalibrationDataReader", "collect_ranges"]

Feed = Mapping[str, np.ndarray]


class CalibrationDataReader(abc.ABC):
    """The source of calibration inputs: `get_next()` returns one feed dict per call, then None.

    Any object with such a `get_next` is accepted (onnxruntime's readers too), and so is a plain
    iterable of feed dicts.
    """

    @abc.abstractmethod
    def get_next(self) -> dict[str, np.ndarray] | None:
        """The next feed {input name: array}, or None when the data is exhausted."""

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        while (feed := self.get_next()) is not None:
            yield feed


def _feeds(reader: Any) -> Iterator[Feed]:
    if hasattr(reader, "get_next"):
        while (feed := reader.get_next()) is not None:
            yield feed
    elif isinstance(reader, Iterable):
        yield from reader
    else:
        raise InvalidArgument(
            f"calibration_data_reader must have get_next() or be an iterable of feed dicts, "
            f"not {type(reader).__name__}"
        )


class _Collector(Protocol):
    def update(self, values: np.ndarray) -> None: ...
    def range(self) -> tuple[float, float]: ...


class _MinMax:
    """Smallest and largest value seen; with `moving_average`, an exponential average of the
    per-batch extremes instead (less sensitive to one outlier batch)."""

    def __init__(self, moving_average: bool, constant: float) -> None:
        self.moving_average = moving_average
        self.constant = constant
        self.lo: float | None = None
        self.hi = 0.0

    def update(self, values: np.ndarray) -> None:
        lo, hi = float(values.min()), float(values.max())
        if self.lo is None:
            self.lo, self.hi = lo, hi
        elif self.moving_average:
            self.lo += self.constant * (lo - self.lo)
            self.hi += self.constant * (hi - self.hi)
        else:
            self.lo, self.hi = min(self.lo, lo), max(self.hi, hi)

    def range(self) -> tuple[float, float]:
        return (self.lo or 0.0, self.hi)


class _Histogram:
    """A histogram of |x| over [0, top] with a fixed number of bins; when a batch goes past
    `top`, top doubles (as often as needed) and neighbouring bins merge, so no value is lost.
    Exact zeros (half of a ReLU's output) are left out: they are exact at any scale, and their
    spike would pull the threshold down. The signed extremes are kept to clip the threshold
    to what was seen."""

    def __init__(self, bins: int) -> None:
        self.counts = np.zeros(bins, np.float64)
        self.top = 0.0
        self.lo = 0.0
        self.hi = 0.0

    def update(self, values: np.ndarray) -> None:
        self.lo = min(self.lo, float(values.min()))
        self.hi = max(self.hi, float(values.max()))
        absmax = max(-self.lo, self.hi)
        values = values[values != 0]  # exact zeros are exact at any scale: no say in clipping
        if absmax == 0.0 or values.size == 0:
            return
        if self.top == 0.0:
            self.top = absmax
        elif absmax > self.top:
            factor = 2 ** int(np.ceil(np.log2(absmax / self.top)))
            bins = self.counts.size
            padded = np.zeros(-(-bins // factor) * factor)
            padded[:bins] = self.counts
            merged = padded.reshape(-1, factor).sum(axis=1)
            self.counts = np.zeros(bins)
            self.counts[: merged.size] = merged
            self.top *= factor
        hist, _ = np.histogram(np.abs(values), self.counts.size, (0.0, self.top))
        self.counts += hist

    def clipped(self, threshold: float) -> tuple[float, float]:
        return (max(self.lo, -threshold), min(self.hi, threshold))


class _Percentile(_Histogram):
    """The threshold below which `percentile` % of the |x| values lie."""

    def __init__(self, bins: int, percentile: float) -> None:
        super().__init__(bins)
        self.percentile = percentile

    def range(self) -> tuple[float, float]:
        total = self.counts.sum()
        if total == 0 or self.top == 0.0:
            return (self.lo, self.hi)
        cdf = np.cumsum(self.counts) / total
        index = int(np.searchsorted(cdf, self.percentile / 100.0))
        width = self.top / self.counts.size
        return self.clipped((min(index, self.counts.size - 1) + 1) * width)


class _Entropy(_Histogram):
    """The threshold whose clipped, `levels`-level quantized distribution is closest (in KL
    divergence) to the observed one: the method TensorRT made common for int8."""

    def __init__(self, bins: int, levels: int) -> None:
        super().__init__(bins)
        self.levels = levels

    def _divergence(self, cut: int) -> float:
        reference = self.counts[:cut].copy()
        reference[-1] += self.counts[cut:].sum()  # the clipped tail lands in the last bin
        kept = self.counts[:cut]
        group = np.arange(cut) * self.levels // cut  # `levels` runs of neighbouring bins
        sums = np.bincount(group, weights=kept, minlength=self.levels)
        filled = np.bincount(group, weights=kept > 0, minlength=self.levels)
        # each level's count spread evenly over the bins of its run that held values
        candidate = np.where(kept > 0, sums[group] / np.maximum(filled[group], 1), 0.0)
        p = reference / reference.sum()
        q_total = candidate.sum()
        if q_total == 0:
            return float("inf")
        q = candidate / q_total
        mask = p > 0
        with np.errstate(divide="ignore"):
            terms = p[mask] * np.log(p[mask] / np.where(q[mask] > 0, q[mask], 1e-12))
        return float(terms.sum())

    def range(self) -> tuple[float, float]:
        bins = self.counts.size
        if self.top == 0.0 or self.counts.sum() == 0:
            return (self.lo, self.hi)
        step = max(1, (bins - self.levels) // 128)  # at most ~128 candidates
        cuts = range(min(self.levels, bins), bins + 1, step)
        best = min(cuts, key=self._divergence)
        return self.clipped(best * self.top / bins)


class _Distribution:
    """The standard deviation of all values seen (running sums in float64), as the symmetric
    range (-std, std): float8 scales come from the spread, not the extremes."""

    def __init__(self) -> None:
        self.n = 0
        self.total = 0.0
        self.squares = 0.0

    def update(self, values: np.ndarray) -> None:
        v = values.astype(np.float64)
        self.n += v.size
        self.total += float(v.sum())
        self.squares += float(np.square(v).sum())

    def range(self) -> tuple[float, float]:
        mean = self.total / max(self.n, 1)
        std = float(np.sqrt(max(self.squares / max(self.n, 1) - mean * mean, 0.0)))
        return (-std, std)


def _collector(method: CalibrationMethod, options: Mapping[str, Any]) -> _Collector:
    if method is CalibrationMethod.Distribution:
        return _Distribution()
    if method is CalibrationMethod.MinMax:
        return _MinMax(options["CalibMovingAverage"], options["CalibMovingAverageConstant"])
    if method is CalibrationMethod.Percentile:
        return _Percentile(options["CalibNumBins"] or 2048, options["CalibPercentile"])
    return _Entropy(options["CalibNumBins"] or 512, options["CalibNumQuantizedBins"])


def _check_feed(feed: Any, index: int, inputs: Sequence[str]) -> dict[str, np.ndarray]:
    if not isinstance(feed, Mapping):
        raise InvalidArgument(
            f"calibration batch {index} is a {type(feed).__name__}, not a dict of input arrays"
        )
    unknown = sorted(set(feed) - set(inputs))
    missing = sorted(set(inputs) - set(feed))
    if unknown or missing:
        raise InvalidArgument(
            f"calibration batch {index}: "
            + "; ".join(
                part
                for part in (
                    f"unknown input name(s) {unknown}" if unknown else "",
                    f"missing input(s) {missing}" if missing else "",
                )
                if part
            )
            + f" (the model's inputs are {list(inputs)})"
        )
    return {k: np.asarray(v) for k, v in feed.items()}


def collect_ranges(
    model: onnx.ModelProto,
    tensors: Sequence[str],
    reader: Any,
    method: CalibrationMethod,
    options: Mapping[str, Any],
    providers: Sequence[Any] = ("CPUExecutionProvider",),
) -> dict[str, tuple[float, float]]:
    """(min, max) of each float tensor in `tensors` over the calibration data, as `method`
    sets it. Runs `model` (unchanged) on turnout with `providers`."""
    from turnout.api.options import GraphOptimizationLevel, SessionOptions
    from turnout.api.session import InferenceSession

    initializers = {t.name for t in model.graph.initializer}
    inputs = [i.name for i in model.graph.input if i.name not in initializers]
    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    outputs = {o.name for o in exposed.graph.output}
    computed = [t for t in tensors if t not in inputs]
    for name in computed:
        if name not in outputs:
            exposed.graph.output.append(
                helper.make_tensor_value_info(name, TensorProto.FLOAT, None)
            )
    opts = SessionOptions()
    opts.graph_optimization_level = GraphOptimizationLevel.ORT_DISABLE_ALL
    session = InferenceSession(exposed.SerializeToString(), opts, providers=list(providers))
    collectors = {t: _collector(method, options) for t in tensors}
    batches = 0
    for index, raw in enumerate(_feeds(reader)):
        feed = _check_feed(raw, index, inputs)
        try:
            values = session.run(computed, feed)
        except InvalidArgument as error:
            raise InvalidArgument(f"calibration batch {index}: {error}") from error
        for name, value in [*zip(computed, values), *((t, feed[t]) for t in tensors if t in feed)]:
            if np.asarray(value).size:
                collectors[name].update(np.asarray(value, np.float32))
        batches += 1
    if batches == 0:
        raise InvalidArgument(
            "calibration_data_reader gave no data (its first get_next() was None)"
        )
    return {name: c.range() for name, c in collectors.items()}
