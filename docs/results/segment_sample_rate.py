"""The rate `learntok segment` and `learntok sample` reach under online control (docs/rate.md,
"On `segment` and `sample`"): each command run as a user runs it, on the first 40,000 bytes of
each corpus's test split (fewer where the split is shorter), and the rate read from its --json.

    python docs/results/segment_sample_rate.py RUN --out docs/results/segment-sample-rate.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from provenance import git_commit

from learntok.run.config import load_config
from learntok.data.dataset import ByteData

SEGMENT_CORPORA = ("shakespeare", "kjv", "python-rst", "debref-fr", "debref-zh")
SAMPLE_CORPORA = ("shakespeare", "debref-fr")
RATES = (0.1, 0.2, 0.35)
TEXT_BYTES = 40_000


def test_text(corpus: str) -> str:
    """The first TEXT_BYTES of the corpus's test split, cut back to whole characters."""
    data = ByteData.from_config(load_config(preset="tiny", overrides=[f"data.source={corpus}"]).data)
    raw = b"\n".join(data.documents("test"))[:TEXT_BYTES]
    return raw.decode("utf-8", errors="ignore")


def learntok(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "learntok", *args], check=True, stdout=subprocess.DEVNULL)


def measure(run: str, tmp: Path) -> list[dict]:
    rows = []
    for corpus in SEGMENT_CORPORA:
        text = tmp / f"{corpus}.txt"
        text.write_text(test_text(corpus), encoding="utf-8")
        for rate in RATES:
            out = tmp / "segment.json"
            learntok(
                "segment", run, "--file", str(text), "--rate", f"{rate}", "--rate-mode", "online", "--json", str(out)
            )
            record = json.loads(out.read_text())
            rows.append(
                {
                    "command": "segment",
                    "corpus": corpus,
                    "bytes": len(text.read_bytes()),
                    "rate": rate,
                    "reached": record["boundary_rate"],
                }
            )
    for corpus in SAMPLE_CORPORA:
        prompt = (tmp / f"{corpus}.txt").read_bytes()[:200].decode("utf-8", errors="ignore")
        for rate in RATES:
            out = tmp / "sample.json"
            learntok(
                "sample",
                run,
                "--prompt",
                prompt,
                "--max-bytes",
                "1500",
                "--rate",
                f"{rate}",
                "--rate-mode",
                "online",
                "--seed",
                "0",
                "--json",
                str(out),
            )
            record = json.loads(out.read_text())
            rows.append(
                {"command": "sample", "corpus": corpus, "bytes": 1500, "rate": rate, "reached": record["boundary_rate"]}
            )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = measure(args.run, Path(tmp))
    record = {
        "command": f"python docs/results/segment_sample_rate.py {args.run} --out {args.out}",
        "commit": git_commit(),
        "seeds": [0],
        "run": args.run,
        "rows": rows,
    }
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    for r in rows:
        print(f"{r['command']:8} {r['corpus']:12} {r['rate']:<5} {r['reached']:.4f}")


if __name__ == "__main__":
    main()
