"""Training: small pure functions around one short loop.

    for step: batch = data.train_batch(step) -> out = model(x) -> loss -> backward, clip, step
              -> adapt the boundary rate; at log / eval / segment / checkpoint steps: sync once.

Metrics stay on the device between log steps (no host sync per step). A loss that is not
finite is recorded on the device and found at the next sync; the run then stops without
saving, and the error names the last good checkpoint. Evaluation and sample segmentations run
under their own seeds, so they never shift the training RNG: `resume` reproduces an
uninterrupted run exactly (on CPU).
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path

import torch
from torch import nn
from tqdm import tqdm

from learntok.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from learntok.config import ConfigError, RunConfig, TrainConfig, save_config
from learntok.data import ByteData
from learntok.model.aunet import AUNet
from learntok.objective import LN2, is_whitespace, loss, token_ce
from learntok.runtime import autocast, isolated_rng, resolve_device, resolve_dtype, seed_everything, set_rng_state
from learntok.segment import render_terminal, segment_text


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite; the message names the step and the last good checkpoint."""


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Learning rate for optimizer step `step` (0-based): linear warm-up to cfg.lr over
    warmup_steps, then cosine decay to min_lr_ratio * lr at the last step."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = min(1.0, (step - cfg.warmup_steps) / max(1, cfg.steps - 1 - cfg.warmup_steps))
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def build_optimizer(model: nn.Module, cfg: TrainConfig, device: torch.device) -> torch.optim.AdamW:
    """AdamW; weight decay on matrices only: not on norms, biases (1-D) or embeddings."""
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2 and id(p) not in embeddings]
    rest = [p for p in params if p.dim() < 2 or id(p) in embeddings]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": rest, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=tuple(cfg.betas), fused=device.type == "cuda")


@torch.no_grad()
def evaluate_bpb(model: nn.Module, data: ByteData, split: str, batch_size: int, seq_len: int,
                 max_bytes: int | None = None, device: torch.device | None = None,
                 amp_dtype: torch.dtype | None = None, seed: int = 0) -> dict[str, float]:
    """Bits per byte of the final head under sampled boundaries (seeded), and the boundary and
    whitespace rates, over `split` (at most max_bytes). Keys: {split}_bpb, {split}_boundary_rate,
    {split}_whitespace_rate, {split}_bytes."""
    device = device or next(model.parameters()).device
    sums = torch.zeros(6, dtype=torch.float64, device=device)   # nats, targets, boundaries, real, ws boundaries, ws
    was_training = model.training
    model.eval()
    with isolated_rng(seed, device):
        for x, _ in data.eval_batches(split, batch_size, seq_len, max_bytes=max_bytes):
            x = x.to(device)
            with autocast(device, amp_dtype):
                out = model(x)
            ce, mask = token_ce(out.logits, x)                   # (B, T-1)
            real = (x[:, 1:] < 256).float()                      # (B, T-1) real bytes (not EOS/PAD)
            ws = is_whitespace(x[:, 1:]).float() * real
            a = out.boundaries[:, 1:].float()
            sums += torch.stack([ce.sum(), mask.sum(), (a * real).sum(), real.sum(), (a * ws).sum(), ws.sum()]).double()
    model.train(was_training)
    nats, n, b, r, bw, w = sums.tolist()
    return {f"{split}_bpb": nats / (LN2 * max(n, 1)), f"{split}_boundary_rate": b / max(r, 1),
            f"{split}_whitespace_rate": bw / max(w, 1), f"{split}_bytes": int(n)}


