"""`LearntokConfig`: a learntok model's config as `transformers` holds it (docs/transformers.md).

The learntok config (a model config, or a run's whole config) is kept as it is in `learntok`, and
read with learntok's own strict checks (learntok.model.pretrained.model_config). A learntok
folder's config.json is read as it stands: AutoConfig.from_pretrained reads it through `from_dict`
(its `model_type` is "learntok"). The fields `transformers` reads of every model (token ids,
vocabulary, width, context) are derived from it, never stored beside it.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path

from transformers import PretrainedConfig

from learntok.data.vocab import BOS, EOS, PAD, VOCAB_SIZE
from learntok.util.errors import CheckpointError, ConfigError
from learntok.run.config import RunConfig
from learntok.model.generate import BOUNDARY_MODES, DEFAULT_BOUNDARIES
from learntok.model.pretrained import MODEL_TYPE, STRATEGY, check_format, model_config, trained_seq_len
from learntok.model.config import ModelConfig
from learntok.util.ranges import SEED

DEFAULT_CONTEXT = 1024  # bytes a row, where the folder does not say the window it was trained at
LONGEST_ROW = 2**20  # ids a row may hold: read in windows of the model's window (LearntokConfig.window)


def checked_seed(seed) -> int:
    """`boundary_seed` as an int, when it is a whole number in the seeds' range (learntok.util.ranges.SEED);
    else one ValueError naming it."""
    whole = isinstance(seed, int) or (isinstance(seed, float) and math.isfinite(seed) and seed.is_integer())
    if type(seed) is bool or not whole or SEED.problem(int(seed)):
        raise ValueError(f"LearntokConfig: boundary_seed {seed!r} must be a whole number {SEED}")
    return int(seed)


class LearntokConfig(PretrainedConfig):
    """`learntok`: the config.json of a learntok folder, its format stamp removed (a model config
    or a run config); `trained_seq_len`: the window the weights were trained at; `boundaries`:
    how the forward and generate() decide boundaries ("greedy", p > 0.5, the default of every way
    to cut a text in learntok; "sample" draws as training does, under `boundary_seed`)."""

    model_type = MODEL_TYPE

    def __init__(
        self,
        learntok: dict | None = None,
        trained_seq_len: int | None = None,
        boundaries: str = DEFAULT_BOUNDARIES,
        boundary_seed: int = 0,
        **kwargs,
    ):
        self.learntok = dict(learntok) if learntok is not None else asdict(ModelConfig())
        self.trained_seq_len = trained_seq_len
        if boundaries not in BOUNDARY_MODES:
            raise ValueError(f"LearntokConfig: boundaries {boundaries!r} is not one of {', '.join(BOUNDARY_MODES)}")
        self.boundaries, self.boundary_seed = boundaries, checked_seed(boundary_seed)
        cfg = self.model_config()  # checked here: a config that is no learntok model's fails at once
        for name, value in (("bos_token_id", BOS), ("eos_token_id", EOS), ("pad_token_id", PAD)):
            kwargs.setdefault(name, value)
        kwargs.setdefault("tie_word_embeddings", False)
        super().__init__(**kwargs)
        self.vocab_size, self.hidden_size = cfg.vocab_size, cfg.d_model
        self.num_hidden_layers = cfg.n_down + cfg.n_mid + cfg.n_up
        self.num_attention_heads = cfg.n_heads
        # the longest row a caller may give (lm-evaluation-harness reads it as its context): a row
        # longer than the window is read in `eval`'s windows (LearntokForCausalLM.forward), so a
        # whole document goes in as one row and scores as `learntok eval` scores it
        self.max_position_embeddings = LONGEST_ROW
        if cfg.vocab_size != VOCAB_SIZE:
            raise ValueError(f"LearntokConfig: vocab_size {cfg.vocab_size}, the byte vocabulary's is {VOCAB_SIZE}")

    @property
    def window(self) -> int:
        """Ids a row the model reads at once, BOS included: the window it was trained at."""
        return self.trained_seq_len or DEFAULT_CONTEXT

    def model_config(self) -> ModelConfig:
        """The learntok ModelConfig (strictly checked) of a model config or of a run config's sections."""
        d = self.learntok
        if isinstance(d.get("model"), dict):  # a run config: every section checked as `train` checks it
            try:
                RunConfig.from_dict(d)
            except ConfigError as e:
                raise ValueError(f"LearntokConfig: {e}") from None
            d = {**d["model"], STRATEGY: d.get(STRATEGY, {})}
        try:
            return model_config(d)
        except ConfigError as e:
            raise ValueError(f"LearntokConfig: {e}") from None

    @classmethod
    def from_learntok(cls, config: dict, trained: int | None, **kwargs) -> "LearntokConfig":
        """From a folder's config.json as learntok reads it (learntok.model.pretrained.ModelFiles)."""
        return cls(learntok=config, trained_seq_len=trained, **kwargs)

    @classmethod
    def from_dict(cls, config_dict: dict, **kwargs):
        """A learntok folder's config.json (AutoConfig passes it here), or one this class wrote."""
        if "learntok" not in config_dict:  # a learntok folder's own config.json
            where = Path(kwargs.get("name_or_path") or "config.json")
            native = check_format(dict(config_dict), where)
            try:
                trained = trained_seq_len(native, where)
            except CheckpointError as e:
                raise ValueError(str(e)) from None
            config_dict = {"learntok": native, "trained_seq_len": trained}
        return super().from_dict(config_dict, **kwargs)
