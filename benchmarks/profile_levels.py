"""Where a training step's time goes, level by level and forward / backward: byte encoder, early
head, policy, pooling, mid transformer, upsample, byte decoder, final head, loss, optimizer.

    python benchmarks/profile_levels.py [--size tiny|4M] [--batch B --seq T] [--rate 0.2]
                                        [--window W] [--reps 5] [--token-level packed|padded]
                                        [--json out.json]

The model is the one benchmarks/peers.py trains: learntok's `tiny` recipe (its strategy
options, w = 1) at the size's width and layout (`4M` is peers.py's 1-4-1, d 224; `4M-2-3-2` the other; `4M-narrow` peers.py's `@narrow`), at the
target rate `--rate`; `--window 8` gives the learned policy the sequential sampler of earlier
figures. Times are the process's CPU time (time.process_time) at 1 thread by default: on a
machine shared with other jobs that is the figure the background load does not move.

Each level is timed on its own on the inputs the real step feeds it (captured from one forward
pass): its forward with autograd recording, and its forward + backward with a fixed random
upstream gradient; backward is their difference. The loss is timed on leaf logits (both heads'
cross-entropies and the policy terms); the optimizer is gradient clipping and AdamW over every
parameter (learntok.train.step.build_optimizer, as training builds it). Every closure is interleaved
rep by rep and medians reported, with the real step beside them (learntok.train.step.train_step:
forward, loss, backward, clipping, AdamW, the rate controller) and its three phases timed in one
plain step: the sum of the levels should come near it (the rest is autograd bookkeeping and the
glue between levels). `--token-level padded` runs the mid blocks on rows padded to the largest
token count (the reference that packing replaced), for before/after figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from unittest import mock

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peers import LEARNTOK, NAMED_LAYOUTS, learntok_recipe  # the sibling benchmark scripts
from throughput import batch, timed

from learntok import AUNet
from learntok.run.config import RunConfig
from learntok.run.distributed import DistEnv
from learntok.model.aunet import token_level_padded
from learntok.nn.pooling import pack_rows
from learntok.model.objective import loss
from learntok.train.step import Engine, build_optimizer, train_step

SIZES = {
    "tiny": dict(d_model=128, n_heads=4, n_down=1, n_mid=2, n_up=1),
    "4M": LEARNTOK,  # 1-4-1, the peers comparison's layout
    "4M-2-3-2": {**LEARNTOK, "n_down": 2, "n_mid": 3, "n_up": 2},
    "4M-narrow": NAMED_LAYOUTS["narrow"],  # bytes 144 wide, tokens 272, 1-3-1
}
CPU = torch.device("cpu")
OPT = "optimizer (clip + AdamW)"


def recipe(size: str, strategy: str, rate: float, window: int | None) -> RunConfig:
    """peers.py's learntok recipe at `size`, `rate` and (if given) the policy's window."""
    cfg = learntok_recipe(f"learntok-{strategy}-{rate:g}", SIZES[size])
    if window is not None:
        cfg.model.strategy = {**cfg.model.strategy, "window": window}
    return cfg


def forward_and_backward(fn, *inputs):
    """Two closures over fn(*inputs): its forward with autograd recording, and its forward +
    backward with a fixed random upstream gradient."""
    leaves = [t.detach().requires_grad_(t.is_floating_point()) for t in inputs]
    with torch.no_grad():
        grad = torch.randn_like(fn(*leaves))
    if not fn(*leaves).requires_grad:  # no parameters (e.g. uniform's policy level): forward only
        return (lambda: fn(*leaves)), (lambda: fn(*leaves))
    return (lambda: fn(*leaves)), (lambda: fn(*leaves).backward(grad))


def level_closures(model: AUNet, x: torch.Tensor, cfg: RunConfig) -> dict:
    """level -> (forward closure or None, forward + backward closure), for one step on x (B, T)."""
    B, T = x.shape
    pos = torch.arange(T)
    mult = model.cfg.token_pad_multiple
    with torch.no_grad():  # the real inputs of every level
        e = model.embed(x)
        h = model.encoder(e, pos)
        early = model.early_head(h)
        b = model.strategy(h, x, early_logits=early)
        packing = pack_rows(b.decisions, mult)
        zp = model.chunker.down_packed(h, b.decisions, b.relaxed, packing)
        zm = model.mid(zp, packing.pos, packing)
        z = model.token_level(h, b)
        y = h + model.chunker.up(z, b.decisions, b.probs)
        out = model(x, boundaries=b.decisions)

    def policy(hh):
        o = model.strategy(hh, x, early_logits=early)
        return o.logits + o.log_prob  # both carry the policy's gradients

    def pooling(hh):
        return model.chunker.down_packed(hh, b.decisions, b.relaxed, pack_rows(b.decisions, mult))  # (N, D)

    def unpool(hh, zz):  # dechunk, padded rows, upsample and the skip
        zz = model.chunker.dechunk(packing.to_padded(zz), b.probs, packing.padded_pos())
        return hh + model.chunker.up(zz, b.decisions, b.probs)

    def loss_on_leaves(logits, early_logits):
        o = type(out)(**{**out.__dict__, "logits": logits, "early_logits": early_logits})
        return loss(o, x, cfg.objective)[0]

    opt = build_optimizer(model, cfg.optim, CPU)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)

    def optimizer():
        nn.utils.clip_grad_norm_(model.parameters(), cfg.optim.grad_clip)
        opt.step()

    levels = {
        "byte encoder (embed + blocks)": (lambda ee: model.encoder(ee, pos), e),
        "early head": (model.early_head, h),
        "policy (sample + log-prob)": (policy, h),
        "pooling (pack + gather)": (pooling, h),
        "mid transformer (packed)": (lambda zz: model.mid(zz, packing.pos, packing), zp),
        "upsample (dechunk + gather + skip)": (unpool, h, zm),
        "byte decoder": (lambda yy: model.decoder(yy, pos), y),
        "final head": (model.head, model.decoder(y, pos)),
        "loss (both CEs, policy, rate)": (loss_on_leaves, out.logits, out.early_logits),
    }
    closures = {k: forward_and_backward(fn, *ins) for k, (fn, *ins) in levels.items()}
    closures[OPT] = (None, optimizer)
    return closures


def phases(model: AUNet, x: torch.Tensor, cfg: RunConfig) -> list:
    """The step in three closures run in order: forward + loss, backward, clip + AdamW."""
    opt = build_optimizer(model, cfg.optim, CPU)
    held = {}

    def forward():
        held["total"] = loss(model(x), x, cfg.objective)[0]

    def backward():
        opt.zero_grad(set_to_none=True)
        held.pop("total").backward()

    def step():
        nn.utils.clip_grad_norm_(model.parameters(), cfg.optim.grad_clip)
        opt.step()

    return [forward, backward, step]


def profile(size: str, B: int, T: int, reps: int, strategy: str, rate: float, window: int | None) -> dict:
    torch.manual_seed(0)
    cfg = recipe(size, strategy, rate, window)
    model = AUNet(cfg.model)
    x = batch(B, T)
    closures = level_closures(model, x, cfg)
    eng = Engine(model, model, model, build_optimizer(model, cfg.optim, CPU), DistEnv(0, 1, 0, CPU), None)
    step = lambda: train_step(eng, [x], cfg.objective, cfg.optim, 1e-4)  # noqa: E731
    parts = phases(model, x, cfg)
    names = list(closures)
    fwd = {k: [] for k in names}
    fb = {k: [] for k in names}
    full, ph = [], [[] for _ in parts]
    for rep in range(reps + 1):  # rep 0 warms up
        for k in names:
            f, g = closures[k]
            tf = timed(f, CPU, "cpu") if f is not None else 0.0
            tg = timed(g, CPU, "cpu")
            if rep:
                fwd[k].append(tf)
                fb[k].append(tg)
        ts = timed(step, CPU, "cpu")
        tp = [timed(p, CPU, "cpu") for p in parts]
        if rep:
            full.append(ts)
            for acc, t in zip(ph, tp):
                acc.append(t)
    med = lambda v: 1e3 * sorted(v)[len(v) // 2]  # noqa: E731
    return {
        "size": size,
        "params": model.num_params(),
        "B": B,
        "T": T,
        "strategy": strategy,
        "rate": rate,
        "window": getattr(getattr(model.strategy, "opts", None), "window", None),  # a policy's w, if it has one
        "forward_ms": {k: med(fwd[k]) for k in names},
        "total_ms": {k: med(fb[k]) for k in names},
        "step_ms": med(full),
        "phase_ms": dict(zip(("forward + loss", "backward", "clip + AdamW"), map(med, ph))),
    }


def table(r: dict) -> str:
    total, fwd, step = r["total_ms"], r["forward_ms"], r["step_ms"]
    lines = [
        f"{r['size']} ({r['params'] / 1e6:.2f}M), {r['strategy']}"
        + (f" (w = {r['window']})" if r["window"] is not None else "")
        + f", rate {r['rate']:g}, "
        f"B = {r['B']}, T = {r['T']}",
        "| level | forward ms | backward ms | total ms | share of step |",
        "|---|---:|---:|---:|---:|",
    ]
    for k, v in total.items():
        f, b = (f"{fwd[k]:.1f}", f"{v - fwd[k]:.1f}") if k != OPT else ("-", "-")
        lines.append(f"| {k} | {f} | {b} | {v:.1f} | {100 * v / step:.0f}% |")
    levels = sum(total.values())
    lines += [
        f"| sum of levels | {sum(fwd.values()):.1f} | {levels - sum(fwd.values()) - total[OPT]:.1f} | "
        f"{levels:.1f} | {100 * levels / step:.0f}% |",
        f"| **step (train_step)** | | | **{step:.1f}** | 100% |",
        "",
        "the step's phases: " + ", ".join(f"{k} {v:.1f} ms" for k, v in r["phase_ms"].items()),
    ]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", choices=sorted(SIZES), default="tiny")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--strategy", default="learned")
    p.add_argument("--rate", type=float, default=0.2)
    p.add_argument("--window", type=int, default=None, help="the learned policy's w (default: the recipe's)")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--token-level", choices=("packed", "padded"), default="packed")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    patch = mock.patch.object(AUNet, "token_level", token_level_padded) if args.token_level == "padded" else None
    with patch or mock.patch.dict({}):
        t0 = time.perf_counter()
        r = profile(args.size, args.batch, args.seq, args.reps, args.strategy, args.rate, args.window)
    r.update(
        token_level=args.token_level, threads=args.threads, torch=torch.__version__, seconds=time.perf_counter() - t0
    )
    print(f"torch {torch.__version__}, {args.threads} threads, token level {args.token_level}\n")
    print(table(r))
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=2))


if __name__ == "__main__":
    main()
