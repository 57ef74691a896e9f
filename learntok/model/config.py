"""Model configuration (docs/design.md §2-§3). Every field: meaning and unit, and its valid range
(learntok.util.ranges; checked when a run config is built)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from learntok.util.typed_fields import config_fields
from learntok.data.symbols import N_SYMBOLS, VOCAB_SIZE
from learntok.util.ranges import RATE, ranged


@dataclass
class ModelConfig:
    d_model: int = ranged(128, ge=2)  # residual width D of the token level (and of the byte level unless d_bytes)
    # the byte level's width (0: d_model): narrower bytes put the width where the tokens are, as H-Net
    # does; the mid stack then projects tokens d_bytes -> d_model in and back out (learntok.nn.layers.Stack)
    d_bytes: int = ranged(0, ge=0)
    n_heads: int = ranged(4, ge=1)  # attention heads at every level (head size = its width // n_heads)
    n_down: int = ranged(1, ge=0)  # byte-level encoder blocks
    n_mid: int = ranged(2, ge=0)  # token-level blocks (full causal attention)
    n_up: int = ranged(1, ge=0)  # byte-level decoder blocks
    attn_window: int = ranged(64, ge=1)  # sliding-window size (bytes) of byte-level attention
    mlp_ratio_bytes: float = ranged(1.0, gt=0)  # gated-MLP hidden width / D at byte level
    mlp_ratio_tokens: float = ranged(4.0, gt=0)  # gated-MLP hidden width / D at token level
    vocab_size: int = ranged(VOCAB_SIZE, ge=N_SYMBOLS)  # 256 bytes + BOS + EOS + PAD, padded to a multiple of 64
    rope_base: float = ranged(10000.0, gt=1)  # RoPE base (positions are byte offsets, integers)
    boundary: str = "learned"  # boundary strategy name (see learntok.boundaries)
    target_rate: float = ranged(0.2, RATE)  # rho*: target boundaries per byte
    # pad the token dimension S to a multiple (bounded recompiles); never more than a window's bytes
    token_pad_multiple: int = ranged(8, ge=1, le=2**16)
    init_std: float = ranged(0.02, ge=0)  # std of the normal init of linear and embedding weights
    # train each row at a target drawn from rate_range, told to the policy (docs/rate.md)
    rate_conditioned: bool = False
    rate_range: tuple[float, float] = ranged((0.1, 0.35), RATE)  # the conditioned targets' range (boundaries per byte)
    # rows of a micro-batch sharing one drawn target (the batch baseline compares the rows of one target)
    rows_per_rate: int = ranged(4, ge=2, le=2**24)
    # the boundary strategy's own options (its config class in learntok.boundaries; [strategy] in a run config)
    strategy: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        config_fields(self)
        for name, d in (("d_model", self.d_model), ("d_bytes", self.byte_width)):
            if d % self.n_heads:
                raise ValueError(f"{name} {d} is not a multiple of n_heads {self.n_heads}")
            if (d // self.n_heads) % 2:
                raise ValueError(
                    f"head size {name} / n_heads = {d} / {self.n_heads} = {d // self.n_heads} must be even for RoPE"
                )
        for name, ratio, width in (
            ("mlp_ratio_bytes", self.mlp_ratio_bytes, self.byte_width),
            ("mlp_ratio_tokens", self.mlp_ratio_tokens, self.d_model),
        ):
            if round(ratio * width) < 1:
                raise ValueError(
                    f"{name} {ratio:g} x width {width} rounds to no hidden unit of the MLP: give a ratio of at least {1 / width:.3g}"
                )
        if len(self.rate_range) != 2 or not self.rate_range[0] < self.rate_range[1]:
            raise ValueError(f"rate_range {tuple(self.rate_range)} must be two rates with 0 < low < high < 1")

    @property
    def byte_width(self) -> int:
        """The byte level's width: d_bytes, or d_model when d_bytes is 0."""
        return self.d_bytes or self.d_model


def position_bytes(cfg: ModelConfig) -> int:
    """A lower bound on the memory one position of a forward takes (bytes): its int64 byte, its
    fp32 logits (vocab_size) and one fp32 activation (d_model). Sizes beyond memory are refused
    with it before anything is allocated (ByteData.check_window)."""
    return 8 + 4 * (cfg.vocab_size + cfg.d_model)