def write_segments(model: nn.Module, texts: list[bytes], path: Path, step: int, seed: int) -> None:
    """Append sample segmentations of held-out texts, `|` between chunks."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(f"== step {step}\n")
        for text in texts:
            chunks, stats = segment_text(model, text, seed=seed)
            f.write(f"[rate {stats['boundary_rate']:.3f} ws {stats['whitespace_rate']:.3f}] "
                    f"{render_terminal(chunks, color=False)}\n")


def _sample_texts(data: ByteData, n: int = 3, n_bytes: int = 200) -> list[bytes]:
    docs = [d for d in data.documents("val") if d.strip()] or data.documents("train")
    return [d[:n_bytes] for d in docs[:n]]


def _append_jsonl(path: Path, record: dict) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def _truncate_metrics(path: Path, step: int) -> None:
    """Drop lines logged after `step` (written after the checkpoint we resume from)."""
    if path.exists():
        lines = path.read_text(encoding="utf-8").splitlines()
        path.write_text("".join(l + "\n" for l in lines if json.loads(l)["step"] <= step), encoding="utf-8")


def _check_finite(bad: torch.Tensor, last_ckpt: Path | None) -> None:
    first = int(bad)  # the host sync
    if first >= 0:
        where = f"the last good checkpoint is at {last_ckpt}" if last_ckpt else "no checkpoint was saved"
        raise TrainingDiverged(f"loss became NaN or infinite at step {first}; stopped without saving; {where}")


def _start(run_cfg: RunConfig, run_dir: Path, model: AUNet, optimizer, resume: bool) -> tuple[int, int]:
    """Fresh run or resume: returns (completed steps, bytes seen) and restores state in place."""
    if not resume:
        if latest_checkpoint(run_dir) is not None:
            raise ConfigError(f"run folder {run_dir} already has checkpoints; pass --resume or another --out")
        return 0, 0
    ckpt = load_checkpoint(run_dir)
    saved = RunConfig.from_dict(ckpt.config)
    if saved.model != run_cfg.model:
        raise ConfigError(f"cannot resume {ckpt.path}: its model config differs from this run's")
    model.load_state_dict(ckpt.model_state)
    optimizer.load_state_dict(ckpt.state["optimizer"])
    set_rng_state(ckpt.state["rng"])
    _truncate_metrics(run_dir / "metrics.jsonl", ckpt.step)
    return ckpt.step, int(ckpt.state["bytes_seen"])


def train(run_cfg: RunConfig, out_dir: str | Path, resume: bool = False, until: int | None = None,
          progress: bool = True) -> dict:
    """Train (or resume) a run in `out_dir`; stop after step `until` if given (with a checkpoint).
    Returns a summary: val bpb, boundary and whitespace rates, bytes/s, run dir."""
    tc, run_dir = run_cfg.train, Path(out_dir)
    device = resolve_device(tc.device)
    amp = resolve_dtype(tc.dtype, device)
    data = ByteData.from_config(run_cfg.data)
    seed_everything(tc.seed)
    model = AUNet(run_cfg.model).to(device)
    optimizer = build_optimizer(model, tc, device)
    run_dir.mkdir(parents=True, exist_ok=True)
    start, bytes_seen = _start(run_cfg, run_dir, model, optimizer, resume)
    save_config(run_cfg, run_dir / "config.toml")
    metrics_path, end = run_dir / "metrics.jsonl", min(until or tc.steps, tc.steps)
    ckpt = lambda step: save_checkpoint(run_dir, step, model, optimizer, run_cfg,  # noqa: E731
                                        {"bytes_seen": bytes_seen}, keep=tc.keep_checkpoints)
    last_ckpt = latest_checkpoint(run_dir) or ckpt(0)
    fwd = torch.compile(model) if tc.compile else model
    texts = _sample_texts(data) if tc.segment_every else []
    bad = torch.full((), -1, dtype=torch.long, device=device)  # first step with a non-finite loss
    acc, n_acc, window_bytes, t0 = {}, 0, torch.zeros((), dtype=torch.long, device=device), time.perf_counter()
    summary = {"run_dir": str(run_dir), "params": model.num_params()}
    bar = tqdm(range(start, end), initial=start, total=tc.steps, disable=not progress, desc=run_dir.name)
    for step in bar:
        lr = lr_at(step, tc)
        for group in optimizer.param_groups:
            group["lr"] = lr
        x = data.train_batch(step, tc.batch_size, tc.seq_len, tc.seed).to(device, non_blocking=True)
        with autocast(device, amp):
            out = fwd(x)
        total, metrics = loss(out, x, run_cfg.objective)
        optimizer.zero_grad(set_to_none=True)
        total.backward()
        if tc.grad_clip > 0:
            metrics["grad_norm"] = nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
        optimizer.step()
        with torch.no_grad():
            model.strategy.adapt_rate(metrics["boundary_rate"], run_cfg.objective.rate_gain)
        done = step + 1
        bad = torch.where((bad < 0) & ~torch.isfinite(total.detach()), torch.full_like(bad, done), bad)
        acc = {k: acc.get(k, 0) + v.detach().float() for k, v in metrics.items()}
        n_acc, window_bytes = n_acc + 1, window_bytes + metrics["n_bytes"].long()

        at_end, due = done == end, lambda every: every > 0 and done % every == 0  # noqa: E731
        do_eval, do_ckpt = due(tc.eval_every) or at_end, due(tc.ckpt_every) or at_end
        do_segment = due(tc.segment_every) or (at_end and tc.segment_every > 0)
        if not (due(tc.log_every) or do_eval or do_segment or do_ckpt):
            continue
        _check_finite(bad, last_ckpt)
        if n_acc:
            means = dict(zip(acc, (torch.stack(list(acc.values())) / n_acc).tolist()))
            bytes_seen += int(window_bytes)
            dt = time.perf_counter() - t0
            record = {"step": done, "bytes_seen": bytes_seen, "lr": lr, **means, "bytes_per_s": int(window_bytes) / dt}
            _append_jsonl(metrics_path, record)
            bar.set_postfix(loss=f"{means['loss']:.3f}", bpb=f"{means['bpb']:.3f}", rate=f"{means['boundary_rate']:.3f}",
                            ws=f"{means['whitespace_rate']:.2f}", Bps=f"{record['bytes_per_s']:.0f}")
            summary.update(train_bpb=means["bpb"], bytes_per_s=record["bytes_per_s"])
            acc, n_acc, window_bytes = {}, 0, torch.zeros_like(window_bytes)
        if do_eval:
            val = evaluate_bpb(model, data, "val", tc.batch_size, tc.seq_len, tc.eval_bytes, device, amp, tc.seed)
            _append_jsonl(metrics_path, {"step": done, "bytes_seen": bytes_seen, **val})
            summary.update(val)
        if do_segment:
            write_segments(model, texts, run_dir / "segments.txt", done, tc.seed)
        if do_ckpt:
            last_ckpt = ckpt(done)
        t0 = time.perf_counter()  # bytes/s counts training time only
    bar.close()
    return {**summary, "step": end, "checkpoint": str(last_ckpt)}
