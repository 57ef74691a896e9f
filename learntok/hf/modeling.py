"""`LearntokForCausalLM`: a learntok AU-Net behind `transformers`' PreTrainedModel (docs/transformers.md).

The wrapper holds an `AUNet` (`.aunet`) and changes nothing in it: the logits are the model's own.
What it adds is the convention `transformers` callers follow:

- rows may come padded (`attention_mask` 0 on the left, as generate() pads a batch, or on the
  right): each row's real ids are read from position 0, as learntok reads a row, and the logits
  are put back where the ids were (0 at padding);
- a row that does not start with BOS is read after one (learntok.data.encode), so a caller that
  adds no special tokens (lm-evaluation-harness's default) scores what learntok's adapter scores;
- `labels` give the mean cross-entropy in nats of every label that is not -100 (`transformers`'
  shift: logits at t predict label t + 1); over a window's bytes, loss / ln 2 is bits per byte,
  the figure of `learntok eval` (tests/test_hf.py).

Boundaries are decided by `config.boundaries`: "greedy" (p > 0.5, the default, as learntok's
tokenizer, `segment`, `sample` and `generate` decide) or "sample" (as training and `learntok eval`
draw, under `config.boundary_seed`). generate() recomputes the whole prefix at every new byte:
learntok's own caches (learntok.model.generate, `AUNet.generate`) are not wired to `transformers`'
cache classes (docs/transformers.md measures the difference).

Weights are read and written by learntok itself (learntok.model.pretrained: safetensors, no
pickle), so `from_pretrained` reads a run folder, a checkpoint or model folder, a shipped name
and a folder `save_pretrained` wrote, and learntok reads the latter back bit for bit.

Shapes: B batch, T ids, V vocabulary.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
from transformers import GenerationConfig, GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from learntok.data.vocab import BOS, EOS, N_SYMBOLS, PAD, VOCAB_SIZE
from learntok.hf.config import LearntokConfig
from learntok.hf.export import write_export
from learntok.model.aunet import AUNet
from learntok.model.pretrained import read_model
from learntok.util.runtime import PrivateRNG


@dataclass
class LearntokCausalLMOutput(CausalLMOutputWithPast):
    """CausalLMOutputWithPast and the boundaries the model decided, (B, T) float 0/1 at the ids'
    positions (0 at padding); `past_key_values` is always None (generate() recomputes)."""

    boundaries: torch.Tensor | None = None


def compact_rows(
    input_ids: torch.Tensor, attention_mask: torch.Tensor
) -> tuple[torch.Tensor, list[tuple[int, int, int]]]:
    """Rows as learntok reads them: each row's real ids (attention_mask 1, one contiguous run)
    from position 0, after a BOS unless they start with one, PAD on the right. Returns x (B, T')
    and per row (first real position in input_ids, number of real ids, offset of the first in x)."""
    rows, spans = [], []
    for ids, mask in zip(input_ids, attention_mask.bool()):
        where = mask.nonzero().flatten()  # (n,) positions of the real ids
        start, n = (int(where[0]), where.numel()) if where.numel() else (0, 0)
        if n and int(where[-1]) - start + 1 != n:
            raise ValueError("LearntokForCausalLM: attention_mask must mark one contiguous run of ids per row")
        real = ids[start : start + n]
        lead = int(n == 0 or int(real[0]) != BOS)  # a BOS in front of rows without one
        rows.append(torch.cat([real.new_full((lead,), BOS), real]))
        spans.append((start, n, lead))
    x = torch.nn.utils.rnn.pad_sequence(rows, batch_first=True, padding_value=PAD)  # (B, T')
    return x, spans


def place(values: torch.Tensor, spans: list[tuple[int, int, int]], T: int) -> torch.Tensor:
    """values (B, T', ...) at the compacted rows' positions -> (B, T, ...) at the ids' positions, 0 elsewhere."""
    out = values.new_zeros((values.size(0), T, *values.shape[2:]))
    for b, (start, n, lead) in enumerate(spans):
        out[b, start : start + n] = values[b, lead : lead + n]
    return out


class LearntokForCausalLM(PreTrainedModel, GenerationMixin):
    config_class = LearntokConfig
    base_model_prefix = "aunet"
    main_input_name = "input_ids"
    _no_split_modules: list[str] = []

    def __init__(self, config: LearntokConfig, aunet: AUNet | None = None):
        super().__init__(config)
        self.aunet = aunet if aunet is not None else AUNet(config.model_config())
        if config.trained_seq_len:
            self.aunet.trained_seq_len = config.trained_seq_len  # save_pretrained records it
        # bytes and EOS only: BOS, PAD and the table's padding are never drawn (learntok.model.generate.sample_next)
        suppress = [BOS, PAD, *range(N_SYMBOLS, VOCAB_SIZE)]
        self.generation_config = GenerationConfig(
            bos_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD, suppress_tokens=suppress, use_cache=False
        )

    def _init_weights(self, module) -> None:
        """Nothing: AUNet.init_weights initialised the model when it was built."""

    def get_input_embeddings(self) -> torch.nn.Module:
        return self.aunet.embed

    def get_output_embeddings(self) -> torch.nn.Module:
        return self.aunet.head.linear

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> LearntokCausalLMOutput:
        """Logits (B, T, V) of the id after each position; with `labels`, the mean cross-entropy
        (nats) of the labels that are not -100. Arguments that do not apply to this model
        (position ids, caches, use_cache) are accepted and ignored: positions are each row's own."""
        if input_ids is None or input_ids.dim() != 2:
            raise ValueError("LearntokForCausalLM: give input_ids (B, T), byte ids from LearntokByteTokenizer")
        B, T = input_ids.shape
        mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
        if mask.shape != input_ids.shape:
            raise ValueError(f"LearntokForCausalLM: attention_mask {tuple(mask.shape)} is not input_ids' {(B, T)}")
        x, spans = compact_rows(input_ids, mask)
        greedy = self.config.boundaries == "greedy"
        with PrivateRNG(self.config.boundary_seed, x.device).active():
            out = self.aunet(x, greedy=greedy)
        logits = place(out.logits, spans, T)  # (B, T, V)
        loss = None
        if labels is not None:
            target = labels[:, 1:].to(logits.device)  # (B, T-1): logits at t predict label t+1
            loss = torch.nn.functional.cross_entropy(
                logits[:, :-1].float().reshape(-1, logits.size(-1)), target.reshape(-1), ignore_index=-100
            )
        return LearntokCausalLMOutput(loss=loss, logits=logits, boundaries=place(out.boundaries, spans, T))

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, **kwargs) -> dict:
        """The whole prefix at every step (no cache: see the module's docstring)."""
        return {"input_ids": input_ids, "attention_mask": attention_mask}

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, config=None, **kwargs):
        """A learntok run folder (latest checkpoint), checkpoint or model folder, shipped name, or
        a folder `save_pretrained` / `learntok export` wrote; read by learntok (safetensors).
        Of `transformers`' keywords, `dtype` / `torch_dtype` and `device_map` (one device) are
        applied; the settings of `config` (boundaries, boundary_seed) and of keywords of that name
        are kept; hub keywords (revision, trust_remote_code, ...) have nothing to do for a folder."""
        files = read_model(os.fspath(pretrained_model_name_or_path))
        settings = {k: getattr(config, k) for k in ("boundaries", "boundary_seed") if config is not None}
        settings.update({k: kwargs.pop(k) for k in ("boundaries", "boundary_seed") if k in kwargs})
        hf_config = LearntokConfig.from_learntok(files.config, files.trained_seq_len, **settings)
        hf_config.name_or_path = os.fspath(pretrained_model_name_or_path)
        model = cls(hf_config, AUNet.from_files(files))
        dtype = kwargs.get("dtype", kwargs.get("torch_dtype"))
        if isinstance(dtype, str) and dtype != "auto":
            dtype = getattr(torch, dtype)
        if isinstance(dtype, torch.dtype):
            model = model.to(dtype)
        device = kwargs.get("device_map")
        if isinstance(device, dict):  # {"": device}: the whole model on one device
            device = set(device.values()).pop() if len(set(device.values())) == 1 else None
        if isinstance(device, (str, int, torch.device)) and device != "auto":
            model = model.to(device)
        return model.eval()

    def save_pretrained(self, save_directory, *args, **kwargs) -> None:
        """Write a folder both learntok and `transformers` read (learntok.hf.export.write_export)."""
        write_export(self.aunet, self.config.learntok, save_directory)
