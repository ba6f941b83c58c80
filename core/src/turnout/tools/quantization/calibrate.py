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
from turnout.tools.quantization.graph import ModelInput, load_model
from turnout.tools.quantization.types import CalibrationMethod

__all__ = [
    "CalibraterBase",
    "CalibrationDataReader",
    "CalibrationMethod",
    "KnownRanges",
    "TensorData",
    "TensorsData",
    "collect_ranges",
    "create_calibrator",
]

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
    sets it. Runs `model` (unchanged) on turnout with `providers`; `reader` may be
    `KnownRanges` (ranges computed before, as onnxruntime's `tensors_range`)."""
    if isinstance(reader, KnownRanges):
        for t in tensors:
            if t not in reader.ranges:  # onnxruntime's QDQQuantizer's error, word for word
                raise InvalidArgument(
                    f"Quantization parameters are not specified for param {t}. In static mode "
                    "quantization params for inputs and outputs of nodes to be quantized are "
                    "required."
                )
        return {t: reader.ranges[t] for t in tensors}
    from turnout.api.options import GraphOptimizationLevel, SessionOptions
    from turnout.api.session import InferenceSession

    initializers = {t.name for t in model.graph.initializer}
    inputs = [i.name for i in model.graph.input if i.name not in initializers]
    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    outputs = {o.name for o in exposed.graph.output}
    computed = [t for t in tensors if t not in inputs]
    types = _elem_types(model)
    for name in computed:
        if name not in outputs:
            exposed.graph.output.append(
                helper.make_tensor_value_info(name, types.get(name, TensorProto.FLOAT), None)
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
    ranges = {name: c.range() for name, c in collectors.items()}
    if options.get("CalibTensorRangeSymmetric"):  # [-max |x|, max |x|], onnxruntime's rule
        ranges = {name: (-max(-lo, hi), max(-lo, hi)) for name, (lo, hi) in ranges.items()}
    return ranges


class TensorData:
    """One tensor's calibration result, as onnxruntime's: `range_value` (lowest, highest)
    and the method's other fields (`avg`, `std`, ...) when given."""

    def __init__(self, **kwargs: Any) -> None:
        self.__dict__.update(kwargs)
        if "lowest" in kwargs and "highest" in kwargs:
            self.range_value = (np.float32(kwargs["lowest"]), np.float32(kwargs["highest"]))

    def __iter__(self) -> Iterator[Any]:  # `rmin, rmax = tensor_data` as onnxruntime's
        return iter(self.range_value)


class TensorsData:
    """Calibration results by tensor name (a mapping, as onnxruntime's)."""

    def __init__(self, calibration_method: CalibrationMethod, data: Mapping[str, Any]) -> None:
        self.calibration_method = calibration_method
        self.data = {
            name: v if isinstance(v, TensorData) else TensorData(lowest=v[0], highest=v[1])
            for name, v in data.items()
        }

    def __getitem__(self, name: str) -> TensorData:
        return self.data[name]

    def __contains__(self, name: object) -> bool:
        return name in self.data

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)

    def keys(self) -> Any:
        return self.data.keys()

    def values(self) -> Any:
        return self.data.values()

    def items(self) -> Any:
        return self.data.items()


class KnownRanges:
    """Ranges computed before (a TensorsData or {name: (min, max)}), given where a reader is:
    calibration then runs nothing."""

    def __init__(self, ranges: Mapping[str, Any]) -> None:
        self.ranges = {name: (float(lo), float(hi)) for name, (lo, hi) in ranges.items()}


class CalibraterBase:
    """onnxruntime's calibrator interface on turnout: `collect_data(reader)` runs the model on
    turnout over the reader's feeds (it may be called again with more data); `compute_data()`
    gives a TensorsData of every float tensor read or written by the calibrated op types."""

    def __init__(
        self,
        model: ModelInput,
        op_types_to_calibrate: Sequence[str] | None = None,
        method: CalibrationMethod = CalibrationMethod.MinMax,
        providers: Sequence[Any] | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        self.model = load_model(model)
        self.method = method
        self.providers = list(providers or ["CPUExecutionProvider"])
        self.options = {**_CALIBRATE_DEFAULTS, **(options or {})}
        self.tensors = _tensors_to_calibrate(self.model, op_types_to_calibrate)
        self._feeds: list[Mapping[str, np.ndarray]] = []

    def collect_data(self, data_reader: Any) -> None:
        self._feeds.extend(_feeds(data_reader))
        if not self._feeds:
            raise InvalidArgument("No data is collected.")

    def compute_data(self) -> TensorsData:
        ranges = collect_ranges(
            self.model, self.tensors, self._feeds, self.method, self.options, self.providers
        )
        return TensorsData(self.method, ranges)

    def clear_collected_data(self) -> None:
        self._feeds.clear()


class MinMaxCalibrater(CalibraterBase):
    pass


class EntropyCalibrater(CalibraterBase):
    pass


class PercentileCalibrater(CalibraterBase):
    pass


class DistributionCalibrater(CalibraterBase):
    pass


_FLOATS = (TensorProto.FLOAT, TensorProto.FLOAT16)  # the element types calibrated
_CALIBRATORS = {
    CalibrationMethod.MinMax: MinMaxCalibrater,
    CalibrationMethod.Entropy: EntropyCalibrater,
    CalibrationMethod.Percentile: PercentileCalibrater,
    CalibrationMethod.Distribution: DistributionCalibrater,
}
_CALIBRATE_DEFAULTS: dict[str, Any] = {
    "CalibMovingAverage": False,
    "CalibMovingAverageConstant": 0.01,
    "CalibPercentile": 99.999,
    "CalibNumBins": None,
    "CalibNumQuantizedBins": 128,
}
# create_calibrator's extra_options keys -> turnout's
_CREATE_OPTIONS = {
    "moving_average": "CalibMovingAverage",
    "averaging_constant": "CalibMovingAverageConstant",
    "num_bins": "CalibNumBins",
    "num_quantized_bins": "CalibNumQuantizedBins",
    "percentile": "CalibPercentile",
}


def _elem_types(model: onnx.ModelProto) -> dict[str, int]:
    """The element type of every value of `model`'s main graph that shape inference types."""
    from onnx import shape_inference

    inferred = shape_inference.infer_shapes(model)
    return {
        v.name: v.type.tensor_type.elem_type
        for v in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]
        if v.type.HasField("tensor_type") and v.type.tensor_type.elem_type
    }


def _tensors_to_calibrate(model: onnx.ModelProto, op_types: Sequence[str] | None) -> list[str]:
    types = _elem_types(model)
    initializers = {t.name for t in model.graph.initializer}
    names: dict[str, None] = {}  # in graph order, once each
    for node in model.graph.node:
        if op_types and node.op_type not in op_types:
            continue
        for name in [*node.input, *node.output]:
            if name and name not in initializers and types.get(name) in _FLOATS:
                names[name] = None
    return list(names)


def create_calibrator(
    model: ModelInput,
    op_types_to_calibrate: Sequence[str] | None = None,
    augmented_model_path: str = "augmented_model.onnx",
    calibrate_method: Any = CalibrationMethod.MinMax,
    use_external_data_format: bool = False,
    providers: Sequence[Any] | None = None,
    extra_options: Mapping[str, Any] | None = None,
) -> CalibraterBase:
    """A calibrator for `model` (path or ModelProto) by `calibrate_method`, running on turnout
    with `providers`. onnxruntime's augmented model is not written (turnout exposes the
    tensors to calibrate in memory); `extra_options` takes onnxruntime's keys
    (`moving_average`, `num_bins`, `percentile`, ...)."""
    from turnout.tools.quantization.types import check_enum

    method = check_enum(calibrate_method, CalibrationMethod, "calibrate_method")
    assert isinstance(method, CalibrationMethod)
    options = {_CREATE_OPTIONS.get(k, k): v for k, v in (extra_options or {}).items()}
    return _CALIBRATORS[method](model, op_types_to_calibrate, method, providers, options)
