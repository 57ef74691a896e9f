"""`hnet`: H-Net's dynamic chunking (routing, ratio loss; EMA de-chunking and confidence by its chunker).

H-Net decides hard boundaries and passes gradients to its router with a straight-through
estimator instead of the score function. Our backbone pools by *selection* (a token is its
boundary byte's vector), which is not differentiable in the decisions, so H-Net's gradient goes
through its de-chunking, as in H-Net itself: the chunker `ema` (learntok.nn.chunkers.EMADechunk)
smooths the tokens with each token's p and multiplies every byte's vector by a confidence factor
whose forward value is exactly 1 and whose gradient reaches the router. log_prob is 0 (no
score-function term); the ratio loss (strategy.ratio_weight) holds the rate.

Shapes: B batch, T bytes (BOS at t = 0), S tokens, D width.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from learntok.boundaries.base import Backbone, BoundaryOutput, BoundaryStrategy, register
from learntok.boundaries.common import counted_at, decision_mask
from learntok.boundaries.rate import OffsetKnob, controlled_scan
from learntok.util.ranges import ranged


def routing_probs(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """H-Net's boundary probability p[t] = (1 - cos(q[t-1], k[t])) / 2, p[0] = 1.
    q, k (B, T, D) -> p (B, T) fp32 in [0, 1]."""
    cos = F.cosine_similarity(q[:, :-1].float(), k[:, 1:].float(), dim=-1)  # (B, T-1)
    p = ((1.0 - cos) / 2.0).clamp(0.0, 1.0)
    return torch.cat([torch.ones_like(p[:, :1]), p], dim=1)


def ratio_loss(a: torch.Tensor, p: torch.Tensor, mask: torch.Tensor, rate: float) -> torch.Tensor:
    """H-Net's ratio loss toward a compression ratio N = 1/rho*:
    N/(N-1) * ((N-1) F G + (1 - F)(1 - G)), F the fraction of boundaries (no gradient), G the
    mean boundary probability, over scored bytes. Minimal (= 1) when F = G = 1/N."""
    n_ratio = 1.0 / rate
    count = mask.sum().clamp(min=1)
    f = ((a * mask).sum() / count).detach()
    g = (p * mask).sum() / count
    return n_ratio / (n_ratio - 1.0) * ((n_ratio - 1.0) * f * g + (1.0 - f) * (1.0 - g))


@dataclass
class HNetConfig:
    ratio_weight: float = ranged(0.03, ge=0)  # weight of the ratio loss (aux_loss; H-Net's alpha = 0.03)


@register("hnet", config=HNetConfig)
class HNetRouting(OffsetKnob, BoundaryStrategy):
    """H-Net's dynamic chunking (Hwang, Wang & Gu 2025, "Dynamic Chunking for End-to-End
    Hierarchical Sequence Modeling"; goombalab/hnet `hnet/modules/dc.py`), in plain PyTorch.

    Routing: q, k projections (identity at init), p[t] = (1 - cos(q[t-1], k[t]))/2, p[0] = 1,
    boundary iff p[t] > 0.5 (deterministic; `greedy` changes nothing). De-chunking and
    confidence: its chunker, `ema` (learntok.nn.chunkers.EMADechunk), which reads p from
    BoundaryOutput.probs. Aux loss: the ratio loss toward 1/rho*.

    Inference-time rate control (learntok.boundaries.rate): `rate_offset` (logit units, 0 unless
    calibrated, not saved) moves the routing threshold: boundary iff logit(p) + offset > 0,
    i.e. p > sigmoid(-offset) (0.5 at offset 0, H-Net's rule); online rate control
    (`rate_control`) moves the offset further, byte by byte, with the decisions made."""

    chunker = "ema"  # H-Net's EMA de-chunking and confidence (learntok.nn.chunkers.EMADechunk)
    online_rate = True
    rate_offset_range = (-12.0, 12.0)  # logit units: the routing threshold is sigmoid(-offset)
    rate_gain_unit = 0.1  # online control moves the threshold by 0.1 of a logit's step (docs/rate.md)

    def __init__(self, cfg: Backbone):
        super().__init__(cfg)
        self.q = nn.Linear(cfg.byte_width, cfg.byte_width, bias=False)
        self.k = nn.Linear(cfg.byte_width, cfg.byte_width, bias=False)
        self.register_buffer("rate_offset", torch.zeros(()), persistent=False)  # raising it raises the rate

    def threshold(self) -> torch.Tensor:
        """The routing threshold on p: sigmoid(-rate_offset)."""
        return torch.sigmoid(-self.rate_offset)

    def init_weights(self, generator: torch.Generator | None = None) -> None:
        # identity: at first the router compares consecutive encoder vectors directly (H-Net)
        nn.init.eye_(self.q.weight)
        nn.init.eye_(self.k.weight)

    def forward(self, h, x, boundaries=None, early_logits=None, greedy=False) -> BoundaryOutput:
        p = routing_probs(self.q(h.float()), self.k(h.float()))  # (B, T) fp32, differentiable
        control = self.rate_control
        if boundaries is None and control is None:
            boundaries = (p > self.threshold()).float()
        elif boundaries is None:  # the rule of `step`, delta moving the offset
            pd = p.detach()
            boundaries = controlled_scan(
                lambda t, prev, delta: pd[:, t] > torch.sigmoid(-(self.rate_offset + delta)), decision_mask(x), control
            )
        a = boundaries.float().clone()
        a[:, 0] = 1.0
        aux = self.opts.ratio_weight * ratio_loss(a, p, decision_mask(x).float(), self.cfg.target_rate)
        logits = torch.logit(p.detach().clamp(1e-4, 1 - 1e-4))
        return BoundaryOutput(a, logits, p, torch.zeros_like(a), aux)

    # Incremental decoding: the state is q[t-1] (fp32), which the routing of byte t compares with k[t],
    # and under online rate control the controller's counts.
    def init_state(self, batch, device) -> dict:
        return {"q": torch.zeros(batch, self.cfg.byte_width, device=device), **self.control_init(batch, device)}

    def prefill_state(self, h, x, decisions, early_logits=None) -> dict:
        return {"q": self.q(h[:, -1].float()).float(), **self.control_prefill(decisions, decision_mask(x))}

    def step(self, h, x, t, state, early_logits=None, greedy=False, boundaries=None):
        q, k = self.q(h.float()).float(), self.k(h.float()).float()  # (B, D)
        p = ((1.0 - F.cosine_similarity(state["q"], k, dim=-1)) / 2.0).clamp(0.0, 1.0)  # (B,)
        if t == 0:
            p = torch.ones_like(p)
        control = self.rate_control
        if boundaries is not None:
            a = boundaries.float()
        elif control is None:
            a = (p > self.threshold()).float()
        else:
            a = (p > torch.sigmoid(-(self.rate_offset + control.offset(state["control"])))).float()
        return a, p, {"q": q, **self.control_step(state, a, counted_at(x, t))}
