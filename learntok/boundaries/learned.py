"""The learned boundary policy (docs/design.md §3; Dauncey & Wattenhofer, ICML 2026).

From the encoder vector h[t], v[t] = W norm(h[t]) + c holds w numbers. The logit mixes the
current byte with the previous w-1 decisions:

    l[t] = softcap( s * ( v[t][w-1] + sum_{k=1..w-1} v[t][w-1-k] a[t-k] ) + logit(rho*) + bias )

Decisions before position 0 count as 0; a[0] = 1 (BOS) is never sampled or scored. `bias` is
the rate controller's integral term (a buffer, 0 unless objective.rate_gain > 0).

Sampling with w > 1 is sequential in t: `sample_scan` runs it on the device, vectorised over
B, without a host sync, from pre-drawn uniforms; then `policy_logits` recomputes l for the
sampled decisions in one parallel, differentiable pass. With w = 1 everything is parallel.
Under online rate control (`rate_control`, docs/rate.md) the offset moves with the decisions
made, so every w is sequential: `controlled_scan` with `byte_logit`, the rule `step` uses.
Shapes: B batch, T bytes, D width, W = w.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from learntok.boundaries.base import Backbone, BoundaryOutput, BoundaryStrategy, PolicyTerms, register
from learntok.boundaries.common import counted_at, decision_mask, target_logit
from learntok.boundaries.rate import OffsetKnob, RateCondition, controlled_scan
from learntok.util.ranges import ranged


def softcap(z: torch.Tensor, cap: float) -> torch.Tensor:
    return cap * torch.tanh(z / cap)


def past_decisions(a: torch.Tensor, w: int) -> torch.Tensor:
    """(B, T) -> (B, T, w-1): [..., k-1] = a[t-k] for k = 1..w-1 (0 before position 0)."""
    cols = [F.pad(a[:, :-k], (k, 0)) if k < a.size(1) else torch.zeros_like(a) for k in range(1, w)]
    return torch.stack(cols, dim=-1) if cols else a.new_zeros(*a.shape, 0)


def byte_logit(v: torch.Tensor, past: torch.Tensor, scale: float, offset, cap: float) -> torch.Tensor:
    """One byte's logit: v (B, W) fp32, past (B, W-1) = a[t-(w-1) .. t-1], offset () or (B,) -> (B,).
    The one rule of the controlled scan and of generation's step, so that they decide alike."""
    mix = v[:, -1] + (v[:, :-1] * past).sum(-1)  # same order as policy_logits
    return softcap(scale * mix + offset, cap)


def uniform_draws(shape, device: torch.device) -> torch.Tensor:
    """The policy's draws u in (0, 1) (a[t] = 1 iff u[t] < p[t]): the forward takes all bytes'
    at once, generation's step one byte's."""
    return torch.rand(shape, device=device).clamp_(1e-7, 1 - 1e-7)


def policy_logits(v: torch.Tensor, a: torch.Tensor, scale: float, offset: float, cap: float) -> torch.Tensor:
    """Parallel logits for given decisions. v (B, T, W) fp32, a (B, T) -> l (B, T)."""
    w = v.size(-1)
    coef = v[..., :-1].flip(-1)  # (B, T, W-1): [..., k-1] = v[t][w-1-k]
    mix = v[..., -1] + (coef * past_decisions(a.to(v.dtype), w)).sum(-1)
    return softcap(scale * mix + offset, cap)


@torch.no_grad()
def sample_scan(
    v: torch.Tensor, u: torch.Tensor, scale: float, offset, cap: float, greedy: bool = False
) -> torch.Tensor:
    """Sample decisions on the device, no host sync. v (B, T, W) fp32, u (B, T) uniforms in
    (0, 1) -> a (B, T) float, a[:, 0] = 1. a[t] = 1 iff u[t] < sigmoid(l[t]) iff logit(u[t]) < l[t]
    (greedy: 0 < l[t]). w = 1 is parallel; small windows (or CUDA) use the parallel map scan,
    larger windows on CPU the sequential loop (fewer total operations there)."""
    B, T, w = v.shape
    thr = torch.zeros_like(u) if greedy else torch.logit(u)  # (B, T)
    if w == 1:
        a = (thr < softcap(scale * v[..., 0] + offset, cap)).to(v.dtype)
        a[:, 0] = 1.0
        return a
    if w <= 5 or v.is_cuda:
        return _map_scan(v, thr, scale, offset, cap)
    return _loop_scan(v, thr, scale, offset, cap)


