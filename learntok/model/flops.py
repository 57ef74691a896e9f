"""A model's training FLOPs, counted analytically from its config: the model FLOPs of MFU
(docs/benchmarks.md) and of `config --plan` (docs/reproduce.md). The shapes come from the model
itself, built on the meta device (no memory, no draw from the caller's RNG)."""

from __future__ import annotations

import torch

from learntok.model.aunet import AUNet
from learntok.model.config import ModelConfig


def meta_model(cfg: ModelConfig) -> AUNet:
    """The model on the meta device: its shapes, built in no time (and no draw from the caller's RNG)."""
    with torch.device("meta"), torch.random.fork_rng(devices=[]):
        return AUNet(cfg)


def attended(T: int, window: int | None) -> float:
    """Mean keys a causal query attends to over T positions (a window caps it)."""
    if window is None or window >= T:
        return (T + 1) / 2
    return window - window * (window - 1) / (2 * T)


def matrix_weights(*modules: torch.nn.Module) -> int:
    return sum(p.numel() for m in modules for p in m.parameters() if p.dim() == 2)


def model_flops(cfg: ModelConfig, seq_len: int, rate: float | None = None) -> dict[str, float]:
    """Training FLOPs (forward + backward) per byte, by part: 6 per weight per position it acts on
    (Kaplan et al. 2020), byte-level weights (encoder, decoder, both heads, the strategy's own) on
    every byte, token-level ones (mid) on a fraction `rate` (default rho*) of them; attention
    12 D per causal (query, key) pair (4 D forward, twice that backward): the byte window at byte
    level, the tokens so far at token level. Lookups, norms and elementwise work are left out.
    The model FLOPs of MFU (docs/reproduce.md)."""
    rate, model = cfg.target_rate if rate is None else rate, meta_model(cfg)
    attention = cfg.byte_width * (cfg.n_down + cfg.n_up) * attended(seq_len, cfg.attn_window)
    attention += cfg.d_model * rate * cfg.n_mid * attended(int(rate * seq_len), None)
    return {
        "byte level": 6.0 * matrix_weights(model.encoder, model.decoder, model.head, model.early_head, model.strategy),
        "token level": 6.0 * rate * matrix_weights(model.mid),
        "attention": 12.0 * attention,
    }


def flops_per_byte(cfg: ModelConfig, seq_len: int, rate: float | None = None) -> float:
    return sum(model_flops(cfg, seq_len, rate).values())
