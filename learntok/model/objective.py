"""Training objective (docs/design.md §4): cross-entropy, early-exit loss, and the score-function
(REINFORCE) policy loss with its three variance-reduction tricks, plus the target-rate loss. Losses only: what a batch measures (bits per byte, boundary rates) is
learntok.model.metrics. A baseline with state across steps (an EMA of the rewards, a critic) keeps
it where the rate controller keeps its bias: in the strategy, as a buffer, so that checkpoints and
resume carry it; `batch_baseline` is where its value enters the policy loss.

Shapes: B batch, T bytes (BOS included). Per-byte quantities indexed by t = 0..T-2 predict
x[t+1]; the decision a[t] for t >= 1 is scored against the discounted return G[t].
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from learntok.data.vocab import decision_mask
from learntok.model.metrics import LN2, boundary_stats
from learntok.data.vocab import N_SYMBOLS
from learntok.util.typed_fields import config_fields
from learntok.util.ranges import ranged

BASELINES = ("mean", "loo", "none")
EARLY_FOR = ("all", "policy")


@dataclass
class ObjectiveConfig:
    gamma: float = ranged(0.99, gt=0, le=1)  # time discount of rewards (1.0 = undiscounted)
    lambda_pi: float = ranged(1e-2, ge=0)  # weight of the policy (score-function) loss
    lambda_rate: float = ranged(1e-2, ge=0)  # weight of the target-rate loss
    lambda_early: float = ranged(0.1, ge=0)  # weight of the early-exit head's cross-entropy
    batch_baseline: str = "mean"  # per-position batch baseline: mean | loo | none
    early_baseline: bool = True  # reward = CE_early - CE (else -CE)
    # integral gain of the rate controller (logit units per unit rate error per step; 0 = off)
    rate_gain: float = ranged(0.0, ge=0)
    # the controller's gain over its settling phase, the last rate_settle_frac of the steps (0 = none)
    rate_settle_gain: float = ranged(0.0, ge=0)
    rate_settle_frac: float = ranged(0.1, ge=0, le=1)  # fraction of the steps, at the end, that settle the rate
    # (1 - lambda_early) CE + lambda_early CEe, the authors' convex mix, instead of CE + lambda_early CEe
    early_mix: bool = False
    # which strategies train with the early-exit loss: all | policy (the authors': strategies without a policy at weight 0)
    early_for: str = "all"

    def __post_init__(self) -> None:
        config_fields(self)
        if self.batch_baseline not in BASELINES:
            raise ValueError(f"batch_baseline {self.batch_baseline!r} is not one of {BASELINES}")
        if self.early_mix and self.lambda_early > 1:
            raise ValueError(
                f"lambda_early {self.lambda_early} must be <= 1 with early_mix "
                f"(the weights are 1 - lambda_early and lambda_early)"
            )
        if self.early_for not in EARLY_FOR:
            raise ValueError(f"early_for {self.early_for!r} is not one of {EARLY_FOR}")


def rate_gain_at(cfg: ObjectiveConfig, step: int, steps: int) -> float:
    """The rate controller's gain after optimizer step `step` (0-based) of `steps`: rate_gain,
    then rate_settle_gain over the last ceil(rate_settle_frac * steps) steps when it is set
    (docs/tuning.md, item 4). A function of the step alone, so a resumed run is unchanged."""
    settle = math.ceil(cfg.rate_settle_frac * steps) if cfg.rate_settle_gain > 0 else 0
    return cfg.rate_settle_gain if step >= steps - settle else cfg.rate_gain


def objective_for(cfg: ObjectiveConfig, has_policy: bool) -> ObjectiveConfig:
    """The objective a strategy trains with. With early_for = "policy", a strategy without a
    score-function policy (uniform, bpe, nawrot, hnet, ...) gets lambda_early = 0: the early-exit
    head exists for the policy's reward, and the authors train their baselines at an early-exit
    weight of 0 (training_defaults.json; only sequential.json sets 0.1, docs/reproduce.md)."""
    if cfg.early_for == "policy" and not has_policy:
        return dataclasses.replace(cfg, lambda_early=0.0)
    return cfg


def token_ce(logits: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-byte next-byte cross-entropy in nats, fp32. logits (B, T, V), x (B, T) ->
    ce (B, T-1), mask (B, T-1) float, 1 where the target is a real symbol (byte or EOS; not PAD)."""
    target = x[:, 1:]  # (B, T-1)
    mask = (target < N_SYMBOLS - 1).float()  # PAD is the last symbol
    logp = F.log_softmax(logits[:, :-1].float(), dim=-1)  # (B, T-1, V)
    ce = -logp.gather(-1, target.clamp(max=logits.size(-1) - 1).unsqueeze(-1)).squeeze(-1)
    return ce * mask, mask


def batch_baseline(r: torch.Tensor, mask: torch.Tensor, kind: str, target: torch.Tensor | None = None) -> torch.Tensor:
    """Subtract, at each position t, a baseline computed over the batch (masked).
    mean: the batch mean (the paper; biased by O(1/B)). loo: the mean of the *other*
    samples (leave-one-out; independent of a sample's own decisions, so unbiased). r, mask (B, T').
    With per-row targets (B,) (rate-conditioned training), each row is compared with the rows
    of its own target only: rows cut at another rate earn systematically other rewards, which
    would enter every advantage as noise (docs/rate.md)."""
    if kind == "none":
        return r * mask
    if target is None:
        total = (r * mask).sum(0, keepdim=True)  # (1, T')
        count = mask.sum(0, keepdim=True)  # (1, T')
    else:
        same = (target[:, None] == target[None, :]).to(r.dtype)  # (B, B) rows of one target
        total, count = same @ (r * mask), same @ mask  # (B, T') sums over each row's group
    if kind == "mean":
        base = total / count.clamp(min=1)
    elif kind == "loo":
        base = (total - r * mask) / (count - mask).clamp(min=1)
    else:
        raise ValueError(f"unknown batch baseline {kind!r}; known: {BASELINES}")
    return (r - base) * mask