def _loop_scan(v, thr, scale, offset, cap):
    """Sequential in t, vectorised over B: three small ops per byte. The soft cap is inverted
    once up front (thr < c tanh(z / c) iff c atanh(thr / c) < z), so each step is a dot product
    with the last w-1 decisions and a comparison."""
    B, T, w = v.shape
    ratio = thr / cap
    inv = torch.where(
        ratio >= 1,
        torch.full_like(thr, float("inf")),
        torch.where(
            ratio <= -1, torch.full_like(thr, -float("inf")), cap * torch.atanh(ratio.clamp(-1 + 1e-7, 1 - 1e-7))
        ),
    )
    need = inv - (scale * v[..., -1] + offset)  # (B, T): a[t] = 1 iff need[t] < mix
    coef = scale * v[..., :-1]  # (B, T, W-1): [..., j] multiplies a[t-(w-1)+j]
    buf = v.new_zeros(B, T + w - 1)  # buf[:, t + w - 1] = a[t]; zeros before 0
    buf[:, w - 1] = 1.0  # BOS
    for t in range(1, T):
        mix = torch.linalg.vecdot(coef[:, t], buf[:, t : t + w - 1])  # (B,)
        torch.lt(need[:, t], mix, out=buf[:, t + w - 1])
    return buf[:, w - 1 :]


def _map_scan(v, thr, scale, offset, cap):
    """Parallel prefix scan over a finite state machine. The state after byte t is the last
    w-1 decisions as bits (bit 0 = a[t]); for every possible state we compute the decision at
    t+1 in parallel, giving a map state -> state per byte; composing the maps is associative,
    so a Hillis-Steele scan (log2 T gathers over B x T x 2^(w-1)) yields every state at once."""
    B, T, w = v.shape
    n, n_states = w - 1, 1 << (w - 1)
    states = torch.arange(n_states, device=v.device)
    bits = ((states[:, None] >> torch.arange(n, device=v.device)) & 1).to(v.dtype)  # (Sn, W-1): bit j = a[t-j]
    coef = scale * v[..., :-1].flip(-1)  # (B, T, W-1): [..., j] multiplies a[t-1-j]
    logits = (scale * v[..., -1] + offset).unsqueeze(-1) + coef @ bits.T  # (B, T, Sn)
    decide = (thr.unsqueeze(-1) < softcap(logits, cap)).long()  # (B, T, Sn) decision at t given state at t-1
    maps = ((states << 1) & (n_states - 1)) | decide[:, 1:]  # (B, T-1, Sn) state at t-1 -> state at t
    d = 1
    while d < T - 1:  # maps[i] <- maps[i] o maps[i-d]
        maps = torch.cat([maps[:, :d], torch.gather(maps[:, d:], -1, maps[:, :-d])], dim=1)
        d *= 2
    state = maps[..., 1]  # start from state 1 (a[0] = 1)
    ones = torch.ones(B, 1, dtype=v.dtype, device=v.device)
    return torch.cat([ones, (state & 1).to(v.dtype)], dim=1)


def sample_reference(v: torch.Tensor, u: torch.Tensor, scale: float, offset: float, cap: float) -> torch.Tensor:
    """A plain Python loop over bytes and batch rows, the reference for `sample_scan`."""
    B, T, w = v.shape
    a = torch.zeros(B, T)
    for b in range(B):
        a[b, 0] = 1.0
        for t in range(1, T):
            z = float(v[b, t, w - 1])
            for k in range(1, w):
                if t - k >= 0:
                    z += float(v[b, t, w - 1 - k]) * float(a[b, t - k])
            logit = cap * math.tanh((scale * z + offset) / cap)
            a[b, t] = float(u[b, t] < 1.0 / (1.0 + math.exp(-logit)))
    return a


