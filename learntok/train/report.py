"""What a training run reports between its steps: the metrics of the steps since the last log
step, read with one host sync (`MetricWindow`); the periodic validation on the val split and the
line it prints; sample segmentations of held-out texts (segments.txt). Each runs under its own
seed, so none shifts the training RNG (learntok.train.loop).
"""

from __future__ import annotations

import time

import torch
from torch import nn

from learntok.run.config import RunConfig
from learntok.data.dataset import ByteData
from learntok.text.display import render_terminal
from learntok.run.distributed import DistEnv, all_reduce
from learntok.evaluation.metrics import EvalOptions, columns
from learntok.evaluation.score import evaluate_bpb
from learntok.run.labels import covers
from learntok.text.windows import segment_text


def validate(
    model: nn.Module, data: ByteData, run_cfg: RunConfig, amp: torch.dtype | None, env: DistEnv | None
) -> dict[str, float]:
    """The periodic validation: learntok.evaluation.evaluate.evaluate_bpb on at most log.eval_bytes of the
    val split, seeded by train.seed; keys val_bpb, val_boundary_rate, val_whitespace_rate, val_bytes
    (scored) and val_split_bytes (the whole split's: what the figure covers, `validation_line`)."""
    r = evaluate_bpb(model, data, "val", EvalOptions.for_run(run_cfg, max_bytes=run_cfg.log.eval_bytes, amp=amp), env)
    names = ("bpb", "boundary_rate", "whitespace_rate", "bytes", "split_bytes")
    return columns(r, names, "val_", split_bytes=data.n_bytes("val"))


def segments_text(model: nn.Module, texts: list[bytes], seed: int, fsdp: bool = False) -> str:
    """Sample segmentations of held-out texts, one line each, `|` between chunks (segments.txt;
    FSDP: every rank runs the model's whole forward, which gathers its weights)."""
    lines = []
    for text in texts:
        chunks, stats = segment_text(model, text, seed=seed, full_forward=fsdp)
        lines.append(
            f"[rate {stats['boundary_rate']:.3f} ws {stats['whitespace_rate']:.3f}] "
            f"{render_terminal(chunks, color=False)}\n"
        )
    return "".join(lines)


def validation_line(step: int, val: dict[str, float]) -> str:
    """The line training prints for each validation."""
    return (
        f"step {step}: val bpb ({covers(val['val_bytes'], val['val_split_bytes'])}) {val['val_bpb']:.4f}, "
        f"boundary rate {val['val_boundary_rate']:.3f}, "
        f"whitespace rate {val['val_whitespace_rate']:.3f}"
    )


def sample_texts(data: ByteData, n: int = 3, n_bytes: int = 200) -> list[bytes]:
    docs = [d for d in data.documents("val", limit=100) if d.strip()] or data.documents("train", limit=n)
    return [d[:n_bytes] for d in docs[:n]]


class MetricWindow:
    """Per-step metrics summed on the device between log steps and read with one host sync;
    also the first step whose loss was not finite (-1 if none) and the bytes/s since reset."""

    def __init__(self, device: torch.device):
        self.device = device
        self.reset()

    def reset(self) -> None:
        self.sums: dict[str, torch.Tensor] = {}
        self.n, self.t0 = 0, time.perf_counter()
        self.bad = torch.full((), -1, dtype=torch.long, device=self.device)

    def add(self, step: int, metrics: dict[str, torch.Tensor]) -> None:
        nonfinite = ~torch.isfinite(metrics["loss"])
        self.bad = torch.where((self.bad < 0) & nonfinite, torch.full_like(self.bad, step), self.bad)
        self.sums = {k: self.sums.get(k, 0) + v.detach().double() for k, v in metrics.items()}
        self.n += 1

    def read(self, env: DistEnv | None = None) -> tuple[int, dict[str, float], int]:
        """(first non-finite step or -1, mean of each metric and bytes_per_s, bytes in the window).
        With `env` (world > 1) a collective: metrics are averaged over ranks, bytes added."""
        world = env.world if env is not None else 1
        bad = all_reduce(self.bad, env, "max") if world > 1 else self.bad
        sums = torch.stack(list(self.sums.values()))
        sums = all_reduce(sums, env, "mean") if world > 1 else sums
        values = torch.cat([bad.double()[None], sums]).tolist()  # the host sync
        means = {k: v / self.n for k, v in zip(self.sums, values[1:])}
        n_bytes = round(means["n_bytes"] * self.n * world)
        means["bytes_per_s"] = n_bytes / (time.perf_counter() - self.t0)
        return int(values[0]), means, n_bytes
