"""The sizes a model config may ask for, checked before anything is built: one place for every
reader of a config, a run's (`train`, `config`, `compare`) and a saved folder's (`eval`, `segment`,
`sample`, `from_pretrained`, the Auto classes, lm-eval's `hf` backend).

The bounds are what `config --plan` can describe and what a machine can hold: blocks, weights
(the backbone by D^2 per block, the embedding, and the strategy's own weights: the learned
policy's projection grows with its window), and, for a model about to be built here, the memory
its weights take beside what this process can get."""

from __future__ import annotations

from learntok.boundaries.base import strategy_class
from learntok.model.config import ModelConfig
from learntok.util.errors import ConfigError
from learntok.util.files import memory_budget

MAX_BLOCKS = 1024  # blocks of all three stacks: the largest paper preset has a few dozen
MAX_WEIGHTS = 10**13  # weights the plan can describe (an estimate by d_model**2 per block)
FP32 = 4  # bytes of a weight held to run a model (no gradient, no optimizer state)


def estimated_weights(m: ModelConfig) -> float:
    """About how many weights `m` has: attention (4 W^2) and the gated MLP (3 r W^2) per block at
    its level's width W (the byte levels at d_bytes, the token level at d_model), the projections
    between the two widths, the embedding and both heads, and the boundary strategy's own
    (`BoundaryStrategy.own_weights`)."""
    db, d = m.byte_width, m.d_model
    byte_blocks = (m.n_down + m.n_up) * db**2 * (4 + 3 * m.mlp_ratio_bytes)
    token_blocks = m.n_mid * d**2 * (4 + 3 * m.mlp_ratio_tokens)
    between = 2 * db * d if db != d else 0
    return byte_blocks + token_blocks + between + 3 * m.vocab_size * db + strategy_class(m.boundary).own_weights(m)


def weight_sizes(m: ModelConfig) -> str:
    """The model keys a weight count is made of, with their values, for a message that names them."""
    keys = ("d_model", "d_bytes", "n_down", "n_mid", "n_up", "mlp_ratio_bytes", "mlp_ratio_tokens", "vocab_size")
    sizes = [f"model.{k} {getattr(m, k):g}" for k in keys]
    sizes += [f"strategy.{k} {v:g}" for k, v in m.strategy.items() if type(v) is int and v > 1]
    return ", ".join(sizes)


def check_model_sizes(m: ModelConfig, weight_bytes: int | None = None, device_type: str = "cpu") -> None:
    """Refuse a model no run can build: more than MAX_BLOCKS blocks or MAX_WEIGHTS weights; and,
    with `weight_bytes` (bytes a weight takes: 4 to run it, 16 to train it with AdamW), one whose
    weights do not fit the memory this process can get, on the CPU. One ConfigError naming the keys."""
    blocks, weights = m.n_down + m.n_mid + m.n_up, estimated_weights(m)
    if blocks > MAX_BLOCKS:
        raise ConfigError(
            f"{blocks} blocks (model.n_down + n_mid + n_up), more than {MAX_BLOCKS}: give smaller sizes "
            f"(learntok config --plan shows what a config needs)"
        )
    if weights > MAX_WEIGHTS:
        raise ConfigError(
            f"about {weights:.3g} weights ({weight_sizes(m)}), more than {MAX_WEIGHTS:.0e}: give smaller sizes "
            f"(learntok config --plan shows what a config needs)"
        )
    if weight_bytes and device_type == "cpu":
        need, budget = weights * weight_bytes, memory_budget()
        if need > budget:
            what = "with their gradients and AdamW state" if weight_bytes > FP32 else "in fp32"
            raise ConfigError(
                f"about {weights:.3g} weights ({weight_sizes(m)}) need {need / 2**30:.3g} GiB {what}, more than "
                f"the {budget / 2**30:.3g} GiB this process can get: give smaller sizes"
            )
