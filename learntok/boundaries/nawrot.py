"""Dynamic pooling as published (`nawrot`): Nawrot, Chorowski, Lancucki & Ponti, ACL 2023,
"Efficient Transformers with Dynamic Token Pooling"; PiotrNawrot/dynamic-pooling
(`hourglass.py` BoundaryPredictor 'gumbel', `shortening.py` downsample / upsample).

An MLP predictor's logits, a Gumbel-sigmoid sample hardened with a straight-through estimator,
tokens that are the mean of their segment's encoder vectors (the straight-through decisions
inside the pooling matrix, so the language-model loss reaches the predictor), and a binomial
prior toward rho*. The segment of a token, in Nawrot's convention and in learntok's, and why
it is causal: docs/strategies.md ("nawrot"). The segment means are its chunker's
(learntok.nn.chunkers.MeanPool, which carries the running segment sum and count in generation).

Shapes: B batch, T bytes (BOS at t = 0), S tokens, D width.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from learntok.boundaries.base import Backbone, BoundaryOutput, BoundaryStrategy, register
from learntok.boundaries.common import decision_mask, target_logit
from learntok.boundaries.rate import OffsetKnob
from learntok.nn.pooling import straight_through
from learntok.util.ranges import ranged


def binomial_log_prob(k: torch.Tensor, n: torch.Tensor, p: float) -> torch.Tensor:
    """log Binomial(k | n, p), differentiable in a real-valued k (lgamma form)."""
    log_choose = torch.lgamma(n + 1) - torch.lgamma(k + 1) - torch.lgamma(n - k + 1)
    return log_choose + k * math.log(p) + (n - k) * math.log1p(-p)


def relaxed_bernoulli(logits: torch.Tensor, u: torch.Tensor, temperature: float) -> torch.Tensor:
    """Reparameterised relaxed Bernoulli (Maddison et al. 2017; Jang et al. 2017) from uniforms
    u: s = sigmoid((l + log u - log(1 - u)) / tau). s > 0.5 iff l + logistic noise > 0, so the
    hard decision is a Bernoulli(sigmoid(l)) sample whatever tau is."""
    return torch.sigmoid((logits + torch.log(u) - torch.log1p(-u)) / temperature)


def binomial_prior_loss(hard: torch.Tensor, mask: torch.Tensor, rate: float) -> torch.Tensor:
    """Nawrot et al.'s prior: -log Binomial(#boundaries | #bytes, rho*) / #bytes, mean over rows.
    hard (B, T) carries the straight-through gradient; mask (B, T) marks scored bytes."""
    n = mask.sum(1)  # (B,)
    k = (hard * mask).sum(1)  # (B,)
    return (-binomial_log_prob(k, n, rate) / n.clamp(min=1)).mean()


@dataclass
class DynamicPoolingConfig:
    temperature: float = ranged(0.5, gt=0)  # relaxed-Bernoulli (Gumbel-sigmoid) temperature (Nawrot's `temp`)
    prior_weight: float = ranged(1.0, ge=0)  # weight of the binomial prior loss (aux_loss)
    hidden_mult: float = ranged(1.0, gt=0)  # predictor hidden width / D (Nawrot's is 4; 1 keeps older runs loadable)


@register("nawrot", config=DynamicPoolingConfig)
class DynamicPooling(OffsetKnob, BoundaryStrategy):
    """Dynamic pooling: MLP predictor, Gumbel-sigmoid straight-through sample, mean pooling with
    the straight-through decisions in the pooling matrix, binomial prior. Greedy: a[t] = l[t] > 0.
    log_prob is 0 (no score-function term); logits are reported detached, so the objective's
    L_rate does not act on them: the prior holds the rate. Inference-time rate control
    (learntok.boundaries.rate): `rate_offset` (logit units, 0 unless calibrated; not saved) is added to the
    predictor's logit."""

    chunker = "mean"  # a token is its segment's mean (learntok.nn.chunkers.MeanPool)
    rate_offset_range = (-12.0, 12.0)  # logit units, added to the predictor's logit

    def __init__(self, cfg: Backbone):
        super().__init__(cfg)
        hidden = max(1, round(self.opts.hidden_mult * cfg.byte_width))
        self.mlp = nn.Sequential(nn.Linear(cfg.byte_width, hidden), nn.GELU(), nn.Linear(hidden, 1))
        self.register_buffer("rate_offset", torch.zeros(()), persistent=False)  # raising it raises the rate

    def init_weights(self, generator: torch.Generator | None = None) -> None:
        # small weights and a bias at logit(rho*): the predictor starts at the target rate
        for layer in (self.mlp[0], self.mlp[2]):
            nn.init.normal_(layer.weight, std=self.cfg.init_std, generator=generator)
            nn.init.zeros_(layer.bias)
        nn.init.constant_(self.mlp[2].bias, target_logit(self.cfg.target_rate))

    def forward(self, h, x, boundaries=None, early_logits=None, greedy=False) -> BoundaryOutput:
        logits = self.mlp(h.float()).squeeze(-1).float() + self.rate_offset  # (B, T)
        u = torch.rand(x.shape, device=x.device).clamp_(1e-6, 1 - 1e-6)  # (B, T) draws
        soft = relaxed_bernoulli(logits, u, self.opts.temperature)
        soft = torch.cat([torch.ones_like(soft[:, :1]), soft[:, 1:]], dim=1)  # BOS: constant 1
        if boundaries is None:
            boundaries = (logits > 0).float() if greedy else (soft > 0.5).float()
        a = boundaries.float().clone()
        a[:, 0] = 1.0
        aux = self.opts.prior_weight * binomial_prior_loss(
            straight_through(a, soft), decision_mask(x).float(), self.cfg.target_rate
        )
        zeros = torch.zeros_like(a)
        return BoundaryOutput(a, logits.detach(), torch.sigmoid(logits.detach()), zeros, aux, relaxed=soft)

    # Incremental decoding: a decision reads byte t alone, so the state is empty (the segment's
    # running sum is the chunker's).
    def prefill_state(self, h, x, decisions, early_logits=None) -> dict:
        return {}

    def step(self, h, x, t, state, early_logits=None, greedy=False, boundaries=None):
        logits = self.mlp(h.float()).squeeze(-1).float() + self.rate_offset  # (B,)
        if boundaries is None:
            u = torch.rand(x.shape, device=x.device).clamp_(1e-6, 1 - 1e-6)
            hard = (logits > 0) if greedy else relaxed_bernoulli(logits, u, self.opts.temperature) > 0.5
            boundaries = torch.ones_like(logits) if t == 0 else hard.float()
        return boundaries.float(), torch.sigmoid(logits), state
