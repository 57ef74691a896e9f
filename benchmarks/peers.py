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
then gives each model its own). learntok trains with its own step (learntok.train.train_step:
both heads, the policy's learning-rate multiplier, the rate controller), at its `tiny` recipe.

The default models (docs/benchmarks.md's comparison, about 4M parameters):
  learntok learned at rate 1/8 and 0.2, uniform at 0.2: d 224, 7 heads, 2-3-2 (`MODEL@1-4-1`
    for another layout), the `tiny` recipe's strategy options (w = 1);
  plain: a byte transformer of learntok's own layers (RoPE, SDPA), 7 layers;
  x-transformers: Decoder, 7 layers, rotary;
  MEGABYTE: patch 8, global depth 4, local depth 3;
  H-Net (h-net-dynamic-chunking): encoder 2, main 3, decoder 2 x-transformers layers, target chunk 1/rate.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from learntok import AUNet, ModelConfig  # noqa: E402
from learntok.config import RunConfig, load_config  # noqa: E402
from learntok.data import PAD, VOCAB_SIZE, ByteData, DataConfig  # noqa: E402
from learntok.distributed import DistEnv  # noqa: E402
from learntok.objective import LN2, loss  # noqa: E402
from learntok.train import Engine, build_optimizer, train_step  # noqa: E402

MODELS = (
    "learntok-learned-1/8",
    "learntok-learned-0.2",
    "learntok-uniform-0.2",
    "plain",
    "x-transformers",
    "megabyte",
    "hnet",
)
LEARNTOK = dict(d_model=224, n_heads=7, n_down=2, n_mid=3, n_up=2)  # 2-3-2; `MODEL@1-4-1` for another layout
LAYOUT = ("n_down", "n_mid", "n_up")


def parse_layout(text: str | None) -> dict:
    """'1-4-1' -> {n_down: 1, n_mid: 4, n_up: 1}; None or '' -> {}."""
    return dict(zip(LAYOUT, map(int, text.split("-")))) if text else {}


def split_model(name: str) -> tuple[str, dict]:
    """'learntok-learned-0.2@1-4-1' -> ('learntok-learned-0.2', {n_down: 1, n_mid: 4, n_up: 1})."""
    kind, _, layout = name.partition("@")
    return kind, parse_layout(layout)


def learntok_recipe(kind: str, layout: dict | None = None, lr: float = 2e-3, warmup: int = 20) -> RunConfig:
    """learntok's `tiny` recipe (its strategy options, objective, policy learning-rate multiplier,
    rate controller and gradient clipping) at the benchmark's width and layout, with the harness's
    learning rate: constant after `warmup` linear warm-up steps (lr_at's cosine is not used)."""
    _, strategy, r = kind.split("-")
    model = {**LEARNTOK, **(layout or {}), "boundary": strategy, "target_rate": 1 / 8 if r == "1/8" else float(r)}
    overrides = [f"model.{k}={v}" for k, v in model.items()] + [f"optim.lr={lr}", f"optim.warmup_steps={warmup}"]
    return load_config("tiny", overrides=overrides)


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

        return PeerLM(plain_like(ModelConfig(**LEARNTOK))[0], kind)
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


def step_fn(model: nn.Module, data: ByteData, B: int, T: int, cfg: RunConfig):
    """A closure running training step `i` on window batch i; returns the step's bits per byte.
    Every model gets the same AdamW (cfg.optim: betas, weight decay on matrices, gradient clipping)
    at the same learning rate, linear warm-up over cfg.optim.warmup_steps, then constant. learntok
    runs its own training step (learntok.train.train_step: both heads, the policy's learning-rate
    multiplier and the rate controller); a peer runs its cross-entropy plus its own extra loss."""
    oc, cpu = cfg.optim, torch.device("cpu")
    lr = lambda i: oc.lr * min(1.0, (i + 1) / oc.warmup_steps) if oc.warmup_steps else oc.lr  # noqa: E731
    if isinstance(model, AUNet):
        eng = Engine(model, model, model, build_optimizer(model, oc, cpu), DistEnv(0, 1, 0, cpu), None)
        return lambda i: float(train_step(eng, [data.train_batch(i, B, T, seed=0)], cfg.objective, oc, lr(i))["bpb"])
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    decay = [p for p in model.parameters() if p.dim() >= 2 and id(p) not in embeddings]
    rest = [p for p in model.parameters() if p.dim() < 2 or id(p) in embeddings]
    groups = [{"params": decay, "weight_decay": oc.weight_decay}, {"params": rest, "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=oc.lr, betas=tuple(oc.betas), eps=oc.eps)

    def run(i: int) -> float:
        for g in opt.param_groups:
            g["lr"] = lr(i)
        total, bpb = peer_loss(model, data.train_batch(i, B, T, seed=0))
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


def worker(job: dict) -> dict:
    """One model, one shape, in this process: throughput (job['steps']) or time to quality (job['minutes'])."""
    torch.set_num_threads(job["threads"])
    torch.manual_seed(0)
    B, T = job["B"], job["T"]
    kind, layout = split_model(job["model"])
    layout = layout or parse_layout(job.get("layout"))
    rate = 1 / 8 if kind.endswith("1/8") else 0.2
    width = job.get("width")
    if width is None:
        width = width_for(kind, job["target"], T, rate)
    model = build(kind, width, T, rate, layout)
    data = ByteData.from_config(DataConfig(source=job["source"]))
    out = {**job, "width": width, "params": n_params(model)}
    if job.get("minutes"):
        run = step_fn(model, data, B, T, harness_config(kind, layout, job.get("lr", 2e-3), job.get("warmup", 20)))
        clock = time.process_time if job["clock"] == "cpu" else time.perf_counter
        budget, every = 60 * job["minutes"], 60 * (job.get("curve_every") or job["minutes"])
        spent, i, curve, bpb = 0.0, 0, [], []
        while spent < budget:  # the clock runs while training only: curve points are not charged
            t0 = clock()
            while clock() - t0 < min(every, budget - spent):
                bpb.append(run(i))
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
    run = step_fn(model, data, B, T, harness_config(kind, layout, 1e-4, 0))
    for i in range(2):
        run(i)
    wall, cpu = [], []
    for i in range(2, 2 + job["steps"]):
        t0, c0 = time.perf_counter(), time.process_time()
        run(i)
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    step, cpu_step = statistics.median(wall), statistics.median(cpu)
    out.update(step_s=step, bytes_per_s=B * (T - 1) / step, cpu_s=cpu_step, bytes_per_cpu_s=B * (T - 1) / cpu_step)
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


def ttq_table(rows: list[dict]) -> str:
    """Time to quality, best first: one row a model and learning rate."""
    lines = ["| model | lr | params | steps | bytes seen | val bits/byte |", "|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: r.get("val_bpb", float("inf"))):
        if "error" in r:
            lines.append(f"| {r['model']} | {r.get('lr', 2e-3):g} | - | - | - | error: {r['error'][:60]} |")
        else:
            lines.append(
                f"| {r['model']} | {r.get('lr', 2e-3):g} | {r['params'] / 1e6:.2f}M | {r['steps_done']} | "
                f"{r['bytes_seen']:,} | {r['val_bpb']:.3f} |"
            )
    return "\n".join(lines)


def best_lr(rows: list[dict]) -> str:
    """A sweep's best learning rate per model, as `--lr-of` takes it."""
    best = {}
    for r in rows:
        if "val_bpb" in r and (r["model"] not in best or r["val_bpb"] < best[r["model"]]["val_bpb"]):
            best[r["model"]] = r
    return ",".join(f"{m}={r['lr']:g}" for m, r in best.items())


def plot_curves(rows: list[dict], path: str) -> None:
    """Validation bits per byte against CPU-minutes, one line a model (and learning rate)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in rows:
        if r.get("curve"):
            ax.plot(
                [c["minutes"] for c in r["curve"]],
                [c["val_bpb"] for c in r["curve"]],
                marker=".",
                label=f"{r['model']} (lr {r['lr']:g})",
            )
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
    p.add_argument("--warmup", type=int, default=20, help="time to quality: linear warm-up steps, then constant")
    p.add_argument("--curve-every", type=float, default=0.0, help="time to quality: val bpb every this many minutes")
    p.add_argument("--plot", default=None, help="time to quality: write the learning curves to this PNG")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--source", default="shakespeare")
    p.add_argument("--learntok-layout", default=None, help="learntok's down-mid-up blocks, e.g. 1-4-1 (default 2-3-2)")
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
    if args.minutes and args.parallel:  # side by side, each on a CPU-time budget
        jobs = [{**base, "model": m, "T": T, "B": B, "lr": lr} for T, B in shape_list for m in models for lr in lrs[m]]
        procs = [start_job(j) for j in jobs]
        rows = [finish_job(j, p) for j, p in zip(jobs, procs)]
    for T, B in [] if rows else shape_list:
        rounds = {(m, lr): [] for m in models for lr in (lrs[m] if args.minutes else lrs[m][:1])}
        for _ in range(1 if args.minutes else args.rounds):  # round-robin: load changes hit every model alike
            for (m, lr), done in rounds.items():
                prev = done[-1] if done else {}
                r = run_job({**base, "model": m, "T": T, "B": B, "width": prev.get("width"), "lr": lr})
                print(json.dumps(r), file=sys.stderr, flush=True)
                done.append(r)
        rows += [median_round(rs) for rs in rounds.values()]
    load = os.getloadavg()
    print(f"torch {torch.__version__}, {args.threads} threads, fp32 CPU, load average {load[0]:.1f} at the end\n")
    if args.minutes:
        for T, B in shape_list:
            print(
                f"Validation bits per byte after {args.minutes:g} min ({args.clock} clock) of training, "
                f"T = {T}, B = {B}\n"
            )
            print(ttq_table([r for r in rows if r["T"] == T and r["B"] == B]) + "\n")
            print(f"best learning rates: --lr-of {best_lr([r for r in rows if r['T'] == T and r['B'] == B])}\n")
        if args.plot:
            plot_curves(rows, args.plot)
    else:
        for key in ("bytes_per_s", "bytes_per_cpu_s"):
            print(throughput_table(rows, shape_list, key) + "\n")
            print(ratios(rows, shape_list, key) + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "args": vars(args), "load": load}, indent=2))


if __name__ == "__main__":
    main()
