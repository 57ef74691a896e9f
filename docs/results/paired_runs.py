"""Paired comparison of two runs on the same windows: per 255-byte window of the val/test split,
the bits-per-byte difference of run A from run B (seeded boundary samples); the corpus-level
difference and its standard error over windows (windows of one document are not independent:
read the s.e. as a lower bound). Both runs must share their data source.

    PYTHONPATH=. python docs/results/paired_runs.py RUN_A RUN_B [RUN_A2 RUN_B2 ...]
"""
import math
import sys

import torch

from learntok.checkpoint import load_run
from learntok.data import ByteData
from learntok.objective import token_ce
from learntok.runtime import isolated_rng


def per_window(run: str, data: ByteData, split: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(nats (W,), scored bytes (W,)) of each window of the split."""
    model, _ = load_run(run)
    nats, n = [], []
    with torch.no_grad(), isolated_rng(0, torch.device("cpu")):
        for x, _ in data.eval_batches(split, 16, 256):
            ce, mask = token_ce(model(x).logits, x)
            nats.append(ce.sum(1))
            n.append(mask.sum(1))
    return torch.cat(nats).double(), torch.cat(n).double()


def main(runs: list[str]) -> None:
    for a_run, b_run in zip(runs[::2], runs[1::2]):
        data = ByteData.from_config(load_run(a_run)[1].data)
        for split in ("val", "test"):
            a, n = per_window(a_run, data, split)
            b, _ = per_window(b_run, data, split)
            d = (a - b) / (math.log(2) * n.clamp(min=1))          # (W,) per-window bpb difference
            total = float((a.sum() - b.sum()) / (math.log(2) * n.sum()))
            bpb_a, bpb_b = (float(v.sum() / (math.log(2) * n.sum())) for v in (a, b))
            print(f"{split}: {a_run} {bpb_a:.4f} - {b_run} {bpb_b:.4f} = {total:+.4f} "
                  f"+- {float(d.std() / math.sqrt(len(d))):.4f} ({len(d)} windows)", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
