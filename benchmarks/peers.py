"""learntok against published byte-level models at equal parameter count: training throughput
and bits per byte after a fixed training time.

    pip install -e '.[bench]'          # pinned peers: MEGABYTE-pytorch, h-net-dynamic-chunking, x-transformers
    python benchmarks/peers.py --target 4.03e6 --shapes 1024x8,4096x2 --steps 10 [--json out.json]
    python benchmarks/peers.py --minutes 2 --shapes 512x8 [--clock cpu --parallel] [--json ttq.json]  # time to quality

Every model is sized to the parameter target (its width searched in steps of 8 for the count
nearest the target; depths fixed below) and run in its own Python process, one after the
other, so that no two share the cores and none inherits another's allocator state. A step is
forward + loss + backward + AdamW in fp32 on real text (the built-in Shakespeare corpus,
training windows of T bytes, BOS first); the figure is the median over `--steps` steps after
2 warm-up steps, in wall-clock time and in the process's CPU time (on a machine shared with
other jobs, bytes per CPU-second at 1 thread is the figure that the load does not move) (with `--rounds R`, every model
runs R times round-robin and the median of
its R figures is reported, so that changes in background load hit every model alike). Peers get the learntok byte
vocabulary (256 bytes + BOS, EOS, PAD, padded to
320) and the same cross-entropy on next-byte targets; learntok uses its own objective
(both heads, policy and rate losses). `--minutes M` instead trains each model for M minutes
of wall-clock time, or of its own CPU time with `--clock cpu` (then `--parallel` may run
them all at once, fairly: each stops at the same CPU budget) and reports the validation bits
per byte over the first `--val-bytes` bytes of the validation split (learntok: sampled
boundaries, as a run reports them), and with `--curve-every M` a learning curve (evaluations are
not charged to the budget; `--plot` draws them). Every model trains with the same AdamW settings
(the `tiny` preset's: betas, weight decay on matrices, gradient clipping at 1) at the same
learning rate, linear warm-up over `--warmup` steps (20), then constant; `--lrs 1e-3,2e-3,4e-3`
sweeps it (every model at each, and the best per model printed as `--lr-of m=lr,...`, which
then gives each model its own). learntok trains with its own step (learntok.train.step.train_step:
both heads, the policy's learning-rate multiplier, the rate controller), at its `tiny` recipe.

The default models (docs/benchmarks.md's comparison, about 4M parameters):
  learntok learned at rate 1/8 and 0.2, uniform at 0.2: d 224, 7 heads, 1-4-1 (one byte block
    on each side, the width at the token level; `MODEL@2-3-2` for another layout), the `tiny`
    recipe's strategy options (w = 1);
  plain: a byte transformer of learntok's own layers (RoPE, SDPA), d 224, 7 layers;
  x-transformers: Decoder, 7 layers, rotary;
  MEGABYTE: patch 8, global depth 4, local depth 3;
  H-Net (h-net-dynamic-chunking): encoder 2, main 3, decoder 2 x-transformers layers, target chunk 1/rate.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "docs" / "results"))

from learntok import AUNet, ModelConfig  # noqa: E402
from learntok.run.config import RunConfig, load_config  # noqa: E402
from learntok.data import PAD, VOCAB_SIZE, ByteData, DataConfig  # noqa: E402
from learntok.run.distributed import DistEnv  # noqa: E402
from learntok.model.objective import loss  # noqa: E402
from learntok.model.metrics import LN2  # noqa: E402
from learntok.train.step import Engine, build_optimizer, train_step  # noqa: E402
from learntok.util.runtime import autocast  # noqa: E402
from provenance import git_commit  # noqa: E402

MODELS = (
    "learntok-learned-1/8",
    "learntok-learned-0.2",
    "learntok-uniform-0.2",
    "plain",
    "x-transformers",
    "megabyte",
    "hnet",
)
LEARNTOK = dict(d_model=224, n_heads=7, n_down=1, n_mid=4, n_up=1)  # 1-4-1; `MODEL@2-3-2` for another layout
SCHEDULES = ("constant", "cosine")  # time to quality: the learning rate after warm-up
PLAIN = dict(d_model=224, n_heads=7, n_down=2, n_mid=3, n_up=2)  # plain: 7 layers, matched to learntok 2-3-2
LAYOUT = ("n_down", "n_mid", "n_up")
# `MODEL@narrow`: bytes at 144 wide (model.d_bytes), tokens at 272, 1-3-1, 4.06M parameters: the
# width where the tokens are, run on a fraction rho* of the positions (docs/benchmarks.md)
NAMED_LAYOUTS = {"narrow": dict(d_model=272, n_heads=8, d_bytes=144, n_down=1, n_mid=3, n_up=1)}


def parse_layout(text: str | None) -> dict:
    """'1-4-1' -> {n_down: 1, n_mid: 4, n_up: 1}; 'narrow' -> NAMED_LAYOUTS['narrow']; None or '' -> {}."""
    if text in NAMED_LAYOUTS:
        return dict(NAMED_LAYOUTS[text])
    return dict(zip(LAYOUT, map(int, text.split("-")))) if text else {}


def split_model(name: str) -> tuple[str, dict]:
    """'learntok-learned-0.2@1-4-1' -> ('learntok-learned-0.2', {n_down: 1, n_mid: 4, n_up: 1});
    '+section.key=value' parts after it are recipe overrides, kept under their dotted keys:
    'learntok-learned-0.2@1-4-1+objective.lambda_early=0' -> (..., {..., 'objective.lambda_early': '0'})."""
    head, *extra = name.split("+")
    kind, _, layout = head.partition("@")
    return kind, {**parse_layout(layout), **dict(item.split("=", 1) for item in extra)}


def learntok_recipe(kind: str, layout: dict | None = None, lr: float = 2e-3, warmup: int = 20) -> RunConfig:
    """learntok's `tiny` recipe (its strategy options, objective, policy learning-rate multiplier,
    rate controller and gradient clipping) at the benchmark's width and layout, with the harness's
    learning rate: constant after `warmup` linear warm-up steps (lr_at's cosine is not used).
    `layout` holds model fields (n_mid: 4) and dotted recipe overrides (objective.lambda_early: 0)."""
    _, strategy, r = kind.split("-")
    fields = {k: v for k, v in (layout or {}).items() if "." not in k}
    dotted = [f"{k}={v}" for k, v in (layout or {}).items() if "." in k]
    model = {**LEARNTOK, **fields, "boundary": strategy, "target_rate": 1 / 8 if r == "1/8" else float(r)}
    overrides = [f"model.{k}={v}" for k, v in model.items()] + [f"optim.lr={lr}", f"optim.warmup_steps={warmup}"]
    return load_config("tiny", overrides=overrides + dotted)


def harness_config(kind: str, layout: dict, lr: float, warmup: int) -> RunConfig:
    """What `step_fn` trains `kind` with: learntok's recipe for learntok, and for a peer the same
    AdamW settings (only cfg.optim is read)."""
    return learntok_recipe(kind if kind.startswith("learntok") else "learntok-uniform-0.2", layout, lr, warmup)


class PeerLM(nn.Module):
    """A peer wrapped to one interface: `logits(x)` (B, T, V), logits[:, t] predicting x[:, t+1],
    and `aux()` its own extra loss (H-Net's ratio loss; 0 elsewhere)."""

    def __init__(self, core: nn.Module, kind: str, d: int = 0):
        super().__init__()
        self.core, self.kind = core, kind
        if kind == "hnet":  # HNet maps vectors to vectors
            self.embed = nn.Embedding(VOCAB_SIZE, d)
            self.norm, self.head = nn.RMSNorm(d), nn.Linear(d, VOCAB_SIZE, bias=False)
        self._aux = torch.zeros(())

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind == "hnet":
            out = self.core(self.embed(x))
            self._aux = out.loss
            return self.head(self.norm(out.output))
        return self.core(x)

    def aux(self) -> torch.Tensor:
        return self._aux


def peer_loss(model: PeerLM, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(total loss, bits per byte) of next-byte prediction, PAD targets ignored."""
    logits = model.logits(x)
    ce = F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), x[:, 1:].reshape(-1), ignore_index=PAD)
    return ce + model.aux(), ce.detach() / LN2


def build(kind: str, d: int, T: int, rate: float, layout: dict | None = None):
    """The model `kind` at width d (learntok and plain: fixed width; d ignored). `layout`
    overrides learntok's block counts (n_down, n_mid, n_up)."""
    heads = max(2, d // 32)  # head size 32 (x-transformers skips the output projection at 1 head)
    if kind.startswith("learntok"):
        return AUNet(learntok_recipe(kind, layout).model)
    if kind == "plain":
        from throughput import plain_like

        return PeerLM(plain_like(ModelConfig(**PLAIN))[0], kind)
    if kind == "x-transformers":
        from x_transformers import Decoder, TransformerWrapper

        core = TransformerWrapper(
            num_tokens=VOCAB_SIZE,
            max_seq_len=T,
            attn_layers=Decoder(
                dim=d, depth=7, heads=heads, attn_dim_head=32, rotary_pos_emb=True, rotary_emb_dim=16, attn_flash=True
            ),
            use_abs_pos_emb=False,
        )
        return PeerLM(core, kind)
    if kind == "megabyte":
        from MEGABYTE_pytorch import MEGABYTE

        core = MEGABYTE(
            num_tokens=VOCAB_SIZE,
            dim=(d, d),
            depth=(4, 3),
            max_seq_len=(T // 8, 8),
            dim_head=32,
            heads=heads,
            pad_id=PAD,
            flash_attn=True,
        )
        return PeerLM(core, kind)
    if kind == "hnet":
        from h_net_dynamic_chunking.h_net import HNet
        from x_transformers import Decoder

        layer = lambda depth: Decoder(  # noqa: E731
            dim=d,
            depth=depth,
            heads=heads,
            attn_dim_head=32,
            rotary_pos_emb=True,
            rotary_emb_dim=16,
            attn_flash=True,
        )
        core = HNet(layer(2), layer(3), layer(2), dim=d, target_avg_token_length=1 / rate)
        return PeerLM(core, kind, d)
    raise ValueError(f"unknown model {kind!r}; known: {', '.join(MODELS)}")


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def width_for(kind: str, target: float, T: int, rate: float) -> int:
    """The width (a multiple of 8) whose parameter count is nearest target (0: fixed by LEARNTOK)."""
    if kind.startswith("learntok") or kind == "plain":
        return 0
    counts = {d: n_params(build(kind, d, T, rate)) for d in range(64, 513, 32)}  # coarse, then fine
    coarse = min(counts, key=lambda d: abs(counts[d] - target))
    fine = {d: n_params(build(kind, d, T, rate)) for d in range(max(32, coarse - 24), coarse + 32, 8)}
    return min(fine, key=lambda d: abs(fine[d] - target))


def step_fn(
    model: nn.Module,
    data: ByteData,
    B: int,
    T: int,
    cfg: RunConfig,
    seed: int = 0,
    schedule: str = "constant",
    amp: torch.dtype | None = None,
):
    """A closure running training step `i` on window batch i; returns the step's bits per byte.
    Every model gets the same AdamW (cfg.optim: betas, weight decay on matrices, gradient clipping)
    at the same learning rate, linear warm-up over cfg.optim.warmup_steps, then constant (or, with
    `schedule` "cosine", a cosine over the fraction `frac` of the budget spent, to min_lr_ratio). learntok
    runs its own training step (learntok.train.step.train_step: both heads, the policy's learning-rate
    multiplier and the rate controller); a peer runs its cross-entropy plus its own extra loss.
    `seed` picks the stream of training windows: every model of one seed sees the same batches.
    `amp`: the autocast dtype of every model's forward (bf16, or None for fp32), weights in fp32."""
    oc, cpu = cfg.optim, torch.device("cpu")

    def lr(i: int, frac: float) -> float:
        peak = oc.lr * min(1.0, (i + 1) / oc.warmup_steps) if oc.warmup_steps else oc.lr
        if schedule == "cosine":  # over the budget's spent fraction, down to min_lr_ratio x lr
            peak *= oc.min_lr_ratio + (1 - oc.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, frac)))
        return peak

    if isinstance(model, AUNet):
        eng = Engine(model, model, model, build_optimizer(model, oc, cpu), DistEnv(0, 1, 0, cpu), amp)

        def step(i: int, frac: float = 0.0) -> float:
            batch = [data.train_batch(i, B, T, seed=seed)]
            return float(train_step(eng, batch, cfg.objective, oc, lr(i, frac))["bpb"])

        return step
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    decay = [p for p in model.parameters() if p.dim() >= 2 and id(p) not in embeddings]
    rest = [p for p in model.parameters() if p.dim() < 2 or id(p) in embeddings]
    groups = [{"params": decay, "weight_decay": oc.weight_decay}, {"params": rest, "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=oc.lr, betas=tuple(oc.betas), eps=oc.eps)

    def run(i: int, frac: float = 0.0) -> float:
        for g in opt.param_groups:
            g["lr"] = lr(i, frac)
        with autocast(cpu, amp):
            total, bpb = peer_loss(model, data.train_batch(i, B, T, seed=seed))
        opt.zero_grad(set_to_none=True)
        total.backward()
        if oc.grad_clip > 0:
            nn.utils.clip_grad_norm_(model.parameters(), oc.grad_clip)
        opt.step()
        return float(bpb)

    return run


@torch.no_grad()
def val_bpb(model: nn.Module, data: ByteData, B: int, T: int, max_bytes: int) -> float:
    objective = learntok_recipe("learntok-uniform-0.2").objective
    model.eval()
    nats, n = 0.0, 0
    for x, _ in data.eval_batches("val", B, T, max_bytes=max_bytes):
        if isinstance(model, AUNet):
            _, m = loss(model(x), x, objective)
            nats += float(m["ce"] * m["n_bytes"])
            n += int(m["n_bytes"])
        else:
            logits = model.logits(x)
            ce = F.cross_entropy(
                logits[:, :-1].reshape(-1, logits.size(-1)), x[:, 1:].reshape(-1), ignore_index=PAD, reduction="sum"
            )
            nats += float(ce)
            n += int((x[:, 1:] != PAD).sum())
    model.train()
    return nats / (n * LN2)


DTYPES = {"fp32": None, "bf16": torch.bfloat16}


def matmul_peak(dtype: str, sizes=(1024, 2048, 4096), reps: int = 5) -> float:
    """The machine's matmul peak in FLOP/s at this process's threads: the best of square matmuls
    (n x n by n x n, 2 n^3 FLOPs) in `dtype` (bf16 goes through the CPU's matrix units, AMX, where
    it has them), after one warm-up each."""
    best = 0.0
    for n in sizes:
        a, b = (torch.randn(n, n).to(DTYPES[dtype] or torch.float32) for _ in range(2))
        a @ b
        for _ in range(reps):
            t0 = time.perf_counter()
            a @ b
            best = max(best, 2 * n**3 / (time.perf_counter() - t0))
    return best


def worker(job: dict) -> dict:
    """One model, one shape, in this process: throughput (job['steps']) or time to quality
    (job['minutes']); or the matmul peak (job['peak'], a dtype)."""
    torch.set_num_threads(job["threads"])
    if job.get("peak"):
        return {**job, "flops_per_s": matmul_peak(job["peak"])}
    torch.manual_seed(job.get("seed", 0))
    B, T = job["B"], job["T"]
    kind, layout = split_model(job["model"])
    layout = layout or parse_layout(job.get("layout"))
    rate = 1 / 8 if kind.endswith("1/8") else 0.2
    width = job.get("width")
    if width is None:
        width = width_for(kind, job["target"], T, rate)
    torch.manual_seed(job.get("seed", 0))  # the width search drew from the generator: one seed, one init
    model = build(kind, width, T, rate, layout)
    data = ByteData.from_config(DataConfig(source=job["source"]))
    out = {**job, "width": width, "params": n_params(model)}
    if job.get("minutes"):
        cfg = harness_config(kind, layout, job.get("lr", 2e-3), job.get("warmup", 20))
        run = step_fn(model, data, B, T, cfg, job.get("seed", 0), job.get("schedule", "constant"))
        clock = time.process_time if job["clock"] == "cpu" else time.perf_counter
        budget, every = 60 * job["minutes"], 60 * (job.get("curve_every") or job["minutes"])
        spent, i, curve, bpb = 0.0, 0, [], []
        while spent < budget:  # the clock runs while training only: curve points are not charged
            t0 = clock()
            while clock() - t0 < min(every, budget - spent):
                bpb.append(run(i, (spent + clock() - t0) / budget))
                i += 1
            spent += clock() - t0
            curve.append({"minutes": spent / 60, "steps": i, "val_bpb": val_bpb(model, data, B, T, job["val_bytes"])})
        out.update(
            steps_done=i,
            bytes_seen=i * B * (T - 1),
            val_bpb=curve[-1]["val_bpb"],
            curve=curve,
            train_bpb_last=statistics.fmean(bpb[-20:]) if bpb else None,
        )
        return out
    run = step_fn(model, data, B, T, harness_config(kind, layout, 1e-4, 0), amp=DTYPES[job.get("dtype", "fp32")])
    for i in range(2):
        run(i)
    with FlopCounterMode(display=False) as counted:  # the FLOPs the step's matmuls and attention run
        run(2)
    wall, cpu = [], []
    for i in range(3, 3 + job["steps"]):
        t0, c0 = time.perf_counter(), time.process_time()
        run(i)
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    step, cpu_step = statistics.median(wall), statistics.median(cpu)
    out.update(step_s=step, bytes_per_s=B * (T - 1) / step, cpu_s=cpu_step, bytes_per_cpu_s=B * (T - 1) / cpu_step)
    out.update(step_flops=counted.get_total_flops(), flops_per_s=counted.get_total_flops() / step)
    return out


def start_job(job: dict) -> subprocess.Popen:
    """`worker(job)` in a fresh Python process."""
    env = {**os.environ, "OMP_NUM_THREADS": str(job["threads"]), "MKL_NUM_THREADS": str(job["threads"])}
    return subprocess.Popen(
        [sys.executable, __file__, "--worker", json.dumps(job)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def finish_job(job: dict, p: subprocess.Popen) -> dict:
    """The worker's result; an error (e.g. a peer not installed) is reported, not raised."""
    out, err = p.communicate()
    if p.returncode:
        return {**job, "error": (err.strip().splitlines() or ["no output"])[-1]}
    return json.loads(out.strip().splitlines()[-1])


def run_job(job: dict) -> dict:
    return finish_job(job, start_job(job))


def median_round(results: list[dict]) -> dict:
    """One model's rounds -> one row: the median step time over rounds (each a median of steps)."""
    ok = [r for r in results if "step_s" in r]
    if not ok:
        return results[-1]
    step, cpu = statistics.median(r["step_s"] for r in ok), statistics.median(r["cpu_s"] for r in ok)
    n = ok[0]["B"] * (ok[0]["T"] - 1)
    return {
        **ok[0],
        "step_s": step,
        "bytes_per_s": n / step,
        "cpu_s": cpu,
        "bytes_per_cpu_s": n / cpu,
        "round_step_s": [r["step_s"] for r in ok],
        **({"flops_per_s": ok[0]["step_flops"] / step} if "step_flops" in ok[0] else {}),
    }


def shapes(spec: str) -> list[tuple[int, int]]:
    """'1024x8,4096x2' -> [(T, B), ...]."""
    return [tuple(int(v) for v in s.split("x")) for s in spec.split(",")]


def throughput_table(rows: list[dict], shape_list, key: str = "bytes_per_s") -> str:
    unit = "bytes/s" if key == "bytes_per_s" else "bytes per CPU-second"
    head = "| model | params | " + " | ".join(f"{unit}, T = {T}, B = {B}" for T, B in shape_list) + " |"
    lines = [head, "|---|---|" + "---|" * len(shape_list)]
    for m in dict.fromkeys(r["model"] for r in rows):
        cells, params = [], "-"
        for T, B in shape_list:
            r = next(r for r in rows if r["model"] == m and r["T"] == T and r["B"] == B)
            params = f"{r['params'] / 1e6:.2f}M" if "params" in r else params
            cells.append(f"{r[key]:,.0f}" if key in r else f"error: {r['error'][:60]}")
        lines.append(f"| {m} | {params} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def ratios(rows: list[dict], shape_list, key: str = "bytes_per_s") -> str:
    """learntok learned over the fastest peer, and over uniform, at each shape."""
    lines = []
    for T, B in shape_list:
        at = {r["model"]: r.get(key) for r in rows if r["T"] == T and r["B"] == B}
        peers = {m: v for m, v in at.items() if not m.startswith("learntok") and v}
        if not peers:
            continue
        best = max(peers, key=peers.get)
        for m in ("learntok-learned-1/8", "learntok-learned-0.2"):
            if at.get(m):
                lines.append(f"T = {T}, B = {B}: {m} / fastest peer ({best}) = {at[m] / peers[best]:.2f}x")
        if at.get("learntok-learned-0.2") and at.get("learntok-uniform-0.2"):
            lines.append(
                f"T = {T}, B = {B}: step time learned / uniform at 0.2 = "
                f"{at['learntok-uniform-0.2'] / at['learntok-learned-0.2']:.3f}x"
            )
    return "\n".join(lines)


def mfu_table(rows: list[dict], shape_list, peaks: dict[str, float]) -> str:
    """Every model's counted FLOPs per second (FlopCounterMode over one training step: the matmuls
    and attention it ran, forward and backward) against the matmul peak of its precision."""
    lines = [
        "| model | precision | T x B | GFLOP a step | GFLOP/s | MFU (of the precision's peak) |",
        "|---|---|---|---:|---:|---:|",
    ]
    for r in rows:
        if "flops_per_s" not in r:
            continue
        d = r.get("dtype", "fp32")
        lines.append(
            f"| {r['model']} | {d} | {r['T']} x {r['B']} | {r['step_flops'] / 1e9:.2f} | "
            f"{r['flops_per_s'] / 1e9:.1f} | {100 * r['flops_per_s'] / peaks[d]:.1f}% |"
        )
    return "\n".join(lines)


def ttq_table(rows: list[dict]) -> str:
    """Time to quality, best first: one row a model and learning rate."""
    lines = ["| model | lr | seed | params | steps | bytes seen | val bits/byte |", "|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: r.get("val_bpb", float("inf"))):
        if "error" in r:
            lines.append(
                f"| {group_key(r)} | {r.get('lr', 2e-3):g} | {r.get('seed', 0)} | - | - | - | error: {r['error'][:60]} |"
            )
        else:
            lines.append(
                f"| {group_key(r)} | {r.get('lr', 2e-3):g} | {r.get('seed', 0)} | {r['params'] / 1e6:.2f}M | {r['steps_done']} | "
                f"{r['bytes_seen']:,} | {r['val_bpb']:.3f} |"
            )
    return "\n".join(lines)


def group_key(r: dict) -> str:
    """A time-to-quality row's arm: its model, learning rate and schedule (seeds pooled)."""
    sched = r.get("schedule", "constant")
    return f"{r['model']} (lr {r.get('lr', 2e-3):g}" + ("" if sched == "constant" else f", {sched}") + ")"


def mean_se(values: list[float]) -> tuple[float, float]:
    """Mean and standard error over seeds (0 for one value)."""
    m = statistics.fmean(values)
    return m, (statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0)


def at_minutes(r: dict, minutes: float) -> float | None:
    """The curve's val bpb at its first point at or past `minutes`."""
    return next((c["val_bpb"] for c in r.get("curve", []) if c["minutes"] >= minutes - 1e-6), None)


def ttq_seed_table(rows: list[dict], ref: str = "megabyte") -> str:
    """Time to quality over seeds, best first: mean and s.e. of the final val bpb per arm, the curve
    at 1, 2 and 5 minutes, and the difference from `ref` (same schedule) paired by seed."""
    ok = [r for r in rows if "val_bpb" in r]
    arms: dict[str, list[dict]] = {}
    for r in ok:
        arms.setdefault(group_key(r), []).append(r)
    lines = [
        f"| model | seeds | steps | val bpb at 1 / 2 / 5 min | val bpb at the end (s.e.) | minus {ref}, paired (s.e.) |",
        "|---|---:|---:|---|---:|---:|",
    ]
    for key, rs in sorted(arms.items(), key=lambda kv: mean_se([r["val_bpb"] for r in kv[1]])[0]):
        m, se = mean_se([r["val_bpb"] for r in rs])
        points = ([at_minutes(r, t) for r in rs] for t in (1, 2, 5))
        early = " / ".join(f"{statistics.fmean(v):.3f}" if None not in v else "-" for v in points)
        sched = rs[0].get("schedule", "constant")
        base = {
            r.get("seed", 0): r["val_bpb"] for r in ok if r["model"] == ref and r.get("schedule", "constant") == sched
        }
        diffs = [r["val_bpb"] - base[r.get("seed", 0)] for r in rs if r.get("seed", 0) in base]
        paired = "-"
        if diffs and rs[0]["model"] != ref:
            d, dse = mean_se(diffs)
            paired = f"{d:+.3f} ({dse:.3f}), {len(diffs)} seeds"
        steps = statistics.fmean(r["steps_done"] for r in rs)
        lines.append(f"| {key} | {len(rs)} | {steps:.0f} | {early} | {m:.3f} ({se:.3f}) | {paired} |")
    return "\n".join(lines)


def best_lr(rows: list[dict]) -> str:
    """A sweep's best learning rate per model, as `--lr-of` takes it."""
    best = {}
    for r in rows:
        if "val_bpb" in r and (r["model"] not in best or r["val_bpb"] < best[r["model"]]["val_bpb"]):
            best[r["model"]] = r
    return ",".join(f"{m}={r['lr']:g}" for m, r in best.items())


def plot_curves(rows: list[dict], path: str) -> None:
    """Validation bits per byte against CPU-minutes, one line an arm (model, learning rate and
    schedule): the mean over its seeds, with a band of one standard error."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    arms: dict[str, list[dict]] = {}
    for r in rows:
        if r.get("curve"):
            arms.setdefault(group_key(r), []).append(r)
    for key, rs in arms.items():  # the mean over seeds, and a band of one s.e. where there are several
        n = min(len(r["curve"]) for r in rs)
        x = [statistics.fmean(r["curve"][k]["minutes"] for r in rs) for k in range(n)]
        stats = [mean_se([r["curve"][k]["val_bpb"] for r in rs]) for k in range(n)]
        (line,) = ax.plot(x, [m for m, _ in stats], marker=".", label=f"{key}, {len(rs)} seed(s)")
        if len(rs) > 1:
            ax.fill_between(x, [m - e for m, e in stats], [m + e for m, e in stats], color=line.get_color(), alpha=0.2)
    ax.set_xlabel(f"{rows[0].get('clock', 'cpu')}-clock minutes of training")
    ax.set_ylabel("validation bits per byte")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def learning_rates(spec: str | None, lrs: str, models: list[str]) -> dict[str, list[float]]:
    """Each model's learning rates: every value of `--lrs`, or its own from `--lr-of m=lr,...`."""
    own = dict(item.split("=") for item in spec.split(",")) if spec else {}
    unknown = set(own) - set(models)
    if unknown:
        raise SystemExit(f"peers.py: error: --lr-of names models not in --models: {sorted(unknown)}")
    return {m: [float(own[m])] if m in own else [float(v) for v in lrs.split(",")] for m in models}


def ttq_arms(args: argparse.Namespace, models: list[str], lrs: dict[str, list[float]]) -> list[dict]:
    """Every time-to-quality job's model, learning rate, schedule and seed."""
    own = dict(item.split("=") for item in args.schedule_of.split(",")) if args.schedule_of else {}
    if set(own) - set(models) or set(own.values()) - set(SCHEDULES):
        raise SystemExit(f"peers.py: error: --schedule-of {args.schedule_of!r}: models of --models, each {SCHEDULES}")
    seeds = [int(v) for v in args.seeds.split(",")]
    return [
        {"model": m, "lr": lr, "schedule": own.get(m, "constant"), "seed": seed}
        for m in models
        for lr in lrs[m]
        for seed in seeds
    ]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--target", type=float, default=4.03e6, help="parameter count to size the peers to")
    p.add_argument("--shapes", default="1024x8,4096x2", help="T x B pairs, comma-separated")
    p.add_argument("--steps", type=int, default=10, help="timed steps per model, shape and round (median)")
    p.add_argument(
        "--rounds", type=int, default=1, help="rounds over all models (median of rounds; a fresh process each)"
    )
    p.add_argument("--minutes", type=float, default=0.0, help="time-to-quality mode: train each model this long")
    p.add_argument("--val-bytes", type=int, default=65536)
    p.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="time-to-quality budget in wall-clock or in the process's CPU time (fair under background load)",
    )
    p.add_argument(
        "--parallel", action="store_true", help="time to quality: run every model at once (use with --clock cpu)"
    )
    p.add_argument("--lrs", default="2e-3", help="time to quality: learning rates, every model at each (a sweep)")
    p.add_argument("--lr-of", default=None, help="time to quality: a model's own learning rate, e.g. megabyte=4e-3")
    p.add_argument("--seeds", default="0", help="time to quality: seeds (init and batch order), e.g. 0,1,2")
    p.add_argument(
        "--schedule-of",
        default=None,
        help="time to quality: a model's own schedule after warm-up, e.g. megabyte=cosine (a cosine over the "
        "budget to min_lr_ratio x lr); the others stay constant",
    )
    p.add_argument("--ref", default="megabyte", help="time to quality: the model the others are paired against")
    p.add_argument("--warmup", type=int, default=20, help="time to quality: linear warm-up steps, then constant")
    p.add_argument("--curve-every", type=float, default=0.0, help="time to quality: val bpb every this many minutes")
    p.add_argument("--plot", default=None, help="time to quality: write the learning curves to this PNG")
    p.add_argument(
        "--dtypes",
        default="fp32",
        help="throughput: precisions, each model at each (fp32, bf16: autocast, weights fp32), with each "
        "one's matmul peak and every model's MFU against it",
    )
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--source", default="shakespeare")
    p.add_argument("--learntok-layout", default=None, help="learntok's down-mid-up blocks, e.g. 2-3-2 (default 1-4-1)")
    p.add_argument("--json", default=None)
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return
    models = args.models.split(",")
    unknown = [m for m in models if split_model(m)[0] not in MODELS]
    if unknown:
        p.error(f"unknown models {unknown}; known: {', '.join(MODELS)}")
    shape_list = shapes(args.shapes)
    base = dict(
        target=args.target,
        threads=args.threads,
        source=args.source,
        steps=args.steps,
        minutes=args.minutes,
        val_bytes=args.val_bytes,
        clock=args.clock,
        layout=args.learntok_layout,
        warmup=args.warmup,
        curve_every=args.curve_every,
    )
    lrs = learning_rates(args.lr_of, args.lrs, models)
    rows = []
    if args.minutes:  # time to quality: side by side on a CPU-time budget, or one after another
        jobs = [{**base, **arm, "T": T, "B": B} for T, B in shape_list for arm in ttq_arms(args, models, lrs)]
        if args.parallel:
            procs = [start_job(j) for j in jobs]
            rows = [finish_job(j, p) for j, p in zip(jobs, procs)]
        else:
            rows = [run_job(j) for j in jobs]
    dtypes = args.dtypes.split(",")
    peaks = {} if args.minutes else {d: run_job({"peak": d, "threads": args.threads})["flops_per_s"] for d in dtypes}
    for T, B in [] if args.minutes else shape_list:
        rounds = {(m, d): [] for d in dtypes for m in models}
        for _ in range(args.rounds):  # round-robin: load changes hit every model alike
            for (m, d), done in rounds.items():
                prev = done[-1] if done else {}
                job = {**base, "model": m, "T": T, "B": B, "width": prev.get("width"), "lr": lrs[m][0], "dtype": d}
                r = run_job(job)
                print(json.dumps(r), file=sys.stderr, flush=True)
                done.append(r)
        rows += [median_round(rs) for rs in rounds.values()]
    load = os.getloadavg()
    print(f"torch {torch.__version__}, {args.threads} threads, CPU, load average {load[0]:.1f} at the end\n")
    if args.minutes:
        for T, B in shape_list:
            print(
                f"Validation bits per byte after {args.minutes:g} min ({args.clock} clock) of training, "
                f"T = {T}, B = {B}\n"
            )
            print(ttq_table([r for r in rows if r["T"] == T and r["B"] == B]) + "\n")
            print(f"best learning rates: --lr-of {best_lr([r for r in rows if r['T'] == T and r['B'] == B])}\n")
            print(ttq_seed_table([r for r in rows if r["T"] == T and r["B"] == B], args.ref) + "\n")
        if args.plot:
            plot_curves(rows, args.plot)
    else:
        for d in dtypes:
            at = [r for r in rows if r.get("dtype", "fp32") == d]
            print(f"{d}: matmul peak {peaks[d] / 1e9:.1f} GFLOP/s at {args.threads} threads\n")
            for key in ("bytes_per_s", "bytes_per_cpu_s"):
                print(throughput_table(at, shape_list, key) + "\n")
                print(ratios(at, shape_list, key) + "\n")
        print(mfu_table(rows, shape_list, peaks) + "\n")
    if args.json:
        record = {
            "command": " ".join(["python", *sys.argv]),
            "commit": git_commit(),
            "seeds": [int(v) for v in args.seeds.split(",")],
        }
        out = {**record, "rows": rows, "args": vars(args), "load": load, "peaks": peaks}
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