def bernoulli_log_prob(logits: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """log pi(a | l) = a log sigmoid(l) + (1 - a) log sigmoid(-l), fp32."""
    return a * F.logsigmoid(logits) + (1.0 - a) * F.logsigmoid(-logits)


@dataclass
class LearnedConfig:
    """The learned policy's options ([strategy] when model.boundary is learned or frozen)."""

    window: int = ranged(8, ge=1)  # w: the logit mixes the current byte with w-1 past decisions
    # s: scaling of the policy's raw outputs v (keeps p near rho* while v is O(1))
    logit_scale: float = ranged(1.0 / 16, gt=0)
    softcap: float = ranged(6.0, gt=0)  # c: the logit's soft cap, c * tanh(z / c) (logit units)


@register("learned", config=LearnedConfig)
class LearnedPolicy(OffsetKnob, BoundaryStrategy):
    has_policy = True
    online_rate = True
    samples = True
    conditionable = True
    rate_offset_range = (-24.0, 24.0)  # logit units; the soft cap (6) saturates well inside

    @classmethod
    def own_weights(cls, cfg: Backbone) -> int:
        """The projection to the window's w logits: (byte width + 1) x w."""
        return (cfg.byte_width + 1) * int(cfg.strategy.get("window", cls.Config.window))

    def __init__(self, cfg: Backbone):
        super().__init__(cfg)
        self.norm = nn.RMSNorm(cfg.byte_width, elementwise_affine=False)
        self.proj = nn.Linear(cfg.byte_width, self.opts.window)
        self.offset = target_logit(cfg.target_rate)
        self.register_buffer("rate_bias", torch.zeros(()))  # integral term of the rate controller
        if cfg.rate_conditioned:
            self.condition = RateCondition(*cfg.rate_range, cfg.rows_per_rate, cfg.target_rate)

    def init_weights(self, generator: torch.Generator | None = None) -> None:
        # small weights: p starts near rho* everywhere (s = 1/16 keeps it there while v is O(1))
        nn.init.normal_(self.proj.weight, std=self.cfg.init_std, generator=generator)
        nn.init.zeros_(self.proj.bias)
        self.rate_bias.zero_()
        if self.condition is not None:
            self.condition.bias.zero_()

    def row_offset(self, batch: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The offset of the logit, () or (B,) for a rate-conditioned policy, and each row's
        target rate (B,) (None unconditioned): logit(rho*) + rate_bias, or RateCondition's."""
        if self.condition is None:
            return self.offset + self.rate_bias, None
        rho = self.condition.targets(batch, device, self.training)
        return self.condition.offset(rho) + self.rate_bias, rho

    def forward(self, h, x, boundaries=None, early_logits=None, greedy=False) -> BoundaryOutput:
        opts, control = self.opts, self.rate_control
        v = self.proj(self.norm(h.float())).float()  # (B, T, W) fp32
        offset, rho = self.row_offset(x.size(0), x.device)  # () or (B,)
        col = offset[:, None] if offset.dim() else offset  # broadcasts against (B, T)
        counted = decision_mask(x).float()  # (B, T) the decisions the controller counts
        if boundaries is None:
            u = self.uniforms(x)  # (B, T) fixed draws
            if control is None:
                boundaries = sample_scan(v.detach(), u, opts.logit_scale, col, opts.softcap, greedy)
            else:
                thr, vd = torch.zeros_like(u) if greedy else torch.logit(u), v.detach()
                boundaries = controlled_scan(
                    lambda t, prev, delta: (
                        thr[:, t] < byte_logit(vd[:, t], prev, opts.logit_scale, offset + delta, opts.softcap)
                    ),
                    counted,
                    control,
                    opts.window - 1,
                )
        a = boundaries.float().clone()
        a[:, 0] = 1.0
        if control is not None:
            col = col + control.offset(control.counts_before(a, counted))  # (B, T) the offsets used
        logits = policy_logits(v, a, opts.logit_scale, col, opts.softcap)  # (B, T), differentiable
        log_prob = bernoulli_log_prob(logits, a)
        log_prob = torch.cat([torch.zeros_like(log_prob[:, :1]), log_prob[:, 1:]], dim=1)  # 0 at BOS
        if rho is not None and self.training and self.has_policy:
            self.condition.record(rho, a, counted)  # for the per-target controller (adapt_rate)
        return BoundaryOutput(a, logits, torch.sigmoid(logits), log_prob, torch.zeros((), device=h.device), target=rho)

    def uniforms(self, x: torch.Tensor) -> torch.Tensor:
        """The draws a sampled forward makes for bytes x (B, T): u in (0, 1), a[t] = 1 iff
        logit(u[t]) < l[t] (segment's page replays them to re-decide at any offset)."""
        return uniform_draws(x.shape, x.device)

    @property
    def rate_offset(self) -> torch.Tensor:
        """The knob of inference-time rate control (learntok.boundaries.rate): the controller's own bias,
        added to every logit. Raising it raises the rate."""
        return self.rate_bias

    @torch.no_grad()
    def terms(self, h: torch.Tensor) -> PolicyTerms:
        """The logit's terms for encoder vectors h (B, T, D) (`policy_logits` from them, tested)."""
        s = self.opts.logit_scale
        v = self.proj(self.norm(h.float())).float()  # (B, T, W)
        offset = self.row_offset(1, h.device)[0]
        return PolicyTerms(s * v[..., -1], s * v[..., :-1].flip(-1), float(offset.flatten()[0]), self.opts.softcap)

    @torch.no_grad()
    def adapt_rate(self, rate: torch.Tensor, gain: float) -> None:
        """Integral control: bias <- bias - gain * (rate - rho*). Dual ascent on the constraint
        E[a] = rho* in logit space; it holds the long-run rate at the target without pulling
        individual logits toward one value, as a stronger L_rate would."""
        if self.condition is not None:  # per target, from the rows recorded
            self.condition.adapt(gain)
        elif gain > 0:
            self.rate_bias.sub_(gain * (rate.to(self.rate_bias) - self.cfg.target_rate))

    def controller_sums(self) -> torch.Tensor | None:
        return None if self.condition is None else self.condition.pending

    # Incremental decoding: the state is the last w-1 decisions, past[:, j] = a[t-(w-1)+j], and
    # under online rate control the controller's counts.
    def init_state(self, batch: int, device: torch.device) -> dict:
        return {"past": torch.zeros(batch, self.opts.window - 1, device=device), **self.control_init(batch, device)}

    def prefill_state(self, h, x, decisions, early_logits=None) -> dict:
        padded = F.pad(decisions.float(), (self.opts.window - 1, 0))  # (B, W-1 + T): zeros before 0
        return {
            "past": padded[:, decisions.size(1) :],  # (B, W-1) the last w-1 decisions
            **self.control_prefill(decisions, decision_mask(x)),
        }

    @torch.no_grad()
    def step(self, h, x, t, state, early_logits=None, greedy=False, boundaries=None):
        opts, control = self.opts, self.rate_control
        v = self.proj(self.norm(h.float())).float()  # (B, W)
        past = state["past"]  # (B, W-1)
        offset = self.row_offset(v.size(0), v.device)[0]  # () or (B,)
        if control is not None:
            offset = offset + control.offset(state["control"])  # (B,)
        logits = byte_logit(v, past, opts.logit_scale, offset, opts.softcap)  # (B,)
        probs = torch.sigmoid(logits)
        if boundaries is not None:
            a = boundaries.float()
        elif t == 0:
            a = torch.ones_like(logits)  # BOS
        else:
            thr = torch.zeros_like(logits) if greedy else torch.logit(uniform_draws(logits.shape, logits.device))
            a = (thr < logits).float()
        return (
            a,
            probs,
            {"past": torch.cat([past, a[:, None]], dim=1)[:, 1:], **self.control_step(state, a, counted_at(x, t))},
        )
