"""Dynamic pooling as published (`nawrot`): Nawrot, Chorowski, Lancucki & Ponti, ACL 2023,
"Efficient Transformers with Dynamic Token Pooling"; PiotrNawrot/dynamic-pooling
(`hourglass.py` BoundaryPredictor 'gumbel', `shortening.py` downsample / upsample).

An MLP predictor's logits, a Gumbel-sigmoid sample hardened with a straight-through estimator,
tokens that are the mean of their segment's encoder vectors (the straight-through decisions
inside the pooling matrix, so the language-model loss reaches the predictor), and a binomial
prior toward rho*. The segment of a token, in Nawrot's convention and in learntok's, and why
it is causal: docs/strategies.md ("nawrot"). Generation carries the running segment sum and
count (`step`, `pool_step`).

Shapes: B batch, T bytes (BOS at t = 0), S tokens, D width.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from learntok.boundaries.base import BoundaryOutput, BoundaryStrategy, register
from learntok.boundaries.common import decision_mask, target_logit
from learntok.boundaries.rate import OffsetKnob
from learntok.nn.config import ModelConfig
from learntok.nn.pooling import downsample
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


def straight_through(a: torch.Tensor, soft: torch.Tensor) -> torch.Tensor:
    """Value a (hard 0/1), gradient of the relaxed sample soft (Nawrot's hard_boundaries)."""
    return a + (soft - soft.detach())


def binomial_prior_loss(hard: torch.Tensor, mask: torch.Tensor, rate: float) -> torch.Tensor:
    """Nawrot et al.'s prior: -log Binomial(#boundaries | #bytes, rho*) / #bytes, mean over rows.
    hard (B, T) carries the straight-through gradient; mask (B, T) marks scored bytes."""
    n = mask.sum(1)  # (B,)
    k = (hard * mask).sum(1)  # (B,)
    return (-binomial_log_prob(k, n, rate) / n.clamp(min=1)).mean()


def mean_pool(h: torch.Tensor, hard: torch.Tensor, S: int) -> torch.Tensor:
    """Token k = mean of the bytes after boundary k-1 up to and including boundary k.
    h (B, T, D), hard (B, T) 0/1 values (hard[:, 0] = 1) that may carry a straight-through
    gradient -> z (B, S, D), zeros past each row's count. Nawrot's pooling matrix: with
    seg[t] = #boundaries strictly before t (differentiable), the weight of byte t in token k is
    1 - (k - seg[t]) where k == seg[t] (value 1) and 0 elsewhere, normalised over t."""
    seg = hard.cumsum(1) - hard  # (B, T) the token byte t belongs to
    k = torch.arange(S, device=h.device, dtype=seg.dtype)  # (S,)
    offset = k[None, :, None] - seg[:, None, :]  # (B, S, T)
    # trailing bytes: no token
    member = (offset.detach() == 0) & (k[None, :, None] < hard.detach().sum(1)[:, None, None])
    w = torch.where(member, 1.0 - offset, torch.zeros_like(offset))  # (B, S, T) value 0/1
    weights = w / (w.sum(-1, keepdim=True) + 1e-9)  # (B, S, T) rows sum to 1 (0 for padding)
    return torch.einsum("bst,btd->bsd", weights.to(h.dtype), h)


def mean_pool_reference(h: torch.Tensor, a: torch.Tensor, S: int) -> torch.Tensor:
    """Plain loops, the reference for `mean_pool`."""
    B, T, D = h.shape
    z = h.new_zeros(B, S, D)
    for b in range(B):
        start, k = 0, 0
        for t in range(T):
            if a[b, t] > 0:
                z[b, k] = h[b, start : t + 1].mean(0)
                start, k = t + 1, k + 1
    return z


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

    rate_offset_range = (-12.0, 12.0)  # logit units, added to the predictor's logit

    def __init__(self, cfg: ModelConfig):
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

    def pool_packed(self, h: torch.Tensor, out: BoundaryOutput, packing) -> torch.Tensor:
        return packing.to_packed(self.pool(h, out, packing.padded_index.size(1))[0])  # (N, D) segment means

    def pool(self, h: torch.Tensor, out: BoundaryOutput, S: int) -> tuple[torch.Tensor, torch.Tensor]:
        _, pos, _ = downsample(h[..., :0], out.decisions, S)  # (B, S) boundary byte offsets (no vectors moved)
        return mean_pool(h, straight_through(out.decisions, out.relaxed), S), pos

    # Incremental decoding: the state is the running sum and count of the current segment
    # (bytes after the last closed boundary, up to and including byte t) and whether a[t] closed it.
    def init_state(self, batch, device) -> dict:
        return {
            "sum": torch.zeros(batch, self.cfg.byte_width, device=device),
            "count": torch.zeros(batch, device=device),
            "closed": torch.zeros(batch, device=device),
        }

    def prefill_state(self, h, x, decisions, early_logits=None) -> dict:
        T = x.size(1)
        t = torch.arange(T, device=x.device)  # (T,)
        before = decisions[:, :-1] * t[None, :-1]  # (B, T-1) boundary offsets before the last byte
        last = before.amax(1, keepdim=True) if T > 1 else torch.full_like(decisions[:, :1], -1.0)  # (B, 1)
        mask = (t[None, :] > last).float()  # (B, T) the last byte's current segment
        return {"sum": (h.float() * mask[..., None]).sum(1), "count": mask.sum(1), "closed": decisions[:, -1].float()}

    def step(self, h, x, t, state, early_logits=None, greedy=False, boundaries=None):
        logits = self.mlp(h.float()).squeeze(-1).float() + self.rate_offset  # (B,)
        if boundaries is None:
            u = torch.rand(x.shape, device=x.device).clamp_(1e-6, 1 - 1e-6)
            hard = (logits > 0) if greedy else relaxed_bernoulli(logits, u, self.opts.temperature) > 0.5
            boundaries = torch.ones_like(logits) if t == 0 else hard.float()
        a = boundaries.float()
        keep = 1.0 - state["closed"]  # (B,) a boundary at t-1 closed the segment
        new = {"sum": state["sum"] * keep[:, None] + h.float(), "count": state["count"] * keep + 1.0, "closed": a}
        return a, torch.sigmoid(logits), new

    def pool_step(self, h: torch.Tensor, state: dict) -> torch.Tensor:
        return (state["sum"] / state["count"][:, None]).to(h.dtype)
