"""Reviewed differences: findings the fuzzer keeps seeing that are not turnout bugs to fix.

Each entry says why. An entry matches a result when its op is one of the case's ops, the class
matches (against onnxruntime: `outcome`; against turnout's CPU provider: `vs_cpu`), and its
regexes match the detail, the mutations and the input dtypes.

Two kinds: `difference` (reviewed: not turnout's bug, or undefined behaviour) and `bug` (an open
turnout bug with a corpus entry, tests/fuzz/corpus, or one being fixed elsewhere). A bug entry
keeps the seeded CI campaign green while the bug is open; the corpus xfail is what flips when it
is fixed, and `fuzz/run.py` lists entries no result used, so both lists shrink.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["KNOWN", "Known", "match_known"]


@dataclass(frozen=True)
class Known:
    op: str  # "*": any op
    outcome: str
    reason: str
    against: str = "ort"  # "ort" (the outcome field), "cpu" (vs_cpu) or "any"
    providers: tuple[str, ...] = ()  # empty: every provider
    detail: str = ""  # regex searched in the detail
    mutation: str = ""  # regex searched in the case's mutations, joined by spaces
    dtype: str = ""  # regex one of the case's input dtypes must match
    kind: str = "difference"  # or "bug"
    reference: str = ""  # required class of turnout against onnx.reference (`vs_reference`)

    def matches(self, rec: Mapping[str, Any], against: str = "ort") -> bool:
        """Whether this entry explains `rec`'s outcome against "ort" or against "cpu"."""
        if self.against not in (against, "any"):
            return False
        field, detail = ("outcome", "detail") if against == "ort" else ("vs_cpu", "vs_cpu_detail")
        if rec.get(field) != self.outcome or self.op not in ("*", *rec.get("ops", ())):
            return False
        if self.dtype and not any(re.fullmatch(self.dtype, d) for d in rec.get("dtypes", ())):
            return False
        if self.reference and rec.get("vs_reference") != self.reference:
            return False
        if self.providers and rec.get("provider") not in self.providers:
            return False
        if self.detail and not re.search(self.detail, str(rec.get(detail, ""))):
            return False
        return not self.mutation or bool(
            re.search(self.mutation, " ".join(rec.get("mutations", ())))
        )


_NAN = r"NaN on one side"
_SPECIALS = r"specials"

