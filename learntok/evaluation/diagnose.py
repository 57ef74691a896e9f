"""`learntok diagnose`: how noisy is the policy-gradient estimate, with and without each of the
paper's variance-reduction tricks (docs/design.md §4)?

On fixed batches, the boundaries are resampled K times. For every sample, each estimator
variant's gradient on the policy's parameters is computed from the *same* sampled boundaries
with `objective.loss` under ObjectiveConfig(lambda_pi=1, lambda_rate=0, lambda_early=0, ...):
the CE term has no path to the policy, so the gradient is the score-function estimate alone.
Per batch, over the K samples g_1..g_K (P parameters):

    variance = trace of the covariance = sum_p Var_k(g_kp)
    signal   = ||mean_k g_k||^2 - variance / K   (unbiased for ||E g||^2; clipped at 0)
    SNR      = signal / variance                  (of a single-batch estimate; scale-free)

averaged over batches. `cos_to_loo` is the cosine between a variant's mean gradient and that of
`+ batch loo` (unbiased, like raw, but far less noisy), pooled over batches: values well below 1
flag bias (discounting; the `mean` baseline by O(1/B)) or noise left after K samples.
`variance_vs_raw` is the variance relative to the raw estimator's.

Shapes: B batch, T bytes, K samples, P policy parameters.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from learntok.run.checkpoint import load_run
from learntok.data.dataset import ByteData
from learntok.util.errors import ConfigError
from learntok.model.config import position_bytes
from learntok.util.files import write_text_atomic
from learntok.model.objective import ObjectiveConfig, loss
from learntok.run.plots import plot_diagnose
from learntok.util.progress import Progress
from learntok.util.runtime import eval_mode, isolated_rng

# name -> (early_baseline, gamma, batch_baseline)
VARIANTS: dict[str, tuple[bool, float, str]] = {
    "raw (-CE)": (False, 1.0, "none"),
    "+ early exit": (True, 1.0, "none"),
    "+ discount 0.9": (False, 0.9, "none"),
    "+ discount 0.99": (False, 0.99, "none"),
    "+ batch mean": (False, 1.0, "mean"),
    "+ batch loo": (False, 1.0, "loo"),
    "all (mean)": (True, 0.99, "mean"),
    "all (loo)": (True, 0.99, "loo"),
}


def variant_config(early: bool, gamma: float, baseline: str) -> ObjectiveConfig:
    return ObjectiveConfig(
        gamma=gamma, lambda_pi=1.0, lambda_rate=0.0, lambda_early=0.0, batch_baseline=baseline, early_baseline=early
    )


def policy_gradients(model, x: torch.Tensor, samples: int, variants: dict = VARIANTS) -> dict[str, torch.Tensor]:
    """name -> (K, P) flattened gradients on the strategy's parameters, one row per sampled
    segmentation of batch x (B, T); every variant sees the same K samples."""
    params = [p for p in model.strategy.parameters() if p.requires_grad]
    if not params or not model.strategy.has_policy:
        raise ConfigError(f"strategy {model.cfg.boundary!r} has no score-function policy to diagnose")
    configs = {name: variant_config(*v) for name, v in variants.items()}
    grads: dict[str, list[torch.Tensor]] = {name: [] for name in variants}
    for _ in range(samples):
        out = model(x)
        for name, cfg in configs.items():
            total, _ = loss(out, x, cfg)
            g = torch.autograd.grad(total, params, retain_graph=True, allow_unused=True)
            grads[name].append(
                torch.cat(
                    [(gi if gi is not None else torch.zeros_like(p)).flatten() for gi, p in zip(g, params)]
                ).double()
            )
    return {name: torch.stack(g) for name, g in grads.items()}


def gradient_stats(g: torch.Tensor) -> dict[str, float]:
    """Variance (trace of covariance), debiased squared norm of the mean, SNR; g (K, P), K >= 2."""
    K = g.size(0)
    if K < 2:
        raise ConfigError("the variance needs at least 2 samples (--samples)")
    mean = g.mean(0)  # (P,)
    variance = float(g.var(0, unbiased=True).sum())
    signal = max(float(mean.pow(2).sum()) - variance / K, 0.0)
    return {"variance": variance, "signal": signal, "snr": signal / variance if variance > 0 else float("inf")}


def diagnose(
    model,
    batches: list[torch.Tensor],
    samples: int = 16,
    seed: int = 0,
    variants: dict = VARIANTS,
    progress: bool = False,
) -> dict[str, dict[str, float]]:
    """Per variant: variance, signal, snr (means over batches), variance_vs_raw and cos_to_loo;
    with `progress`, progress over the batches (learntok.util.progress: the lines train and eval show)."""
    raw, ref = "raw (-CE)", "+ batch loo"  # variance and direction references
    per_batch, means = {n: [] for n in variants}, {n: [] for n in variants}
    with eval_mode(model), isolated_rng(seed):  # no dropout; boundaries are still sampled
        for x in Progress(batches, desc="diagnose", total=len(batches), unit="batch", enabled=progress):
            for name, g in policy_gradients(model, x, samples, variants).items():
                per_batch[name].append(gradient_stats(g))
                means[name].append(g.mean(0))
    ref_mean = torch.cat(means[ref])
    table = {}
    for name in variants:
        m = torch.cat(means[name])
        row = {k: sum(s[k] for s in per_batch[name]) / len(batches) for k in ("variance", "signal", "snr")}
        row["cos_to_loo"] = float(torch.nn.functional.cosine_similarity(m, ref_mean, dim=0))
        row["variance_vs_raw"] = row["variance"] / max(
            sum(s["variance"] for s in per_batch[raw]) / len(batches), 1e-300
        )
        table[name] = row
    return table


def markdown_table(table: dict[str, dict[str, float]]) -> str:
    lines = ["| estimator | variance | variance / raw | SNR | cos to loo mean |", "| --- | ---: | ---: | ---: | ---: |"]
    for name, r in table.items():
        lines.append(
            f"| {name} | {r['variance']:.3e} | {r['variance_vs_raw']:.3g} | {r['snr']:.3g} | {r['cos_to_loo']:.3f} |"
        )
    return "\n".join(lines)


def run_diagnose(
    path,
    batches: int = 4,
    samples: int = 16,
    batch_size: int | None = None,
    seq_len: int | None = None,
    seed: int = 0,
    out: str | Path | None = None,
    device: str = "cpu",
) -> dict:
    """`learntok diagnose`: fixed training batches of the run's data; writes diagnose.md,
    diagnose.json and diagnose.png into `out` (default RUN/diagnose)."""
    model, run_cfg = load_run(path, device)
    if run_cfg is None:
        raise ConfigError(f"{path} holds no run config (data source): diagnose needs a run or checkpoint folder")
    batch_size = batch_size or min(run_cfg.train.batch_size, 16)
    seq_len = seq_len or min(run_cfg.train.seq_len, 512)
    data = ByteData.from_config(run_cfg.data)
    data.check_window("train", seq_len, batch_size, position_bytes(model.cfg), training=True)
    xs = [data.train_batch(10_000_000 + i, batch_size, seq_len, seed).to(device) for i in range(batches)]
    table = diagnose(model, xs, samples, seed, progress=True)
    out = Path(out) if out else Path(path) / "diagnose"
    out.mkdir(parents=True, exist_ok=True)
    report = {
        "checkpoint": str(path),
        "batches": batches,
        "samples": samples,
        "batch_size": batch_size,
        "seq_len": seq_len,
        "seed": seed,
        "estimators": table,
    }
    write_text_atomic(out / "diagnose.json", json.dumps(report, indent=2) + "\n")
    write_text_atomic(out / "diagnose.md", markdown_table(table) + "\n")
    plot_diagnose(table, out / "diagnose.png")
    report["files"] = [str(out / n) for n in ("diagnose.md", "diagnose.json", "diagnose.png")]
    return report