def discount(r: torch.Tensor, gamma: float) -> torch.Tensor:
    """G[t] = sum_{j >= t} gamma^(j-t) r[j] along the last dim, on the device.
    Hillis-Steele doubling of the linear recurrence G[t] = r[t] + gamma G[t+1]: log2(T) steps,
    O(T) memory each; after the step with shift s, G[t] sums r[t .. t + 2s - 1]."""
    g = r.clone()
    T = r.size(-1)
    shift, factor = 1, gamma
    while shift < T:
        g = g + factor * F.pad(g[..., shift:], (0, shift))
        shift, factor = shift * 2, factor * factor
    return g


def discount_reference(r: torch.Tensor, gamma: float) -> torch.Tensor:
    """Plain loop, the reference for `discount`."""
    g = torch.zeros_like(r)
    run = torch.zeros_like(r[..., 0])
    for t in range(r.size(-1) - 1, -1, -1):
        run = r[..., t] + gamma * run
        g[..., t] = run
    return g


def policy_loss(log_prob: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """L_pi = -(1/N) sum_{b,t} log pi(a_t | x, a_<t) * G_t.

    The estimator: score function (REINFORCE) of E_a[CE_mean] with reward r_t = CE_early_t - CE_t
    (early-exit relative reward; -CE_t without it), minus a per-position batch baseline
    (mean / leave-one-out / none), discounted G_t = sum_{j>=t} gamma^(j-t) r~_j (G_t includes
    r_t: a_t changes what byte t reads). Summed over sampled decisions that have a target
    (t = 1..T-2) and divided by N, the count of target bytes CE_mean divides by, so that with
    gamma = 1, no early baseline, and an unbiased baseline it is exact in expectation.
    log_prob (B, T), returns (B, T-1) detached, mask (B, T-1)."""
    lp = log_prob[:, 1:-1]  # decisions t = 1..T-2
    g = (returns * mask)[:, 1:]  # G_t for the same t
    return -(lp * g.detach()).sum() / n


def rate_loss(
    logits: torch.Tensor, probs: torch.Tensor, mask: torch.Tensor, target: float | torch.Tensor
) -> torch.Tensor:
    """L_rate = mean(l) * stopgrad(mean(p) - rho*): pushes every logit by the same amount
    toward the target rate. Means over sampled positions with a target (B, T) -> scalar. With
    per-row targets (B,), each row's logits toward its own target: the byte-weighted mean over
    rows of mean_b(l) * stopgrad(mean_b(p) - rho_b)."""
    m = mask[:, 1:]
    n = m.sum().clamp(min=1)
    if isinstance(target, torch.Tensor):
        n_row = m.sum(1)  # (B,)
        mean_l = (logits[:, 1:-1].float() * m).sum(1) / n_row.clamp(min=1)
        mean_p = (probs[:, 1:-1].float() * m).sum(1) / n_row.clamp(min=1)
        return (n_row * mean_l * (mean_p - target).detach()).sum() / n
    mean_l = (logits[:, 1:-1].float() * m).sum() / n
    mean_p = (probs[:, 1:-1].float() * m).sum() / n
    return mean_l * (mean_p - target).detach()


def loss(out, x: torch.Tensor, cfg: ObjectiveConfig):
    """Total loss L = CE_mean + lambda_early CE_early_mean + lambda_pi L_pi + lambda_rate L_rate
    + the strategy's auxiliary loss. `out` is a ModelOutput; x (B, T). Returns (total, metrics);
    metric values are 0-dim tensors (convert with float() when logging)."""
    ce, mask = token_ce(out.logits, x)  # (B, T-1)
    ce_e, _ = token_ce(out.early_logits, x)
    n = mask.sum().clamp(min=1)
    ce_mean, ce_e_mean = ce.sum() / n, ce_e.sum() / n

    reward = (ce_e - ce).detach() if cfg.early_baseline else -ce.detach()
    per_row = out.target_rate if isinstance(out.target_rate, torch.Tensor) else None
    adv = batch_baseline(reward, mask, cfg.batch_baseline, per_row)
    returns = discount(adv, cfg.gamma)
    l_pi = policy_loss(out.boundary_log_prob, returns, mask, n)
    l_rate = rate_loss(out.boundary_logits, out.boundary_probs, mask, out.target_rate)
    aux = out.aux_loss

    ce_weight = 1.0 - cfg.lambda_early if cfg.early_mix else 1.0
    total = ce_weight * ce_mean + cfg.lambda_early * ce_e_mean + cfg.lambda_pi * l_pi + cfg.lambda_rate * l_rate + aux
    metrics = {
        "loss": total.detach(),
        "ce": ce_mean.detach(),
        "ce_early": ce_e_mean.detach(),
        "bpb": ce_mean.detach() / LN2,
        "bpb_early": ce_e_mean.detach() / LN2,
        "policy_loss": l_pi.detach(),
        "rate_loss": l_rate.detach(),
        "aux_loss": aux.detach(),
        "n_bytes": n.detach(),
    }
    metrics.update(boundary_stats(x, out.boundaries, out.boundary_probs))
    if per_row is not None:  # how far rows land from their own targets
        real = decision_mask(x)[:, 1:].float()
        metrics["target_rate_error"] = (
            (out.boundaries[:, 1:] * real).sum(1) - per_row * real.sum(1)
        ).sum() / real.sum().clamp(min=1)
    return total, metrics
