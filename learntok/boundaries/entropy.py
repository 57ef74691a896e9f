"""`entropy`: BLT's rule, a boundary where the early-exit head is unsure of the next byte, with
a threshold that tracks the target rate.

Shapes: B batch, T bytes, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from learntok.boundaries.base import BoundaryOutput, BoundaryStrategy, register
from learntok.boundaries.common import counted_at, decision_mask, fixed_output
from learntok.boundaries.rate import OffsetKnob, controlled_scan
from learntok.data.vocab import is_byte
from learntok.util.ranges import ranged


def next_byte_entropy(early_logits: torch.Tensor) -> torch.Tensor:
    """H[t] = entropy (nats, fp32) of the early head's distribution over the byte after t.
    (B, T, V) -> (B, T)."""
    logp = torch.log_softmax(early_logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


def entropy_boundaries(entropy: torch.Tensor, threshold: torch.Tensor) -> torch.Tensor:
    """BLT's global-threshold rule: byte t starts a token when H[t-1], the uncertainty about
    byte t given bytes < t, exceeds the threshold. (B, T) -> (B, T) float, a[:, 0] = 1."""
    a = (entropy[:, :-1] > threshold).float()  # (B, T-1): decision for t = 1..T-1
    return torch.cat([torch.ones_like(a[:, :1]), a], dim=1)


@dataclass
class EntropyConfig:
    gain: float = ranged(2.0, ge=0)  # threshold step (nats) per unit rate error per training step


@register("entropy", config=EntropyConfig)
class EntropyBoundaries(OffsetKnob, BoundaryStrategy):
    """Boundaries where the early-exit head is unsure of the next byte (BLT, Pagnoni et al. 2024).

    The decision at t uses H[t-1] (the early head at t-1 predicting byte t), so it reads bytes < t
    only. The threshold tracks the (1 - rho*) quantile of H causally, by feedback on the realised
    rate after each training forward (`update_threshold`); a forward decides with the threshold
    from earlier batches. No gradient. Why feedback rather than an EMA of quantiles:
    docs/strategies.md ("entropy"). Inference-time rate control (learntok.boundaries.rate): `rate_offset`
    (nats, 0 unless calibrated, not saved) lowers the threshold, H[t-1] > thr - offset; online
    rate control (`rate_control`) moves it further, byte by byte, with the decisions made."""

    reads_early_head = True  # refused where the objective leaves the head untrained (config.check_early_head)
    online_rate = True
    rate_offset_range = (-8.0, 8.0)  # nats; H lies in [0, ln 256 = 5.5]
    rate_gain_unit = 0.1  # online control moves the threshold by 0.1 of a logit's step (docs/rate.md)

    def __init__(self, cfg):
        super().__init__(cfg)
        self.register_buffer("thr", torch.zeros(()))  # the threshold on H, nats
        self.register_buffer("updates", torch.zeros((), dtype=torch.long))  # training updates so far
        self.register_buffer("rate_offset", torch.zeros(()), persistent=False)  # raising it raises the rate

    def init_weights(self, generator: torch.Generator | None = None) -> None:
        self.thr.zero_()
        self.updates.zero_()

    def threshold(self) -> torch.Tensor:
        """The current threshold (0 before any update)."""
        return self.thr

    @torch.no_grad()
    def update_threshold(self, entropy: torch.Tensor, x: torch.Tensor) -> None:
        """One step of the quantile tracker on H[t-1] over real target bytes (no host sync)."""
        real = is_byte(x[:, 1:])  # (B, T-1)
        h, n = entropy[:, :-1], real.sum()  # selecting the real bytes would be a host sync
        rho = self.cfg.target_rate
        first = torch.nanquantile(torch.where(real, h, float("nan")).flatten()[: 2**24], 1.0 - rho)  # its size limit
        rate = ((h > self.thr) & real).sum() / n.clamp(min=1)
        tracked = self.thr + self.opts.gain * (rate - rho)
        updated = torch.where(self.updates > 0, tracked, first)
        self.thr.copy_(torch.where(n > 0, updated, self.thr))  # a batch without real bytes changes nothing
        self.updates.add_((n > 0).long())

    def forward(self, h, x, boundaries=None, early_logits=None, greedy=False) -> BoundaryOutput:
        if early_logits is None:
            raise ValueError("the entropy strategy needs the early head's logits")
        entropy = next_byte_entropy(early_logits.detach())  # (B, T)
        limit, control = self.threshold() - self.rate_offset, self.rate_control
        if boundaries is None and control is None:
            boundaries = entropy_boundaries(entropy, limit)
        elif boundaries is None:  # the rule of `step`, delta moving the limit
            boundaries = controlled_scan(
                lambda t, prev, delta: entropy[:, t - 1] > limit - delta, decision_mask(x), control
            )
        if self.training:
            self.update_threshold(entropy, x)
        return fixed_output(boundaries)

    # Incremental decoding: the state is H[t-1], which decides a[t] (the threshold is frozen), and
    # under online rate control the controller's counts.
    def init_state(self, batch, device) -> dict:
        return {"entropy": torch.zeros(batch, device=device), **self.control_init(batch, device)}

    def prefill_state(self, h, x, decisions, early_logits=None) -> dict:
        return {"entropy": next_byte_entropy(early_logits[:, -1]), **self.control_prefill(decisions, decision_mask(x))}

    def step(self, h, x, t, state, early_logits=None, greedy=False, boundaries=None):
        limit, control = self.threshold() - self.rate_offset, self.rate_control
        if boundaries is None:
            if t == 0:
                boundaries = torch.ones(x.shape, device=x.device)
            elif control is None:
                boundaries = (state["entropy"] > limit).float()
            else:
                boundaries = (state["entropy"] > limit - control.offset(state["control"])).float()
        a = boundaries.float()
        return a, a, {"entropy": next_byte_entropy(early_logits), **self.control_step(state, a, counted_at(x, t))}
