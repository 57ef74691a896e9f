"""How much a tokenizer-guided strategy's boundaries depend on bytes it has not read yet.

For every held-out window x and every cut t, the decisions a[<= t] computed from the whole
window are compared with those computed when the bytes after t are (a) removed (replaced by
PAD, which ends the text run) and (b) changed (replaced by the bytes of another window).
Reported, over real bytes:

- final_at_t:   P(a[t] differs from the decision made from x[<= t] alone): how often the newest
                decision needs the future;
- changed_le_t: the fraction of all decisions at bytes <= t that change when the bytes after t
                are removed / changed (averaged over t);
- lookahead:    per decision a[s], the number of bytes after s it needs before it is final
                (the largest d such that cutting at s + d - 1 still changes it): mean, p99, max.

A causal rule (bpe-causal) gives 0 everywhere; the script checks it as a control.

With --bpb, what the leak is worth to a trained model: its bits per byte on the val and test
splits with its own decisions against the same model given the decisions made from the prefix
alone (a[t] as if the window ended at t: the same tokenizer, no lookahead), on the same windows.
The model was trained with the leaky decisions, so the difference bounds from above what the
leak buys it (it also pays for the mismatch); training the causal rule is the other side.

    python benchmarks/bpe_lookahead.py RUN_DIR [RUN_DIR ...] [--windows 64] [--seq-len 256] [--bpb]
"""

from __future__ import annotations

import argparse
import json
import math

import numpy as np
import torch

from learntok.run.checkpoint import load_run
from learntok.data import ByteData
from learntok.data.vocab import PAD
from learntok.model.objective import token_ce


def cut_batches(x: torch.Tensor, other: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x, other (T,) -> (T, T) windows whose row t keeps x[<= t] and has the bytes after t
    removed (PAD) or changed (other's bytes)."""
    T = x.numel()
    keep = torch.arange(T)[None, :] <= torch.arange(T)[:, None]  # (T, T) row t keeps positions <= t
    removed = torch.where(keep, x[None, :], torch.full_like(x[None, :], PAD))
    changed = torch.where(keep, x[None, :], other[None, :])
    return removed, changed


def lookahead_stats(boundaries, windows: torch.Tensor) -> dict:
    """boundaries: (B, T) ids -> (B, T) float decisions. windows (N, T) held-out windows."""
    final_at_t, changed_removed, changed_changed, lookahead = [], [], [], []
    N, T = windows.shape
    for i in range(N):
        x, other = windows[i], windows[(i + 1) % N]
        real = (x < 256).numpy()
        full = boundaries(x[None])[0].numpy()  # (T,)
        removed, changed = cut_batches(x, other)
        a_rm, a_ch = boundaries(removed).numpy(), boundaries(changed).numpy()  # (T, T): row t = cut at t
        le = np.tril(np.ones((T, T), dtype=bool))  # (T, T) positions <= t
        diff_rm = (a_rm != full[None, :]) & le
        diff_ch = (a_ch != full[None, :]) & le
        for t in range(1, T - 1):  # cuts with a future to hide
            if real[t]:
                final_at_t.append(diff_rm[t, t])
                changed_removed.append(diff_rm[t, 1 : t + 1][real[1 : t + 1]].mean())
                changed_changed.append(diff_ch[t, 1 : t + 1][real[1 : t + 1]].mean())
        for s in range(1, T - 1):  # bytes after s needed by a[s]
            if real[s]:
                cuts = np.flatnonzero(diff_rm[s : T - 1, s])  # cuts t >= s that still change a[s]
                lookahead.append(0 if cuts.size == 0 else int(cuts.max()) + 1)
    la = np.array(lookahead)
    return {
        "final_at_t": float(np.mean(final_at_t)),
        "changed_le_t_removed": float(np.mean(changed_removed)),
        "changed_le_t_changed": float(np.mean(changed_changed)),
        "lookahead_mean": float(la.mean()),
        "lookahead_p99": float(np.percentile(la, 99)),
        "lookahead_max": int(la.max()),
        "needs_future": float((la > 0).mean()),
        "decisions": int(la.size),
    }


def prefix_decisions(boundaries, x: torch.Tensor) -> torch.Tensor:
    """(B, T) ids -> (B, T) decisions a[t] made from x[<= t] alone (the bytes after t removed)."""
    rows = [boundaries(cut_batches(x[b], x[b])[0]).diagonal() for b in range(x.size(0))]  # (T,) each
    return torch.stack(rows)


def leak_bpb(model, data: ByteData, split: str, seq_len: int) -> dict:
    """Bits per byte of the model with its own decisions and with `prefix_decisions`, same windows."""
    nats_own = nats_prefix = n = 0.0
    with torch.no_grad():
        for x, _ in data.eval_batches(split, 16, seq_len):
            for key, a in (("own", None), ("prefix", prefix_decisions(model.strategy.boundaries, x))):
                ce, mask = token_ce(model(x, boundaries=a).logits, x)
                if key == "own":
                    nats_own += float(ce.sum())
                    n += float(mask.sum())
                else:
                    nats_prefix += float(ce.sum())
    bits = math.log(2) * n
    return {
        f"{split}_bpb_own": nats_own / bits,
        f"{split}_bpb_prefix": nats_prefix / bits,
        f"{split}_leak_bpb": (nats_prefix - nats_own) / bits,
        f"{split}_bytes": int(n),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", help="run folders of tokenizer-guided strategies (bpe, bpe-causal)")
    p.add_argument("--windows", type=int, default=64, help="held-out windows (the first of the val split)")
    p.add_argument("--seq-len", type=int, default=256, help="window length T (BOS included)")
    p.add_argument("--bpb", action="store_true", help="also the val/test bits per byte with prefix-made decisions")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args()
    results = {}
    for run in args.runs:
        model, cfg = load_run(run)
        data = ByteData.from_config(cfg.data)
        windows = torch.cat([x for x, _ in data.eval_batches("val", 64, args.seq_len)])[: args.windows]
        with torch.no_grad():
            results[run] = {"strategy": cfg.model.boundary, **lookahead_stats(model.strategy.boundaries, windows)}
        if args.bpb:
            for split in ("val", "test"):
                results[run].update(leak_bpb(model, data, split, args.seq_len))
        print(json.dumps(results[run]))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
