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
them all at once, fairly: each stops at the same CPU budget) (AdamW, lr 2e-3 after 20
warm-up steps, then constant) and reports the
validation bits per byte over the first `--val-bytes` bytes of the validation split
(learntok: sampled boundaries, as a run reports them).

The default models (docs/benchmarks.md's comparison, about 4M parameters):
  learntok learned at rate 1/8 and 0.2, uniform at 0.2: d 224, 7 heads, 2-3-2, w = 8;
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

from learntok import AUNet, ModelConfig, ObjectiveConfig  # noqa: E402
from learntok.data import PAD, VOCAB_SIZE, ByteData, DataConfig  # noqa: E402
from learntok.objective import LN2, loss  # noqa: E402

MODELS = (
    "learntok-learned-1/8",
    "learntok-learned-0.2",
    "learntok-uniform-0.2",
    "plain",
    "x-transformers",
    "megabyte",
    "hnet",
)
LEARNTOK = dict(d_model=224, n_heads=7, n_down=2, n_mid=3, n_up=2)  # the learned policy at its default w = 8


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
        _, strategy, r = kind.split("-")
        return AUNet(
            ModelConfig(
                **{**LEARNTOK, **(layout or {})}, boundary=strategy, target_rate=1 / 8 if r == "1/8" else float(r)
            )
        )
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


def step_fn(model: nn.Module, data: ByteData, B: int, T: int, lr: float, warmup: int = 0):
    """A closure running training step `i` on window batch i; returns the step's bits per byte."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    is_learntok = isinstance(model, AUNet)
    ocfg = ObjectiveConfig()

    def run(i: int) -> float:
        for g in opt.param_groups:
            g["lr"] = lr * min(1.0, (i + 1) / warmup) if warmup else lr
        x = data.train_batch(i, B, T, seed=0)
        if is_learntok:
            total, m = loss(model(x), x, ocfg)
            bpb = m["bpb"]
        else:
            total, bpb = peer_loss(model, x)
        opt.zero_grad(set_to_none=True)
        total.backward()
        opt.step()
        return float(bpb)

    return run


@torch.no_grad()
def val_bpb(model: nn.Module, data: ByteData, B: int, T: int, max_bytes: int) -> float:
    model.eval()
    nats, n = 0.0, 0
    for x, _ in data.eval_batches("val", B, T, max_bytes=max_bytes):
        if isinstance(model, AUNet):
            _, m = loss(model(x), x, ObjectiveConfig())
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
    rate = 1 / 8 if job["model"].endswith("1/8") else 0.2
    width = job.get("width")
    if width is None:
        width = width_for(job["model"], job["target"], T, rate)
    layout = dict(zip(("n_down", "n_mid", "n_up"), map(int, job["layout"].split("-")))) if job.get("layout") else None
    model = build(job["model"], width, T, rate, layout)
    data = ByteData.from_config(DataConfig(source=job["source"]))
    out = {**job, "width": width, "params": n_params(model)}
    if job.get("minutes"):
        run = step_fn(model, data, B, T, lr=2e-3, warmup=20)
        clock = time.process_time if job["clock"] == "cpu" else time.perf_counter
        t0, i = clock(), 0
        while clock() - t0 < 60 * job["minutes"]:
            run(i)
            i += 1
        out.update(steps_done=i, bytes_seen=i * B * (T - 1), val_bpb=val_bpb(model, data, B, T, job["val_bytes"]))
        return out
    run = step_fn(model, data, B, T, lr=1e-4)
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
    lines = ["| model | params | steps | bytes seen | val bits/byte |", "|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | - | - | - | error: {r['error'][:60]} |")
        else:
            lines.append(
                f"| {r['model']} | {r['params'] / 1e6:.2f}M | {r['steps_done']} | {r['bytes_seen']:,} | "
                f"{r['val_bpb']:.3f} |"
            )
    return "\n".join(lines)


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
    unknown = [m for m in models if m not in MODELS]
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
    )
    rows = []
    if args.minutes and args.parallel:  # side by side, each on a CPU-time budget
        jobs = [{**base, "model": m, "T": T, "B": B} for T, B in shape_list for m in models]
        procs = [start_job(j) for j in jobs]
        rows = [finish_job(j, p) for j, p in zip(jobs, procs)]
    for T, B in [] if rows else shape_list:
        rounds = {m: [] for m in models}
        for _ in range(1 if args.minutes else args.rounds):  # round-robin: load changes hit every model alike
            for m in models:
                prev = rounds[m][-1] if rounds[m] else {}
                r = run_job({**base, "model": m, "T": T, "B": B, "width": prev.get("width")})
                print(json.dumps(r), file=sys.stderr, flush=True)
                rounds[m].append(r)
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
    else:
        for key in ("bytes_per_s", "bytes_per_cpu_s"):
            print(throughput_table(rows, shape_list, key) + "\n")
            print(ratios(rows, shape_list, key) + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "args": vars(args), "load": load}, indent=2))


if __name__ == "__main__":
    main()
