"""Scoring a model on data: bits per byte of its final head over every window of a split, the
boundary and whitespace rates, per-document and per-window figures, K samples and the
log-mean-exp bound (docs/design.md §4). The one evaluation: training's periodic validation,
`eval`, `compare` and the comparisons of finished runs all score here; loading a run and the
`eval` command's report are learntok.evaluation.evaluate's.

Every figure is a sum kept on the device (no host sync per batch), declared once in
learntok.evaluation.metrics. Shapes: B batch, T bytes (BOS at t = 0), K samples.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from learntok.data.dataset import ByteData
from learntok.evaluation.metrics import Batch, EvalOptions, columns, finite_sums, kept_metrics, report
from learntok.model.metrics import bits_per_byte
from learntok.model.objective import token_ce
from learntok.run.distributed import DistEnv, all_reduce
from learntok.util.errors import ConfigError
from learntok.util.progress import Progress
from learntok.util.runtime import autocast, inference


def evaluate_bpb(model, data: ByteData, split: str, opts: EvalOptions, env: DistEnv | None = None) -> dict:
    """The one evaluation of learntok (training's periodic validation, `eval`, `compare`): bits
    per byte of the final head over every byte of `split` (at most opts.max_bytes), the boundary
    and whitespace rates, and optionally per-document figures and boundary quality: the metrics
    of learntok.evaluation.metrics.METRICS that `opts` keeps.

    Every figure is a sum kept on the device (no host sync per batch) and added over ranks once
    at the end: with `env` (world > 1), rank r scores batches r, r + world, ... and the result is
    the same as one process's. Batch i draws its boundaries from seed + i. With K samples, `bpb`
    is the mean over samples and `bpb_bound` the log-mean-exp bound (module docstring)."""
    device = next(model.parameters()).device
    rank, world = (env.rank, env.world) if env is not None else (0, 1)
    metrics = kept_metrics(opts)
    n_docs = data.n_documents(split) if opts.per_document else 0
    sizes = {name: n for m in metrics for name, n in m.sums(opts, n_docs).items()}
    sums = {name: torch.zeros(n, dtype=torch.float64, device=device) for name, n in sizes.items()}
    windows: list[torch.Tensor] = []  # per_window: (2, B) nats and bytes per batch
    if opts.per_window and world > 1:
        raise ConfigError("per-window figures are for one process (they pair two models' windows)")
    with inference(model, opts.seed, device):
        for i, (x, doc_ids) in enumerate(_batches(data, split, opts)):
            if i % world != rank:
                continue
            torch.manual_seed(opts.seed + i)
            batch = score_batch(model, x.to(device), doc_ids, opts)
            for m in metrics:
                m.add(sums, batch)
            if opts.per_window:
                windows.append(torch.stack([batch.ce.mean(0), batch.n_row]))
    flat = torch.cat(list(sums.values()))  # one all-reduce for every sum
    if world > 1:
        flat = all_reduce(flat, env)
    values = finite_sums(flat.cpu().numpy(), f"bits per byte on the {split} split")  # the one host sync
    totals = dict(zip(sums, np.split(values, np.cumsum(list(sizes.values()))[:-1])))
    result = report(metrics, totals, opts)
    if opts.per_window:
        per = torch.cat(windows, dim=1).cpu().numpy() if windows else np.zeros((2, 0))
        result.update(window_nats=per[0], window_bytes=per[1])
    return result


def _batches(data: ByteData, split: str, opts: EvalOptions):
    """The split's evaluation batches (x (B, T), document ids (B,)), behind a bar with opts.progress."""
    batches = data.eval_batches(split, opts.batch_size, opts.seq_len, max_bytes=opts.max_bytes)
    if opts.progress is None:
        return batches
    total = data.n_eval_batches(split, opts.batch_size, opts.seq_len, opts.max_bytes)
    return Progress(batches, desc=opts.progress, unit="batch", total=total)


def score_batch(model, x: torch.Tensor, doc_ids: torch.Tensor, opts: EvalOptions) -> Batch:
    """K forwards of x (B, T): each row's CE nats per sample, its scored bytes, the first sample's decisions."""
    ce_k = []
    for k in range(opts.k):
        with autocast(x.device, opts.amp):
            out = decide_and_forward(model, x, opts)
        ce, mask = token_ce(out.logits, x)  # (B, T-1)
        ce_k.append(ce.double().sum(1))  # (B,)
        if k == 0:
            a = out.boundaries  # (B, T) the first sample's decisions
    return Batch(x, torch.stack(ce_k), mask.double().sum(1), a, doc_ids, opts)  # ce (K, B)


def decide_and_forward(model, x: torch.Tensor, opts: EvalOptions):
    """The model's forward on x (B, T): with its own decisions, or with opts.boundaries_from's. The
    source draws from the evaluation's seeded stream where the model's own decisions would, and the
    model's draws with the decisions given (nawrot still draws its relaxed sample) are discarded, so
    a source that is the model itself gives the model's own evaluation exactly, at every sample k."""
    if opts.boundaries_from is None:
        return model(x, greedy=opts.greedy)
    given = opts.boundaries_from(x)  # (B, T) float 0/1
    with torch.random.fork_rng(devices=[x.device] if x.device.type == "cuda" else []):
        return model(x, boundaries=given, greedy=opts.greedy)


def window_nats(model, data: ByteData, split: str, opts: EvalOptions) -> dict[str, np.ndarray | float]:
    """Per window (row) of `split`: CE nats summed and scored bytes (evaluate_bpb's per-window
    figures, so their totals give its bpb), with the bpb and the boundary and whitespace rates.
    They pair two models (or one model's two sources of decisions) on the same windows."""
    r = evaluate_bpb(model, data, split, dataclasses.replace(opts, per_window=True))
    return {"nats": r["window_nats"], "bytes": r["window_bytes"], **columns(r, WINDOW_COLUMNS)}


WINDOW_COLUMNS = ("bpb", "rate", "whitespace_rate")  # window_nats's figures beside its windows


def paired_difference(a: dict, b: dict) -> tuple[float, float]:
    """bpb of `a` minus bpb of `b` on the same windows (corpus level), and the standard error of
    the mean per-window difference (windows of one document are not independent: a lower bound)."""
    diff = bits_per_byte(a["nats"] - b["nats"], a["bytes"])
    mean = float(bits_per_byte(a["nats"].sum() - b["nats"].sum(), a["bytes"].sum()))
    return mean, float(diff.std(ddof=1) / math.sqrt(len(diff))) if len(diff) > 1 else 0.0
