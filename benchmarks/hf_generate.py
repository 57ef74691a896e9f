"""`transformers`' generate() on a learntok model against learntok's own cached decoding, side by
side in one process: greedy bytes from the shipped `tiny-shakespeare`, the same prompt, at each
length (50 and 1,000 new bytes by default), (a) LearntokForCausalLM.generate with its cache
(LearntokCache), (b) AUNet.generate (native, cached), (c) generate(use_cache=False), which reads
the whole prefix at every byte. Each is timed `--repeats` times, interleaved, after a warm-up; the
median is reported, and the ratios a / b (goal: at most 1.2) and c / b. The outputs must be the
same bytes (checked).

    python benchmarks/hf_generate.py [--lengths 50,1000] [--repeats 3] [--threads 1] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time
from pathlib import Path

import torch

from learntok.hf import LearntokByteTokenizer, LearntokForCausalLM
from learntok.model.aunet import AUNet

PROMPT = "ROMEO: "


def timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lengths", default="50,1000")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--no-recompute-above", type=int, default=200, help="skip (c) beyond this length (it is quadratic)")
    p.add_argument("--json")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    tok = LearntokByteTokenizer()
    hf = LearntokForCausalLM.from_pretrained("tiny-shakespeare")
    native = AUNet.from_pretrained("tiny-shakespeare").eval()
    ids = tok(PROMPT, return_tensors="pt")
    n_prompt = ids["input_ids"].shape[1]
    runs = {
        "hf_cached": lambda n: hf.generate(**ids, max_new_tokens=n, do_sample=False, min_new_tokens=n),
        "native": lambda n: native.generate(PROMPT, max_bytes=n, temperature=0, stop_at_eos=False),
        "hf_recompute": lambda n: hf.generate(
            **ids, max_new_tokens=n, do_sample=False, min_new_tokens=n, use_cache=False
        ),
    }
    runs["hf_cached"](8), runs["native"](8)  # warm-up
    rows = []
    for n in map(int, a.lengths.split(",")):
        names = [k for k in runs if k != "hf_recompute" or n <= a.no_recompute_above]
        times, outs = {k: [] for k in names}, {}
        for _ in range(a.repeats):
            for k in names:
                t, outs[k] = timed(lambda: runs[k](n))
                times[k].append(t)
        text = {k: (bytes(outs[k][0]) if k == "native" else tok.decode(outs[k][0][n_prompt:]).encode()) for k in names}
        same = len({v for v in text.values()}) == 1
        med = {k: statistics.median(v) for k, v in times.items()}
        row = {
            "new_bytes": n,
            "seconds": med,
            "same_bytes": same,
            "hf_cached_over_native": med["hf_cached"] / med["native"],
        }
        if "hf_recompute" in med:
            row["recompute_over_native"] = med["hf_recompute"] / med["native"]
        rows.append(row)
        print(json.dumps(row))
    if a.json:
        args = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(a).items() if k != "json" and v is not None)
        record = {
            "command": f"python benchmarks/hf_generate.py {args} --json {a.json}",
            "commit": commit(),
            "seeds": "not recorded: greedy decoding draws nothing",
            "machine": f"{torch.get_num_threads()} thread(s), torch {torch.__version__}",
            "rows": rows,
        }
        with open(a.json, "w") as f:
            json.dump(record, f, indent=2)


def commit() -> str:
    out = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=Path(__file__).parent
    )
    return out.stdout.strip() or "not recorded: not a git checkout"


if __name__ == "__main__":
    main()
