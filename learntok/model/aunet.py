"""The autoregressive U-Net over bytes (DESIGN §2).

    embed -> encoder (bytes, sliding window) -> early-exit head
          -> boundary strategy -> downsample (strategy.pool: select boundary bytes) -> mid (tokens, causal)
          -> upsample (byte t reads its latest boundary's token) + skip -> decoder -> head

Shapes: B batch, T bytes (BOS at t = 0), S tokens, D width, V vocabulary.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

import learntok.boundaries  # noqa: F401  (registers the strategies)
from learntok.boundaries.base import build_strategy
from learntok.model.config import ModelConfig
from learntok.model.layers import RMSNorm, Stack
from learntok.model.pooling import num_tokens, upsample


@dataclass
class ModelOutput:
    logits: torch.Tensor             # (B, T, V) next-byte logits of the final head
    early_logits: torch.Tensor       # (B, T, V) next-byte logits of the early-exit head
    boundaries: torch.Tensor         # (B, T) float 0/1 decisions used; [:, 0] == 1
    boundary_logits: torch.Tensor    # (B, T) fp32 policy logits (0 without a policy)
    boundary_probs: torch.Tensor     # (B, T) fp32 P(a_t = 1)
    boundary_log_prob: torch.Tensor  # (B, T) fp32 log pi(a_t | x, a_<t); 0 at BOS / without a policy
    aux_loss: torch.Tensor           # () the strategy's own (weighted) loss
    target_rate: float               # rho*, for the rate loss
    n_tokens: torch.Tensor           # (B,) tokens per sequence


class Head(nn.Module):
    def __init__(self, d: int, vocab: int):
        super().__init__()
        self.norm = RMSNorm(d)
        self.linear = nn.Linear(d, vocab, bias=False)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.linear(self.norm(h))


class AUNet(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        d, nh, base = cfg.d_model, cfg.n_heads, cfg.rope_base
        self.embed = nn.Embedding(cfg.vocab_size, d)
        self.encoder = Stack(cfg.n_down, d, nh, cfg.mlp_ratio_bytes, cfg.attn_window, base)
        self.early_head = Head(d, cfg.vocab_size)
        self.strategy = build_strategy(cfg)
        self.mid = Stack(cfg.n_mid, d, nh, cfg.mlp_ratio_tokens, None, base)
        self.decoder = Stack(cfg.n_up, d, nh, cfg.mlp_ratio_bytes, cfg.attn_window, base)
        self.head = Head(d, cfg.vocab_size)
        self.init_weights()

    @torch.no_grad()
    def init_weights(self) -> None:
        """Linear and embedding weights ~ N(0, init_std); output projections of every block
        scaled by 1/sqrt(2 * n_layers) (GPT-2); norms at 1; the early head starts as a copy of
        the main head (DESIGN §2.3) so the early-exit reward starts near 0."""
        std = self.cfg.init_std
        n_layers = self.cfg.n_down + self.cfg.n_mid + self.cfg.n_up
        for name, p in self.named_parameters():
            if name.startswith("strategy."):
                continue
            if p.dim() == 2:
                scaled = name.endswith("attn.proj.weight") or name.endswith("mlp.down.weight")
                nn.init.normal_(p, std=std / (2 * n_layers) ** 0.5 if scaled else std)
            elif name.endswith("weight"):
                nn.init.ones_(p)
        self.early_head.load_state_dict(self.head.state_dict())
        self.strategy.init_weights()

    def forward(self, x: torch.Tensor, boundaries: torch.Tensor | None = None, greedy: bool = False) -> ModelOutput:
        B, T = x.shape
        pos = torch.arange(T, device=x.device)                   # (T,) byte positions
        h = self.encoder(self.embed(x), pos)                     # (B, T, D)
        early = self.early_head(h)                               # (B, T, V)
        b = self.strategy(h, x, boundaries=boundaries, early_logits=early, greedy=greedy)
        S = num_tokens(b.decisions, self.cfg.token_pad_multiple)
        z, tok_pos = self.strategy.pool(h, b, S)                 # (B, S, D), (B, S) byte offsets
        z = self.mid(z, tok_pos)                                 # (B, S, D); padding is last: causal masking hides it
        z = self.strategy.dechunk(z, b, tok_pos)
        y = h + self.strategy.confidence(upsample(z, b.decisions), b)  # (B, T, D)
        logits = self.head(self.decoder(y, pos))                 # (B, T, V)
        return ModelOutput(
            logits=logits, early_logits=early, boundaries=b.decisions,
            boundary_logits=b.logits, boundary_probs=b.probs, boundary_log_prob=b.log_prob,
            aux_loss=b.aux_loss, target_rate=self.cfg.target_rate,
            n_tokens=b.decisions.sum(1),
        )

    def generate(self, prompt, max_bytes: int = 256, **kwargs):
        """Sample bytes after a prompt with cached incremental decoding: see learntok.generate."""
        from learntok.generate import generate
        return generate(self, prompt, max_bytes, **kwargs)

    def stream(self, prompt, max_bytes: int = 256, **kwargs):
        """Iterator over the generated bytes as they are made: see learntok.generate.stream."""
        from learntok.generate import stream
        return stream(self, prompt, max_bytes, **kwargs)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def save_pretrained(self, path) -> None:
        from learntok.checkpoint import save_model
        save_model(self, path)

    @classmethod
    def from_pretrained(cls, path, map_location="cpu") -> "AUNet":
        from learntok.checkpoint import load_model
        return load_model(path, map_location=map_location)