KNOWN: Sequence[Known] = (
    # ---- onnxruntime's own failures and documented deviations
    Known(
        "*",
        "crash",
        "onnxruntime itself aborts (C++ assertion) on this invalid model",
        detail="^in ort:",
    ),
    Known("*", "hang", "onnxruntime itself hangs on this model", detail="^in ort:"),
    *(
        Known(
            rnn,
            "mismatch",
            "an input_size of 0 (X and W shrunk to an empty last dim): onnxruntime's GEMM over an "
            "empty dimension leaves its output unwritten, so Y_h/Y_c hold whatever memory held "
            "(NaN in one fresh CI process, zeros when rerun); turnout and onnx.reference give the "
            "empty product's 0",
            detail=_NAN,
            mutation=r"shrink:0",
            reference="ok",
        )
        for rnn in ("LSTM", "GRU", "RNN")
    ),
    Known(
        "Attention",
        "mismatch",
        "ORT writes masked positions of qk_matmul_output (output 3) as -FLT_MAX, the spec and "
        "onnx.reference as -inf",
        detail="^output 3:",
    ),
    Known(
        "Squeeze",
        "mismatch",
        "an empty `axes` tensor: ORT squeezes every 1-dim as if axes were absent, onnx.reference "
        "squeezes none",
        detail="shape",
    ),
    Known(
        "ConvTranspose",
        "mismatch",
        "auto_pad SAME_* output size: ORT differs from the spec's in*stride, onnx.reference agrees "
        "with turnout",
        detail="shape",
    ),
    Known(
        "MaxUnpool",
        "mismatch",
        "the node test's own inputs, unmutated: turnout gives the test's expected output, ORT "
        "scatters differently",
    ),
    Known(
        "MaxPool",
        "mismatch",
        "auto_pad SAME_* with dilations: ORT's output size is not the spec's ceil(in/stride); "
        "onnx.reference agrees with turnout",
        detail="shape",
        mutation="auto_pad|dilations",
    ),
    Known(
        "LpPool",
        "mismatch",
        "auto_pad SAME_* with dilations: ORT's output size is not the spec's ceil(in/stride); "
        "onnx.reference agrees with turnout",
        detail="shape",
        mutation="auto_pad|dilations",
    ),
    Known(
        "ReduceLogSumExp",
        "mismatch",
        "ORT sums exp(x) without the max-shift and overflows to inf for |x| > ~88 (float32) or "
        "~11 (float16); onnx.reference agrees with turnout",
        detail="inf",
    ),
    Known(
        "ReduceMean",
        "mismatch",
        "mean over an empty axis: 0/0 is NaN in onnx.reference and turnout, ORT returns 0",
        mutation="shrink:0",
    ),
    Known(
        "Resize",
        "mismatch",
        "integer outputs of linear/cubic Resize: ORT rounds the interpolated value differently; "
        "onnx.reference agrees with turnout",
        dtype="u?int.*",
    ),
    Known(
        "Attention",
        "mismatch",
        "float16: ORT keeps float32 inside; float16 logits of |x| ~ 100 amplify rounding in exp",
        dtype="float16",
    ),
    Known(
        "Attention",
        "mismatch",
        "float16: ORT keeps float32 inside; float16 logits of |x| ~ 100 amplify rounding in exp",
        against="cpu",
        dtype="float16",
    ),
    Known(
        "Attention",
        "mismatch",
        "a query whose keys are all masked: softmax over all -inf is NaN (spec, onnx.reference, "
        "turnout), ORT returns a finite row",
        detail=_NAN,
    ),
    Known(
        "SplitToSequence",
        "mismatch",
        "an empty input split by a size larger than the axis: ORT returns no chunk, onnx.reference "
        "and turnout one empty chunk",
        mutation="shrink:0",
    ),
    # ---- float rounding that the tolerance cannot cover
    *(
        Known(
            op,
            "mismatch",
            "a huge argument (sinh of 16 = 4e6): one ulp of it changes sin/cos completely; a fused "
            "kernel rounds the intermediate differently",
            against=against,
            providers=("OpenCLExecutionProvider", "NumbaExecutionProvider"),
        )
        for op in ("Sin", "Cos")
        for against in ("ort", "cpu")
    ),
    *(
        Known(
            op,
            "mismatch",
            "numba sums float32 squares in float64: 1e30 inputs stay finite where ORT and CPU "
            "overflow to inf (numba is the more accurate one)",
            against="any",
            providers=("NumbaExecutionProvider",),
            mutation=_SPECIALS,
        )
        for op in ("ReduceL2", "ReduceSumSquare", "LRN", "LayerNormalization", "RMSNormalization")
    ),
    Known(
        "LayerNormalization",
        "mismatch",
        "normalizing over an empty axis (ORT rejects it): mean and variance of nothing",
        against="cpu",
        mutation="shrink:0",
    ),
    Known(
        "Attention",
        "mismatch",
        "is_causal / left_window_size / nonpad_kv_seqlen / integer masks combined: ORT differs "
        "from onnx.reference, which agrees with turnout",
        reference="ok",
    ),
    Known(
        "LRN",
        "mismatch",
        "large sums of squares (values ~1e3, chained): ORT gives NaN where onnx.reference and "
        "turnout stay finite",
        reference="ok",
    ),
    Known(
        "CausalConvWithState",
        "mismatch",
        "NaN/inf through float16 silu chains: ORT differs from onnx.reference, which agrees "
        "with turnout",
        reference="ok",
        mutation=_SPECIALS,
    ),
    # ---- undefined inputs: every runtime returns something different
    Known("Clip", "mismatch", "a NaN min or max bound", against="any", mutation=_SPECIALS),
    *(
        Known(
            op,
            "mismatch",
            "+inf in a row: x - max(x) = inf - inf is NaN for the whole row in numpy and "
            "onnx.reference; ORT gives -inf for the finite entries",
            against="any",
            mutation=_SPECIALS,
        )
        for op in ("Softmax", "LogSoftmax")
    ),
    Known(
        "DynamicQuantizeLinear",
        "mismatch",
        "+-inf input: the scale is inf and the zero point NaN cast to uint8, undefined",
        against="any",
        mutation=_SPECIALS,
    ),
    Known(
        "ReduceMean",
        "mismatch",
        "integer mean: the int32 sum overflows (ORT) or not (numpy widens)",
        against="any",
        dtype="u?int(8|16|32)",
    ),
    Known(
        "GridSample",
        "mismatch",
        "NaN or 1e30 sampling coordinates: the pixel they round to is undefined",
        mutation=_SPECIALS,
    ),
    Known("ReduceL1", "mismatch", "integer overflow (|INT64_MIN|)", dtype="u?int.*"),
    Known("ReduceL2", "mismatch", "integer overflow of x*x", dtype="u?int.*"),
    Known("ReduceSumSquare", "mismatch", "integer overflow of x*x", dtype="u?int.*"),
    Known("Dropout", "mismatch", "training-mode Dropout is random by definition"),
    Known("Dropout", "mismatch", "training-mode Dropout is random by definition", against="cpu"),
    Known("Celu", "mismatch", "alpha = 0 divides by zero: x/alpha is undefined", mutation="alpha"),
    Known(
        "NegativeLogLikelihoodLoss",
        "mismatch",
        "a target outside [0, C) that is not ignore_index: undefined, runtimes index differently",
        mutation="ignore_index|ints",
    ),
    Known(
        "SoftmaxCrossEntropyLoss",
        "mismatch",
        "a target outside [0, C) that is not ignore_index: undefined, runtimes index differently",
        mutation="ignore_index|ints",
    ),
    Known(
        "TopK",
        "mismatch",
        "sorted=0 leaves the order of the k results unspecified",
        mutation="sorted",
    ),
    Known(
        "Shrink",
        "mismatch",
        "integer Shrink with a fractional bias: rounding and wrap-around are "
        "implementation-defined",
        against="any",
        dtype="u?int.*",
    ),
    Known(
        "Pow",
        "mismatch",
        "integer Pow overflows: wrap-around differs (ORT goes through double)",
        against="any",
        dtype="u?int.*",
    ),
    *(
        Known(
            op,
            "mismatch",
            "a float out of the integer type's range (negative to unsigned, NaN, 1e30): undefined "
            "in C and OpenCL; numpy and ORT wrap, the OpenCL kernel saturates",
            against="any",
            providers=("OpenCLExecutionProvider",),
        )
        for op in ("Cast", "CastLike")
    ),
    Known(
        "BitShift",
        "mismatch",
        "shift counts >= the bit width are undefined in C++ (ORT) and numpy",
        against="any",
    ),
    Known(
        "BitCast",
        "mismatch",
        "bit patterns of NaN and out-of-range floats reinterpreted as ints",
        against="any",
    ),
    # ---- NaN and infinity propagation: IEEE leaves the order of operations free
    Known(
        "Hardmax",
        "mismatch",
        "argmax over NaN: which index wins is implementation-defined",
        against="any",
        mutation=_SPECIALS,
    ),
    Known(
        "Unique",
        "mismatch",
        "NaN: numpy's unique merges NaNs, ORT keeps each one",
        mutation=_SPECIALS,
    ),
    Known(
        "Resize",
        "mismatch",
        "NaN/inf pixels: turnout, like onnx.reference, filters with dense weight matrices, so a "
        "NaN under a zero weight spreads along the axis; ORT reads only the taps in the footprint",
        mutation=_SPECIALS,
    ),
    Known(
        "DFT",
        "mismatch",
        "NaN/inf input: an FFT spreads it over other bins than a direct sum",
        mutation=_SPECIALS,
    ),
    Known(
        "STFT",
        "mismatch",
        "NaN/inf input: an FFT spreads it over other bins than a direct sum",
        mutation=_SPECIALS,
    ),
    Known(
        "ReduceLogSumExp",
        "mismatch",
        "inf input: the max-shift gives inf - inf = NaN in one order, inf in another",
        mutation=_SPECIALS,
    ),
    *(
        Known(
            op,
            "mismatch",
            "1e30/inf inputs: sums of squares overflow; whether NaN, 0 or inf comes out depends on "
            "the formula and the order",
            against="any",
            detail=_NAN,
            mutation=_SPECIALS,
        )
        for op in ("LayerNormalization", "RMSNormalization", "LRN", "RNN", "GRU", "LSTM")
    ),
    *(
        Known(
            op,
            "mismatch",
            "NaN in a max/min reduction: numpy and onnx.reference propagate it, ORT may drop it "
            "(the MaxPool NaN fix in progress decides turnout's rule; revisit then)",
            against="any",
            mutation=_SPECIALS,
        )
        for op in ("ReduceMax", "ReduceMin", "GlobalMaxPool", "ScatterND", "ScatterElements")
    ),
    Known(
        "Conv",
        "mismatch",
        "a NaN weight over a padded position: ORT, onnx.reference and CPU multiply the zero pad "
        "(NaN), the OpenCL kernel skips padded taps",
        against="any",
        detail=_NAN,
        mutation=_SPECIALS,
        providers=("OpenCLExecutionProvider",),
    ),
    # ---- open bugs fixed elsewhere right now (issue tracker), kept so CI stays green meanwhile
    Known("MaxPool", "mismatch", "MaxPool NaN handling (being fixed)", detail=_NAN, kind="bug"),
    Known(
        "AveragePool",
        "mismatch",
        "AveragePool auto_pad VALID with ceil_mode output shape (being fixed)",
        detail="shape",
        kind="bug",
    ),
    Known(
        "ReduceSum",
        "mismatch",
        "Reduce* noop_with_empty_axes (being fixed)",
        mutation="noop_with_empty_axes",
        kind="bug",
    ),
    *(
        Known(
            op,
            "mismatch",
            "OpenCL NaN in HardSigmoid/Celu (being fixed; Gelu looks like the same cause)",
            against=against,
            detail=_NAN,
            providers=("OpenCLExecutionProvider",),
            kind="bug",
        )
        for op in ("HardSigmoid", "Celu", "Gelu")
        for against in ("ort", "cpu")
    ),
    # ---- open bugs with a corpus entry (tests/fuzz/corpus/index.json)
)


def match_known(rec: Mapping[str, Any], against: str = "ort") -> Known | None:
    """The first reviewed difference that explains `rec` (against "ort" or "cpu")."""
    return next((k for k in KNOWN if k.matches(rec, against)), None)
