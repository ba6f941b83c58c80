"""Real onnxruntime applications, unchanged, on onnxruntime and on turnout: same outputs?

    python benchmarks/drop_in_apps.py [--apps magika,rapidocr] [--python PY] [--json FILE]

Each application (from PyPI, with its model inside its wheel: nothing is downloaded) runs a fixed
small workload twice, each time in a fresh subprocess: once on the installed onnxruntime, once
after `turnout.install_as_onnxruntime()`, the application's code unchanged. Their app-level
outputs (labels, scores, texts, boxes) are compared, and a table says what was compared, whether
it was the same (with the largest difference between numbers) and how long each took (`load`:
creating the application's sessions; `run`: the workload).

The applications are not turnout's dependencies: install them into a venv of their own, with
onnxruntime and turnout, and run this script with that venv's python (or pass it as --python):

    python3 -m venv /tmp/apps-venv
    /tmp/apps-venv/bin/pip install onnxruntime==1.32.0 magika rapidocr_onnxruntime rapidocr \\
        ddddocr nudenet piper-tts -e ./core
    /tmp/apps-venv/bin/pip install --no-deps scikit-image  # only for its astronaut.png
    /tmp/apps-venv/bin/python benchmarks/drop_in_apps.py

Inputs are made here (rendered text and captchas with Pillow's bundled font, byte strings, a
synthetic figure, sentences) except one photo: scikit-image's public-domain astronaut.png, read
from its data folder when scikit-image is installed (nudenet finds nothing in synthetic figures).

An application that is not installed is skipped, with the reason. Exit status: 0 when every
application that ran gave the same outputs on both (rows marked as known gaps aside), 1 otherwise.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import io
import json
import math
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

HERE = os.path.abspath(__file__)
TIMEOUT_S = 900  # one application on one runtime


# --------------------------------------------------------------------------- inputs (generated)


def _font(size: int) -> Any:
    from PIL import ImageFont

    return ImageFont.load_default(size=size)  # Pillow's bundled font: the same on every machine


def text_image(lines: list[str], size: int = 36, width: int = 520) -> Any:
    """Black text on white, one line per entry (a PIL RGB image)."""
    from PIL import Image, ImageDraw

    line_h = int(size * 1.5)
    img = Image.new("RGB", (width, 20 + line_h * len(lines)), "white")
    draw = ImageDraw.Draw(img)
    for i, line in enumerate(lines):
        draw.text((20, 10 + i * line_h), line, fill="black", font=_font(size))
    return img


def captcha_png(text: str, seed: int) -> bytes:
    """A small captcha-like image: tinted background, a few lines, slightly shifted characters."""
    import random

    from PIL import Image, ImageDraw

    rnd = random.Random(seed)
    img = Image.new("RGB", (150, 56), (rnd.randint(200, 255), rnd.randint(200, 255), 230))
    draw = ImageDraw.Draw(img)
    for _ in range(3):
        xy = [(rnd.randint(0, 150), rnd.randint(0, 56)) for _ in range(2)]
        draw.line(xy, fill=(rnd.randint(80, 160),) * 3, width=1)
    for i, ch in enumerate(text):
        draw.text((12 + 32 * i, 6 + rnd.randint(-3, 3)), ch, fill=(20, 20, 90), font=_font(38))
    return _png(img)


def scattered_chars_png() -> bytes:
    """A click-captcha-like picture: single characters at fixed places on a light background."""
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (320, 160), (235, 225, 205))
    draw = ImageDraw.Draw(img)
    for ch, xy in zip("AKX7Q", [(20, 20), (120, 70), (220, 15), (60, 100), (250, 95)]):
        draw.text(xy, ch, fill=(30, 30, 30), font=_font(40))
    return _png(img)


def figure_image() -> Any:
    """A synthetic picture for a detector: skin-toned shapes on a plain background (BGR array)."""
    import numpy as np
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (320, 320), (90, 120, 160))
    draw = ImageDraw.Draw(img)
    skin = (224, 172, 140)
    draw.ellipse((120, 20, 200, 110), fill=skin)  # head
    draw.ellipse((135, 50, 150, 60), fill=(40, 30, 30))
    draw.ellipse((170, 50, 185, 60), fill=(40, 30, 30))
    draw.arc((140, 70, 180, 95), 10, 170, fill=(150, 60, 60), width=3)
    draw.rectangle((110, 110, 210, 260), fill=skin)  # body
    draw.rectangle((60, 120, 110, 140), fill=skin)
    draw.rectangle((210, 120, 260, 140), fill=skin)
    return np.ascontiguousarray(np.asarray(img)[:, :, ::-1])


def _png(img: Any) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def magika_samples() -> dict[str, bytes]:
    import gzip
    import zipfile

    py = "\n".join(
        f"def f{i}(x):\n    '''Return x scaled.'''\n    return [v * {i} for v in x]\n"
        for i in range(12)
    )
    c = "#include <stdio.h>\n\n" + "\n".join(
        f'int g{i}(int a) {{\n    printf("%d\\n", a);\n    return a + {i};\n}}\n' for i in range(10)
    )
    js = json.dumps(
        {"items": [{"id": i, "name": f"item {i}", "tags": ["a", "b"]} for i in range(20)]}
    )
    html = (
        "<!DOCTYPE html>\n<html><head><title>t</title></head><body>\n"
        + "".join(f"<p class='x'>Paragraph {i}</p>\n" for i in range(20))
        + "</body></html>\n"
    )
    sh = "#!/bin/sh\nset -e\n" + "".join(
        f'echo "step {i}"\nls -l /tmp > /dev/null\n' for i in range(15)
    )
    csv = "id,name,value\n" + "".join(f"{i},name{i},{i * 3.5}\n" for i in range(40))
    md = "# Title\n\nSome *text* with a [link](http://example.org).\n\n" + "".join(
        f"- item {i}\n" for i in range(20)
    )
    zbuf = io.BytesIO()
    with zipfile.ZipFile(zbuf, "w") as z:
        z.writestr(zipfile.ZipInfo("a.txt", (2024, 1, 1, 0, 0, 0)), "hello " * 200)  # fixed time
    return {
        "python": py.encode(),
        "c": c.encode(),
        "json": js.encode(),
        "html": html.encode(),
        "shell": sh.encode(),
        "csv": csv.encode(),
        "markdown": md.encode(),
        "gzip": gzip.compress(b"turnout " * 300, mtime=0),
        "zip": zbuf.getvalue(),
        "random": bytes((i * 7919 + 13) % 251 for i in range(2048)),
    }


# --------------------------------------------------------------------------- the applications


@dataclass
class App:
    name: str
    dist: str  # the PyPI distribution (its version is reported)
    module: str  # what must be importable
    compared: str
    load: Callable[[], Any]  # builds the application's objects (its sessions)
    run: Callable[[Any], Any]  # the workload: returns JSON-able outputs
    known_gap: str = ""  # why turnout is expected to fail here (reported, not counted)


def _magika_load() -> Any:
    from magika import Magika

    return Magika()


def _magika_run(m: Any) -> Any:
    out = {}
    for name, data in magika_samples().items():
        r = m.identify_bytes(data)
        out[name] = {"dl": str(r.dl.label), "output": str(r.output.label), "score": r.score}
    return out


def _rapidocr_onnxruntime_load() -> Any:
    from rapidocr_onnxruntime import RapidOCR

    return RapidOCR()


def _ocr_image() -> Any:
    import numpy as np

    img = text_image(["Hello turnout 42", "ONNX drop-in test", "price: 3.14 EUR"])
    return np.ascontiguousarray(np.asarray(img)[:, :, ::-1])  # BGR, as cv2 reads it


def _rapidocr_onnxruntime_run(engine: Any) -> Any:
    result, _elapse = engine(_ocr_image())
    return [
        {"text": text, "score": float(score), "box": [[float(v) for v in p] for p in box]}
        for box, text, score in (result or [])
    ]


def _rapidocr_load() -> Any:
    import logging

    from rapidocr import RapidOCR

    engine = RapidOCR()
    logging.getLogger("RapidOCR").setLevel(logging.WARNING)
    return engine


def _rapidocr_run(engine: Any) -> Any:
    r = engine(_ocr_image())
    boxes = [] if r.boxes is None else r.boxes.tolist()
    return {
        "texts": list(r.txts or ()),
        "scores": [float(s) for s in (r.scores or ())],
        "boxes": boxes,
    }


def _ddddocr(**kw: Any) -> Any:
    import contextlib

    import ddddocr

    with contextlib.redirect_stdout(io.StringIO()):  # it prints a banner
        return ddddocr.DdddOcr(show_ad=False, **kw)


CAPTCHAS = [("a3b7", 1), ("K9xP", 2), ("7tq2", 3)]


def _ddddocr_ocr_run(ocr: Any) -> Any:
    import numpy as np

    out = []
    for text, seed in CAPTCHAS:
        r = ocr.classification(captcha_png(text, seed), probability=True)
        probs = np.asarray(r["probabilities"])  # (steps, 1, charset)
        out.append(
            {
                "drawn": text,
                "text": r["text"],
                "confidence": r["confidence"],
                "top1": probs.reshape(-1, probs.shape[-1]).max(axis=1),
            }
        )
    return out


def _ddddocr_det_run(det: Any) -> Any:
    return det.detection(scattered_chars_png())


def _nudenet_load() -> Any:
    from nudenet import NudeDetector

    return NudeDetector()


def astronaut() -> Any:
    """scikit-image's astronaut.png (public domain, a portrait), read from its installed data
    folder without importing scikit-image (`pip install --no-deps scikit-image` is enough)."""
    import numpy as np
    from PIL import Image

    spec = importlib.util.find_spec("skimage")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(next(iter(spec.submodule_search_locations)), "data", "astronaut.png")
    if not os.path.exists(path):
        return None
    return np.ascontiguousarray(np.asarray(Image.open(path).convert("RGB"))[:, :, ::-1])


def _nudenet_run(det: Any) -> Any:
    images = {"figure": figure_image()}
    portrait = astronaut()
    if portrait is not None:
        images["astronaut"] = portrait
    out = {name: det.detect(img) for name, img in images.items()}
    out["batch"] = det.detect_batch(list(images.values()), batch_size=2)
    return out


# Arabic and Hebrew sentences without diacritics (what piper-tts feeds its phonemizer)
ARABIC = ["ذهب الطالب إلى المدرسة في الصباح الباكر", "كتب الولد رسالة طويلة إلى صديقه"]
HEBREW = ["שלום עולם, הילד הלך לבית הספר בבוקר", "הספר נמצא על השולחן בחדר"]


def _tashkeel_load() -> Any:
    from piper.tashkeel import TashkeelDiacritizer

    return TashkeelDiacritizer()


def _tashkeel_run(d: Any) -> Any:
    return [d(text) for text in ARABIC] + [d(text, taskeen_threshold=0.8) for text in ARABIC]


def _nakdimon_load() -> Any:
    from piper.hebrew import NakdimonDiacritizer

    return NakdimonDiacritizer()


def _nakdimon_run(d: Any) -> Any:
    return [d(text) for text in HEBREW]


APPS = [
    App(
        "magika",
        "magika",
        "magika",
        "dl label, output label and score of 10 byte strings",
        _magika_load,
        _magika_run,
    ),
    App(
        "rapidocr_onnxruntime",
        "rapidocr_onnxruntime",
        "rapidocr_onnxruntime",
        "det+cls+rec on a 3-line rendered image: texts, scores, boxes",
        _rapidocr_onnxruntime_load,
        _rapidocr_onnxruntime_run,
    ),
    App(
        "rapidocr",
        "rapidocr",
        "rapidocr",
        "PP-OCRv6 det+cls+rec on a 3-line rendered image: texts, scores, boxes",
        _rapidocr_load,
        _rapidocr_run,
    ),
    App(
        "ddddocr (beta ocr)",
        "ddddocr",
        "ddddocr",
        "text, confidence and per-step top-1 probability of 3 captchas",
        lambda: _ddddocr(beta=True),
        _ddddocr_ocr_run,
    ),
    App(
        "ddddocr (det)",
        "ddddocr",
        "ddddocr",
        "character boxes in a click-captcha-like picture",
        lambda: _ddddocr(ocr=False, det=True),
        _ddddocr_det_run,
    ),
    App(
        "ddddocr (default ocr)",
        "ddddocr",
        "ddddocr",
        "text, confidence and per-step top-1 probability of 3 captchas",
        lambda: _ddddocr(),
        _ddddocr_ocr_run,
        known_gap="common_old.onnx's quantized CNN rounds last-bit Sigmoid differences "
        "into other DynamicQuantizeLinear codes",
    ),
    App(
        "nudenet",
        "nudenet",
        "nudenet",
        "detections (class, score, box) in a synthetic figure and skimage's astronaut.png, "
        "one by one and as a batch of 2",
        _nudenet_load,
        _nudenet_run,
    ),
    App(
        "piper-tts (tashkeel)",
        "piper-tts",
        "piper",
        "Arabic diacritized text of 2 sentences, with and without taskeen_threshold",
        _tashkeel_load,
        _tashkeel_run,
    ),
    App(
        "piper-tts (nakdimon)",
        "piper-tts",
        "piper",
        "Hebrew diacritized text (niqqud) of 2 sentences",
        _nakdimon_load,
        _nakdimon_run,
    ),
]
BY_NAME = {a.name: a for a in APPS}


# --------------------------------------------------------------------------- one run (child)


def child(app_name: str, runtime: str) -> dict[str, Any]:
    app = BY_NAME[app_name]
    res: dict[str, Any] = {"app": app.name, "runtime": runtime}
    if runtime == "turnout":
        import turnout

        turnout.install_as_onnxruntime()
        res["turnout_version"] = turnout.__version__
    import onnxruntime

    res["onnxruntime_version"] = onnxruntime.__version__
    res["session_class"] = (
        f"{onnxruntime.InferenceSession.__module__}.{onnxruntime.InferenceSession.__qualname__}"
    )
    res["version"] = importlib.metadata.version(app.dist)
    try:
        t0 = time.perf_counter()
        obj = app.load()
        t1 = time.perf_counter()
        res["outputs"] = _jsonable(app.run(obj))
        t2 = time.perf_counter()
        res["load_s"], res["run_s"] = t1 - t0, t2 - t1
    except BaseException as e:  # report it: the parent compares, it does not crash
        res["error"] = f"{type(e).__name__}: {e}"
        res["traceback"] = traceback.format_exc()
    return res


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if hasattr(x, "tolist"):  # numpy arrays and scalars
        return _jsonable(x.tolist())
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    return str(x)


def spawn(python: str, app: App, runtime: str) -> dict[str, Any]:
    cmd = [python, HERE, "--child", app.name, "--runtime", runtime]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {TIMEOUT_S} s"}
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("@@RESULT "):
            result: dict[str, Any] = json.loads(line[len("@@RESULT ") :])
            return result
    return {"error": f"exit status {p.returncode}, no result", "traceback": p.stderr[-3000:]}


# --------------------------------------------------------------------------- comparison


def compare(a: Any, b: Any, path: str = "") -> tuple[list[str], float]:
    """(differences other than float values, largest |a - b| over the floats)."""
    numbers = isinstance(a, (int, float)) and isinstance(b, (int, float))
    if numbers and (isinstance(a, float) or isinstance(b, float)):
        if math.isnan(a) and math.isnan(b):
            return [], 0.0
        return [], abs(float(a) - float(b))
    if type(a) is not type(b):
        return [f"{path}: {a!r} vs {b!r}"], 0.0
    if isinstance(a, dict):
        if a.keys() != b.keys():
            return [f"{path}: keys {sorted(a)} vs {sorted(b)}"], 0.0
        diffs, worst = [], 0.0
        for k in a:
            d, w = compare(a[k], b[k], f"{path}.{k}")
            diffs += d
            worst = max(worst, w)
        return diffs, worst
    if isinstance(a, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} items vs {len(b)}"], 0.0
        diffs, worst = [], 0.0
        for i, (x, y) in enumerate(zip(a, b)):
            d, w = compare(x, y, f"{path}[{i}]")
            diffs += d
            worst = max(worst, w)
        return diffs, worst
    return ([] if a == b else [f"{path}: {a!r} vs {b!r}"]), 0.0


@dataclass
class Row:
    app: str
    version: str = "-"
    compared: str = ""
    verdict: str = ""
    detail: str = ""
    ort_s: str = "-"
    turnout_s: str = "-"
    known_gap: str = ""
    ok: bool = True
    runs: dict[str, Any] = field(default_factory=dict)


def _times(r: dict[str, Any]) -> str:
    if "load_s" not in r:
        return "error"
    return f"{r['load_s']:.2f} + {r['run_s']:.2f}"


def _last_error_line(r: dict[str, Any]) -> str:
    """The innermost exception of a failed run (apps often wrap it in their own)."""
    lines = [ln for ln in str(r.get("traceback", r["error"])).splitlines() if ln.strip()]
    return (lines[-1] if lines else str(r["error"]))[:240]


def evaluate(app: App, ort: dict[str, Any], trn: dict[str, Any], tol: float) -> Row:
    row = Row(app.name, ort.get("version", "-"), app.compared, known_gap=app.known_gap)
    row.runs = {"onnxruntime": ort, "turnout": trn}
    row.ort_s, row.turnout_s = _times(ort), _times(trn)
    if "error" in ort:
        row.verdict, row.ok = "error on onnxruntime", False
        row.detail = _last_error_line(ort)
    elif "error" in trn:
        row.verdict, row.ok = "ERROR on turnout", False
        row.detail = _last_error_line(trn)
    elif not trn.get("session_class", "").startswith("turnout"):
        row.verdict, row.ok = "not on turnout", False
        row.detail = f"onnxruntime.InferenceSession was {trn.get('session_class')}"
    else:
        diffs, worst = compare(ort["outputs"], trn["outputs"])
        if diffs or worst > tol:
            row.verdict, row.ok = "DIFFERENT", False
            row.detail = "; ".join(diffs[:3]) or f"max diff {worst:.3g} > {tol:g}"
        else:
            row.verdict = "same"
            row.detail = f"max diff {worst:.2g}"
    if not row.ok and row.known_gap:
        row.verdict = f"known gap ({row.verdict})"
    return row


def table(rows: list[Row]) -> str:
    head = ["app", "version", "compared", "result", "detail", "onnxruntime s", "turnout s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r.app, r.version, r.compared, r.verdict, r.detail, r.ort_s, r.turnout_s]
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--apps", help="comma-separated names (default: all)")
    ap.add_argument("--python", default=sys.executable, help="the venv's python with the apps")
    ap.add_argument("--tol", type=float, default=1e-4, help="largest accepted |diff| of numbers")
    ap.add_argument("--json", help="write every run's result here")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--runtime", choices=["onnxruntime", "turnout"], help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.child:
        print("@@RESULT " + json.dumps(child(args.child, args.runtime)), flush=True)
        return 0

    names = args.apps.split(",") if args.apps else [a.name for a in APPS]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        ap.error(f"unknown apps {unknown}; known: {sorted(BY_NAME)}")
    probe = "import importlib.util,json,sys; print(json.dumps({m: importlib.util.find_spec(m) is not None for m in sys.argv[1:]}))"  # noqa: E501
    mods = sorted({"onnxruntime", "turnout", "PIL", *(BY_NAME[n].module for n in names)})
    found = json.loads(subprocess.check_output([args.python, "-c", probe, *mods], text=True))
    rows: list[Row] = []
    for name in names:
        app = BY_NAME[name]
        missing = [m for m in ("onnxruntime", "turnout", "PIL", app.module) if not found[m]]
        if missing:
            rows.append(
                Row(
                    app.name,
                    compared=app.compared,
                    verdict="skipped",
                    detail=f"not installed in {args.python}: {', '.join(missing)}",
                )
            )
            print(f"{app.name}: skipped ({rows[-1].detail})", file=sys.stderr)
            continue
        print(f"{app.name}: onnxruntime ...", file=sys.stderr, flush=True)
        ort = spawn(args.python, app, "onnxruntime")
        print(f"{app.name}: turnout ...", file=sys.stderr, flush=True)
        trn = spawn(args.python, app, "turnout")
        rows.append(evaluate(app, ort, trn, args.tol))
        print(f"{app.name}: {rows[-1].verdict} {rows[-1].detail}", file=sys.stderr, flush=True)
    print(table(rows))
    print("\ntimes: load (creating the app's sessions) + run (the workload), in seconds")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([r.__dict__ for r in rows], f, indent=1)
    return 0 if all(r.ok or r.known_gap for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
