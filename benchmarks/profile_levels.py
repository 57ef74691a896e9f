"""Where a training step's time goes, level by level: byte encoder, early head, policy, token
level, decoder, final head, loss, optimizer.

    python benchmarks/profile_levels.py [--size tiny|4M] [--batch B --seq T] [--reps 5]
                                        [--token-level packed|padded] [--json out.json]

Times are the process's CPU time (time.process_time) at 1 thread by default: on a machine
shared with other jobs that is the figure the background load does not move (wall-clock time
under load varied 3-10x here). Each level is timed on its own, forward + backward, on the inputs the real step feeds it
(captured from one forward pass), with a random upstream gradient; the loss is timed on
leaf logits (so it holds both heads' cross-entropies and the policy terms); the optimizer
step is AdamW over every parameter. Levels are interleaved rep by rep and medians reported,
with the full step (forward + loss + backward + AdamW) beside them: the sum of the levels
should come near it (the rest is autograd bookkeeping and the glue between levels).
`--token-level padded` runs the mid blocks on rows padded to the largest token count (the
reference that packing replaced), for before/after figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from unittest import mock

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from throughput import batch, interleaved  # the sibling benchmark script

from learntok import AUNet, ModelConfig, ObjectiveConfig
from learntok.boundaries.options import kept_options
from learntok.model.aunet import token_level_padded
from learntok.nn.pooling import upsample
from learntok.objective import loss

SIZES = {
    "tiny": dict(d_model=128, n_heads=4, n_down=1, n_mid=2, n_up=1),
    "4M": dict(d_model=224, n_heads=7, n_down=2, n_mid=3, n_up=2),
}
WINDOW = {"tiny": 1, "4M": 8}  # the learned policy's w at each size


def fwd_bwd(fn, *inputs):
    """A closure timing fn(*inputs) forward + backward with a fixed random upstream gradient."""
    leaves = [t.detach().requires_grad_(t.is_floating_point()) for t in inputs]
    with torch.no_grad():
        grad = torch.randn_like(fn(*leaves))

    def run():
        fn(*leaves).backward(grad)

    return run


def level_closures(model: AUNet, x: torch.Tensor, ocfg: ObjectiveConfig) -> dict:
    """name -> closure, for every level of one training step of `model` on x (B, T)."""
    B, T = x.shape
    pos = torch.arange(T)
    with torch.no_grad():  # the real inputs of every level
        h = model.encoder(model.embed(x), pos)
        early = model.early_head(h)
        b = model.strategy(h, x, early_logits=early)
        z = model.token_level(h, b)
        y = h + upsample(z, b.decisions)
        out = model(x, boundaries=b.decisions)
    a = b.decisions

    def policy(hh):
        o = model.strategy(hh, x, early_logits=early)
        return o.logits + o.log_prob  # both carry the policy's gradients

    def loss_on_leaves(logits, early_logits):
        o = type(out)(**{**out.__dict__, "logits": logits, "early_logits": early_logits})
        return loss(o, x, ocfg)[0]

    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    return {
        "byte encoder (embed + blocks)": fwd_bwd(lambda e: model.encoder(e, pos), model.embed(x)),
        "early head": fwd_bwd(model.early_head, h),
        "policy (sample + log-prob)": fwd_bwd(policy, h),
        "token level (down, mid, dechunk)": fwd_bwd(lambda hh: model.token_level(hh, b), h),
        "upsample + decoder": fwd_bwd(lambda hh, zz: model.decoder(hh + upsample(zz, a), pos), h, z),
        "final head": fwd_bwd(model.head, y),
        "loss (both CEs, policy, rate)": fwd_bwd(loss_on_leaves, out.logits, out.early_logits),
        "AdamW step": opt.step,
    }


def full_step(model: AUNet, x: torch.Tensor, ocfg: ObjectiveConfig):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def run():
        total, _ = loss(model(x), x, ocfg)
        opt.zero_grad(set_to_none=True)
        total.backward()
        opt.step()

    return run


def profile(size: str, B: int, T: int, reps: int, strategy: str = "learned") -> dict:
    torch.manual_seed(0)
    model = AUNet(
        ModelConfig(**SIZES[size], boundary=strategy, strategy=kept_options({"window": WINDOW[size]}, strategy))
    )
    x = batch(B, T)
    ocfg = ObjectiveConfig()
    fns = level_closures(model, x, ocfg)
    fns["full step"] = full_step(model, x, ocfg)
    times = dict(zip(fns, interleaved(list(fns.values()), reps, torch.device("cpu"), clock="cpu")))
    return {
        "size": size,
        "params": model.num_params(),
        "B": B,
        "T": T,
        "strategy": strategy,
        "ms": {k: 1e3 * v for k, v in times.items()},
    }


def table(r: dict) -> str:
    ms = r["ms"]
    total = ms["full step"]
    levels = sum(v for k, v in ms.items() if k != "full step")
    lines = [
        f"{r['size']} ({r['params'] / 1e6:.2f}M), {r['strategy']}, B = {r['B']}, T = {r['T']}",
        "| level | CPU ms | share of step |",
        "|---|---:|---:|",
    ]
    lines += [f"| {k} | {v:.1f} | {100 * v / total:.0f}% |" for k, v in ms.items() if k != "full step"]
    lines += [
        f"| sum of levels | {levels:.1f} | {100 * levels / total:.0f}% |",
        f"| **full step** | **{total:.1f}** | 100% |",
    ]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", choices=sorted(SIZES), default="tiny")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--strategy", default="learned")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--token-level", choices=("packed", "padded"), default="packed")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    patch = mock.patch.object(AUNet, "token_level", token_level_padded) if args.token_level == "padded" else None
    with patch or mock.patch.dict({}):
        t0 = time.perf_counter()
        r = profile(args.size, args.batch, args.seq, args.reps, args.strategy)
    r.update(
        token_level=args.token_level, threads=args.threads, torch=torch.__version__, seconds=time.perf_counter() - t0
    )
    print(f"torch {torch.__version__}, {args.threads} threads, token level {args.token_level}\n")
    print(table(r))
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=2))


if __name__ == "__main__":
    main()
