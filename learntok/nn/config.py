"""Model configuration (docs/design.md §2-§3). Every field: meaning and unit."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from learntok.data.vocab import VOCAB_SIZE


@dataclass
class ModelConfig:
    d_model: int = 128  # residual width D at every level
    n_heads: int = 4  # attention heads (head size = d_model // n_heads)
    n_down: int = 1  # byte-level encoder blocks
    n_mid: int = 2  # token-level blocks (full causal attention)
    n_up: int = 1  # byte-level decoder blocks
    attn_window: int = 64  # sliding-window size (bytes) of byte-level attention
    mlp_ratio_bytes: float = 1.0  # gated-MLP hidden width / D at byte level
    mlp_ratio_tokens: float = 4.0  # gated-MLP hidden width / D at token level
    vocab_size: int = VOCAB_SIZE  # 256 bytes + BOS + EOS + PAD, padded to a multiple of 64
    rope_base: float = 10000.0  # RoPE base (positions are byte offsets, integers)
    boundary: str = "learned"  # boundary strategy name (see learntok.boundaries)
    target_rate: float = 0.2  # rho*: target boundaries per byte
    token_pad_multiple: int = 8  # pad the token dimension S to a multiple (bounded recompiles)
    init_std: float = 0.02  # std of the normal init of linear and embedding weights
    # the boundary strategy's own options (its config class in learntok.boundaries; [strategy] in a run config)
    strategy: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model {self.d_model} is not a multiple of n_heads {self.n_heads}")
        if (self.d_model // self.n_heads) % 2:
            raise ValueError(f"head size {self.d_model // self.n_heads} must be even for RoPE")
        if not 0.0 < self.target_rate < 1.0:
            raise ValueError(f"target_rate {self.target_rate} must be in (0, 1)")
        if self.attn_window < 1:
            raise ValueError(f"attn_window {self.attn_window} must be >= 1")
