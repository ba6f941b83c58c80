"""The long fuzz run: `python fuzz/run.py --cases 10000 --provider numba --seed 1 --jobs 2
--report out.json`. Writes counts per outcome class and per op, and example findings; `--save DIR`
keeps every finding as DIR/<id>.onnx + .npz (replay one with `--replay DIR/<id>.onnx`); `--only I`
reruns case I of the seed and prints its record."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `fuzz` as a package

from fuzz.campaign import findings, rejudge, run_campaign, summarize
from fuzz.execute import FINDINGS, PROVIDERS
from fuzz.generate import FuzzCase, Generator
from fuzz.pool import Pool
from fuzz.seeds import load_seeds


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", type=int, default=1000, help="cases per provider")
    p.add_argument("--start", type=int, default=0, help="first case index")
    p.add_argument("--provider", action="append", help="cpu, numba, opencl or a full name")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per case")
    p.add_argument("--memory-mb", type=int, default=4096, help="RLIMIT_AS per worker")
    p.add_argument("--ops", help="comma-separated op types to start cases from")
    p.add_argument("--chain", type=float, default=0.3, help="probability of a 2-5 node chain")
    p.add_argument("--report", type=Path, help="JSON report (summary and every finding)")
    p.add_argument("--records", type=Path, help="every record as JSON lines (to re-summarize)")
    p.add_argument("--save", type=Path, help="folder to save each finding's model and inputs")
    p.add_argument("--summarize", type=Path, help="re-judge a --records file (known list)")
    p.add_argument("--only", type=int, help="run just this case index and print its record")
    p.add_argument("--replay", type=Path, help="run a saved case (x.onnx with x.npz)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    providers = [PROVIDERS.get(p, p) for p in (args.provider or ["cpu"])]
    if args.summarize is not None:
        lines = args.summarize.read_text().splitlines()
        return _report(args, [rejudge(json.loads(line)) for line in lines if line], 0.0)
    with Pool(args.jobs, args.timeout, args.memory_mb) as pool:
        missing = sorted(set(providers) - set(pool.providers()))
        if missing:
            print(f"not available: {', '.join(missing)}", file=sys.stderr)
            return 2
        if args.replay is not None:
            case = FuzzCase.load(args.replay)
            for _, provider, rec in pool.run([(case, p) for p in providers]):
                print(provider, json.dumps(rec, indent=1))
            return 0
        ops = set(args.ops.split(",")) if args.ops else None
        gen = Generator(load_seeds(), args.seed, args.chain, ops=ops)
        if args.only is not None:
            recs = run_campaign(pool, gen, providers, [args.only])
            print(json.dumps(recs, indent=1))
            return 0
        t0 = time.monotonic()
        counts: Counter[str] = Counter()
        sink = args.records.open("w") if args.records is not None else None

        def progress(case: FuzzCase, rec: dict[str, Any]) -> None:
            counts[rec["outcome"]] += 1
            if sink is not None:  # streamed: an interrupted run keeps what it did
                sink.write(json.dumps(rec, default=str) + "\n")
                sink.flush()
            n = sum(counts.values())
            finding = rec["outcome"] in FINDINGS or rec.get("vs_cpu") in FINDINGS
            if args.save is not None and finding:
                case.save(args.save, f"{case.id}-{rec['provider'][:5]}")
            if n % 500 == 0:
                rate = n / (time.monotonic() - t0)
                print(f"{n} results, {rate:.1f}/s: {dict(counts.most_common())}", flush=True)

        indices = range(args.start, args.start + args.cases)
        records = run_campaign(pool, gen, providers, indices, progress)
        if sink is not None:
            sink.close()
    return _report(args, records, time.monotonic() - t0)


def _report(args: argparse.Namespace, records: list[dict[str, Any]], seconds: float) -> int:
    summary = summarize(records)
    report = {
        "seed": args.seed,
        "cases": args.cases,
        "start": args.start,
        "seconds": round(seconds, 1),
        "summary": summary,
        "findings": findings(records),
    }
    if args.report is not None:
        args.report.write_text(json.dumps(report, indent=1, default=str))
    for provider, s in summary.items():
        print(f"{provider}: {s['cases']} cases {s['outcomes']}; vs CPU {s['vs_cpu']}")
        for key, g in list(s["findings"].items())[:40]:
            print(f"  {g['count']:5d} {key}: {g['examples'][0].get('detail', '')[:150]}")
    return 1 if report["findings"] else 0


if __name__ == "__main__":
    sys.exit(main())
