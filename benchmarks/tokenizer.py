"""Tokenizer speed and memory: `learntok.Tokenizer.encode` on 0.25, 0.5 and 1 MB of prose.

Each size runs in a child process of its own: load the model, encode 40 KB (warm-up: a full
batch, so the forward's working memory is in the baseline), then encode the text once as one
str and once as a list of lines. Reports seconds (wall and CPU), bytes/s, chunks/s and the
growth of the process's peak resident set over the warm-up (the Encoding holds every chunk:
linear in the input is the goal; the forward's own memory is bounded by the batch). The model is the `tiny` preset's shape (width 128, 4 heads, 1-2-1 layers, w = 1) at
initialisation, sampled boundaries at its rate (near 0.2): speed does not depend on the weights,
only on the boundary rate.

    python benchmarks/tokenizer.py [--sizes 0.25,0.5,1] [--threads 1] [--json OUT]
"""

from __future__ import annotations

import argparse
import gzip
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch

from learntok import AUNet, Tokenizer
from learntok.run.config import load_config

CORPUS = Path(__file__).resolve().parents[1] / "learntok" / "corpora" / "shakespeare.jsonl.gz"


def prose(n: int) -> str:
    with gzip.open(CORPUS, "rt", encoding="utf-8") as f:
        text = "".join(json.loads(line)["text"] for _, line in zip(range(3), f))
    return (text * (n // len(text) + 1))[:n]


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(n_bytes: int, threads: int) -> dict:
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    tok = Tokenizer(AUNet(load_config("tiny").model).eval())
    text = prose(n_bytes)
    tok.encode(prose(40_000), greedy=False, seed=0)  # warm-up: a full batch's working memory
    base = peak_mib()
    start, cpu = time.perf_counter(), time.process_time()
    enc = tok.encode(text, greedy=False, seed=0)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    grown = peak_mib() - base
    lines = [line + "\n" for line in text.split("\n")]
    start = time.perf_counter()
    encs = tok.encode(lines, greedy=False, seed=0)
    lines_seconds = time.perf_counter() - start
    assert tok.decode(enc) == text and "".join(tok.decode(e) for e in encs) == "".join(lines)
    return {
        "MB": n_bytes / 1e6,
        "seconds": seconds,
        "cpu_seconds": cpu,
        "bytes_per_s": n_bytes / seconds,
        "chunks": len(enc),
        "chunks_per_s": len(enc) / seconds,
        "peak_growth_MiB": grown,
        "lines": len(lines),
        "lines_seconds": lines_seconds,
        "lines_chunks_per_s": sum(map(len, encs)) / lines_seconds,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="0.25,0.5,1", help="MB of text, comma-separated")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", help="write the rows to this JSON file")
    p.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.threads)))
        return
    rows = []
    for mb in map(float, args.sizes.split(",")):
        r = subprocess.run(
            [sys.executable, __file__, "--child", str(int(mb * 1e6)), "--threads", str(args.threads)],
            capture_output=True,
            text=True,
            check=True,
        )
        rows.append(json.loads(r.stdout))
    print("| MB | seconds | CPU seconds | bytes/s | chunks | chunks/s | peak growth MiB | lines | lines: chunks/s |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(
            f"| {r['MB']:.2f} | {r['seconds']:.2f} | {r['cpu_seconds']:.2f} | {r['bytes_per_s']:,.0f} | {r['chunks']:,} "
            f"| {r['chunks_per_s']:,.0f} "
            f"| {r['peak_growth_MiB']:.1f} | {r['lines']:,} | {r['lines_chunks_per_s']:,.0f} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
