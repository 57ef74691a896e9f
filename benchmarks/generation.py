"""Generation speed: cached incremental decoding against recomputing the full forward per byte.

For each context length C (256, 1024, 4096 bytes of real prose): prefill C bytes, then make
N bytes (a) with the caches (`prefill` + `decode_step`) and (b) the way the paper's code does,
re-running the full forward on the whole sequence for every new byte (boundaries re-decided by
the strategy each time). Reports bytes/s of both, their ratio (goal: >= 20x at 1024), the
prefill time, the cache size and the peak memory of each phase (prefill, cached decoding,
recomputation).

    python benchmarks/generation.py [--contexts 256,1024,4096] [--new-bytes 64] [--full-bytes 64,32,8]
                                    [--threads 1] [--device cpu] [--json OUT]

Peak memory: torch.cuda.max_memory_allocated on CUDA; on CPU the growth of the process's peak
resident set (VmHWM, reset before each phase through /proc/self/clear_refs); tracemalloc
would not see tensor storage, which torch allocates outside Python's allocator.
The model is the `tiny` preset's shape (ModelConfig defaults: width 128, 4 heads, 1-2-1 layers,
byte window 64), learned policy w = 8, at initialisation (rate near rho* = 0.2): speed does not
depend on the weights, only on the boundary rate.
"""

from __future__ import annotations

import argparse
import gzip
import json
import time
from pathlib import Path

import torch

from learntok import AUNet, ModelConfig
from learntok.data import encode
from learntok.model.generate import decode_step, prefill, sample_next

CORPUS = Path(__file__).resolve().parents[1] / "learntok" / "corpora" / "shakespeare.jsonl.gz"


def prose(n: int) -> bytes:
    with gzip.open(CORPUS, "rt", encoding="utf-8") as f:
        text = json.loads(f.readline())["text"].encode("utf-8")
    return (text * (n // len(text) + 1))[:n]


class Measure:
    """Wall time (s) and peak memory (bytes above the starting point) of a block, synchronised on CUDA."""

    def __init__(self, device: torch.device):
        self.device, self.peak, self.seconds = device, 0, 0.0

    def __enter__(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.start = torch.cuda.memory_allocated(self.device)
        else:
            Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
            self.start = self._status("VmRSS")
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.peak = torch.cuda.max_memory_allocated(self.device) - self.start
        else:
            self.peak = self._status("VmHWM") - self.start
        self.seconds = time.perf_counter() - self.t0

    @staticmethod
    def _status(key: str) -> int:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
        raise RuntimeError(f"{key} not in /proc/self/status")


@torch.no_grad()
def cached(model, x: torch.Tensor, n: int) -> dict:
    with Measure(x.device) as pre:
        state, logits, _ = prefill(model, x)
    with Measure(x.device) as dec:
        for _ in range(n):
            logits, _ = decode_step(model, state, sample_next(logits))
    return {
        "bytes_per_s": n / dec.seconds,
        "prefill_s": pre.seconds,
        "cache_mib": state.cache.nbytes() / 2**20,
        "peak_mib": dec.peak / 2**20,
        "prefill_peak_mib": pre.peak / 2**20,
    }


@torch.no_grad()
def recompute(model, x: torch.Tensor, n: int) -> dict:
    with Measure(x.device) as m:
        for _ in range(n):
            nxt = sample_next(model(x).logits[:, -1])
            x = torch.cat([x, nxt[:, None]], dim=1)
    return {"bytes_per_s": n / m.seconds, "peak_mib": m.peak / 2**20}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--contexts", default="256,1024,4096")
    ap.add_argument("--new-bytes", type=int, default=64, help="bytes made with the caches at each context")
    ap.add_argument("--full-bytes", default="64,32,8", help="bytes made by full recomputation, per context")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (both paths alike)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = AUNet(ModelConfig(boundary="learned", strategy={"window": 8})).to(device).eval()
    contexts = [int(c) for c in args.contexts.split(",")]
    full_bytes = [int(c) for c in args.full_bytes.split(",")]
    cached(model, encode(prose(64)).unsqueeze(0).to(device), 8)  # warm-up
    rows = []
    for ctx, nf in zip(contexts, full_bytes, strict=True):
        x = encode(prose(ctx - 1)).unsqueeze(0).to(device)  # (1, ctx) with BOS
        torch.manual_seed(1)
        c = cached(model, x, args.new_bytes)
        torch.manual_seed(1)
        f = recompute(model, x, nf)
        rows.append({"context": ctx, "cached": c, "recompute": f, "speedup": c["bytes_per_s"] / f["bytes_per_s"]})
    print(f"model {model.num_params() / 1e6:.2f}M params, {device}, {torch.get_num_threads()} thread(s)")
    print(
        "| context | cached bytes/s | recompute bytes/s | speed-up | prefill s | cache MiB | peak MiB: prefill | "
        "peak MiB: cached decoding | peak MiB: recompute |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        c, f = r["cached"], r["recompute"]
        print(
            f"| {r['context']} | {c['bytes_per_s']:.0f} | {f['bytes_per_s']:.1f} | {r['speedup']:.0f}x | "
            f"{c['prefill_s']:.2f} | {c['cache_mib']:.2f} | {c['prefill_peak_mib']:.1f} | {c['peak_mib']:.2f} | "
            f"{f['peak_mib']:.1f} |"
        )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {"device": str(device), "threads": torch.get_num_threads(), "params": model.num_params(), "rows": rows},
                indent=2,
            )
            + "\n"
        )


if __name__ == "__main__":
    main()
