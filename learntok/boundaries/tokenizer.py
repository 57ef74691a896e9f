"""What the two BPE strategies (`bpe`, `bpe-causal`) share: a strategy whose boundaries come from
a `tokenizers` tokenizer kept with the weights, and the bisection of the number of merges that
brings a BPE's rate to rho*.

Shapes: B batch, T bytes.
"""

from __future__ import annotations

import torch

from learntok.boundaries.base import BoundaryOutput, BoundaryStrategy
from learntok.boundaries.common import fixed_output

MAX_VOCAB = 32768  # vocabulary of the BPE that a fit truncates
RATE_TOLERANCE = 0.01  # warn when the reached rate is further than this from rho*


def bisect_merges(n_max: int, rate, target_rate: float) -> tuple[int, float]:
    """The number of merges m in [0, n_max] whose rate(m) is closest to target_rate, by bisection
    (the rate falls as merges are added). Returns (m, rate(m))."""
    lo, hi, tried = 0, n_max, {n_max: rate(n_max)}
    if tried[n_max] <= target_rate:
        while hi - lo > 1:  # invariant: rate(lo) > target >= rate(hi)
            mid = (lo + hi) // 2
            tried[mid] = rate(mid)
            lo, hi = (mid, hi) if tried[mid] > target_rate else (lo, mid)
    best = min(tried, key=lambda m: abs(tried[m] - target_rate))
    return best, tried[best]


class TokenizerStrategy(BoundaryStrategy):
    """A strategy whose boundaries come from a `tokenizers` tokenizer fitted (or loaded) before
    training: the tokenizer's JSON is kept in a uint8 buffer, so it is saved with the weights.
    Subclasses parse what they need from `tokenizer()` and clear it in `_forget_tokenizer`."""

    has_reference = True  # boundary quality is scored against the run's own tokenizer

    def __init__(self, cfg):
        super().__init__(cfg)
        self.register_buffer("tokenizer_json", torch.zeros(0, dtype=torch.uint8))  # the tokenizer, UTF-8 JSON

    def _forget_tokenizer(self) -> None:
        """Drop what was parsed from the previous tokenizer (caches)."""

    def set_tokenizer(self, tokenizer) -> None:
        raw = bytearray(tokenizer.to_str().encode("utf-8"))
        self.tokenizer_json = torch.frombuffer(raw, dtype=torch.uint8).clone().to(self.tokenizer_json.device)
        self._forget_tokenizer()

    def tokenizer(self):
        """The trained tokenizer, parsed from the buffer."""
        if self.tokenizer_json.numel() == 0:
            raise RuntimeError(
                f"the {self.name} strategy has no tokenizer: call model.strategy.fit(train_documents) "
                "(learntok's train does so on a fresh run)"
            )
        from tokenizers import Tokenizer

        return Tokenizer.from_str(bytes(self.tokenizer_json.cpu().numpy()).decode("utf-8"))

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # the tokenizer's size is not known at construction: take the saved buffer's shape
        saved = state_dict.get(prefix + "tokenizer_json")
        if saved is not None:
            self.tokenizer_json = torch.empty_like(saved, device=self.tokenizer_json.device)
            self._forget_tokenizer()
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def reference_starts(self, x: torch.Tensor) -> torch.Tensor:
        return self.boundaries(x) > 0.5

    def boundaries(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T) ids -> (B, T) float decisions."""
        raise NotImplementedError

    def forward(self, h, x, boundaries=None, early_logits=None, greedy=False) -> BoundaryOutput:
        return fixed_output(self.boundaries(x) if boundaries is None else boundaries)
