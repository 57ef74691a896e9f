"""`LearntokForCausalLM`: a learntok AU-Net behind `transformers`' PreTrainedModel (docs/transformers.md).

The wrapper holds an `AUNet` (`.aunet`) and changes nothing in it: the logits are the model's own.
What it adds is the convention `transformers` callers follow:

- rows may come padded (`attention_mask` 0 on the left, as generate() pads a batch, or on the
  right): each row's real ids are read from position 0, as learntok reads a row, and the logits
  are put back where the ids were (0 at padding);
- a row that does not start with BOS is read after one (learntok.data.encode), so a caller that
  adds no special tokens (lm-evaluation-harness's default) scores what learntok's adapter scores;
- a row longer than the model's window (`config.window`, the `train.seq_len` it was trained at)
  is read as `learntok eval` reads a document: in consecutive windows of window - 1 ids, each
  after its own BOS (learntok.data.dataset.reading_windows), so lm-evaluation-harness's `hf`
  backend, given a whole document as one row, gives `eval`'s bits per byte;
- `labels` give the mean cross-entropy in nats of every label that is not -100 (`transformers`'
  shift: logits at t predict label t + 1); over a window's bytes, loss / ln 2 is bits per byte,
  the figure of `learntok eval` (tests/test_hf.py).

Boundaries are decided by `config.boundaries`: "greedy" (p > 0.5, the default, as learntok's
tokenizer, `segment`, `sample` and `generate` decide) or "sample" (as training and `learntok eval`
draw, under `config.boundary_seed`). generate() decodes with learntok's own caches
(learntok.model.generate: prefill, then one byte at a time) behind `transformers`' Cache interface
(`LearntokCache`); a batch of prompts of different lengths is read whole at every step instead.

Weights are read and written by learntok itself (learntok.model.pretrained: safetensors, no
pickle), so `from_pretrained` reads a run folder, a checkpoint or model folder, a shipped name
and a folder `save_pretrained` wrote, and learntok reads the latter back bit for bit.

Shapes: B batch, T ids, V vocabulary.
"""

from __future__ import annotations

import copy
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import huggingface_hub
import numpy as np
import huggingface_hub.constants
import torch
from transformers import GenerationConfig, GenerationMixin, PreTrainedModel
from transformers.cache_utils import Cache
from transformers.modeling_outputs import CausalLMOutputWithPast
from transformers.utils.hub import convert_file_size_to_int

from learntok.data.dataset import reading_windows
from learntok.data.vocab import BOS, EOS, N_SYMBOLS, PAD, VOCAB_SIZE
from learntok.hf.config import LearntokConfig
from learntok.hf.card import model_card
from learntok.hf.export import EXPORT_FILES, trainer_output, write_export
from learntok.model.aunet import AUNet
from learntok.model.generate import DecodeState, decode_step, prefill
from learntok.model.objective import ObjectiveConfig, objective_for
from learntok.model.objective import loss as objective_loss
from learntok.model.pretrained import load_weights, read_model
from learntok.util import checks
from learntok.util.ranges import TEMPERATURE
from learntok.util.runtime import PrivateRNG
from learntok.util.shipped import hub_folder, shipped_folder


@dataclass
class LearntokCausalLMOutput(CausalLMOutputWithPast):
    """CausalLMOutputWithPast and the boundaries the model decided, (B, T) float 0/1 at the ids'
    positions (0 at padding); `cache` is a LearntokCache when generate() decodes with one."""

    boundaries: torch.Tensor | None = None


class LearntokCache(Cache):
    """learntok's own decoding state (learntok.model.generate.DecodeState: the byte levels'
    sliding-window caches, the token level's cache, the strategy's and the chunker's states) behind `transformers`'
    Cache interface, so that generate() reads each new byte once, as `AUNet.generate` does, instead
    of the whole prefix again. It also holds the boundary draws' random stream across steps."""

    is_compileable = False

    def __init__(self):
        self.state: DecodeState | None = None
        self.rng: PrivateRNG | None = None
        self.seen = 0  # ids read so far, padding included (the length `transformers` asks for)
        self.layers = []

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.seen

    @property
    def is_initialized(self) -> bool:
        return self.state is not None

    def reorder_cache(self, beam_idx: torch.Tensor) -> None:
        """Beam search's step: row r continues beam beam_idx[r] (DecodeState.select)."""
        if self.state is not None:
            self.state.select(beam_idx)


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


def window_rows(x: torch.Tensor, lengths: list[int], window: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Compacted rows x (B, T') (BOS, ids, PAD; `lengths` (B,) BOS included) as the model reads
    them: x itself (and None) when they fit its window; else `eval`'s windows of each row
    (learntok.data.dataset.reading_windows), (W, window) ids each BOS + up to window - 1 ids, and
    the index (B, T') of each position's output in the windows' flattened outputs: position j
    predicts id j + 1, which window j // n of its row predicts at its position j % n (n = window - 1)."""
    B, T = x.shape
    if T <= window:
        return x, None
    n = window - 1
    positions = np.asarray(lengths, dtype=np.int64)  # (B,) each row's positions, each predicting an id
    text, start, _ = reading_windows(positions, window)  # (W,) each
    text, start = torch.from_numpy(text).to(x.device), torch.from_numpy(start).to(x.device)
    col = start[:, None] + torch.arange(1, window, device=x.device)  # (W, n) each window's ids in x
    real = col < torch.as_tensor(positions, device=x.device)[text, None]
    body = torch.where(real, x[text[:, None], col.clamp(max=T - 1)], PAD)  # (W, n)
    rows = torch.cat([body.new_full((len(text), 1), BOS), body], 1)  # (W, window)
    per_row = -(-positions // n)  # (B,) windows of each row
    first = torch.from_numpy(np.cumsum(per_row) - per_row)  # (B,) its first window
    j = torch.arange(T)  # (T,)
    where = (first[:, None] + j // n) * window + j % n  # (B, T'); past a row's length: any valid index
    return rows, where.clamp(max=len(text) * window - 1).to(x.device)


def from_windows(values: torch.Tensor, where: torch.Tensor | None) -> torch.Tensor:
    """Outputs of window_rows' rows (W, window, ...) back at the rows' positions (B, T', ...)."""
    if where is None:
        return values
    return values.flatten(0, 1)[where]


def place(values: torch.Tensor, spans: list[tuple[int, int, int]], T: int) -> torch.Tensor:
    """values (B, T', ...) at the compacted rows' positions -> (B, T, ...) at the ids' positions, 0 elsewhere."""
    out = values.new_zeros((values.size(0), T, *values.shape[2:]))
    for b, (start, n, lead) in enumerate(spans):
        out[b, start : start + n] = values[b, lead : lead + n]
    return out


def hub_ready() -> None:
    """A push needs the network: with HF_HUB_OFFLINE set, one ValueError saying so."""
    if huggingface_hub.constants.HF_HUB_OFFLINE:
        raise ValueError(
            "push_to_hub: HF_HUB_OFFLINE is set, so nothing can be uploaded: save the folder, and push it online"
        )


def upload(folder: Path, repo_id: str, token, private: bool | None, message: str | None, **where) -> None:
    """Create `repo_id` on the Hub if needed and upload `folder` to it, through huggingface_hub,
    as `transformers` pushes: to the repo the Hub names (a bare name is the user's), to the branch
    `revision` (made if missing) or as a pull request (`create_pr`), with `commit_description`."""
    api = huggingface_hub.HfApi(token=token if isinstance(token, str) else None)
    repo_id = api.create_repo(repo_id, exist_ok=True, private=private).repo_id
    revision = where.get("revision")
    if revision is not None and not where.get("create_pr") and not revision.startswith("refs/pr"):
        api.create_branch(repo_id, branch=revision, exist_ok=True)
    api.upload_folder(
        repo_id=repo_id,
        folder_path=str(folder),
        commit_message=message or "Upload learntok model",
        allow_patterns=sorted(EXPORT_FILES),  # the model's files, never what lies beside them (a Trainer's)
        **{k: v for k, v in where.items() if v is not None},
    )


HUB_OPTIONS = ("revision", "cache_dir", "token", "local_files_only", "force_download")


def source_folder(path, options: dict) -> str | Path:
    """What from_pretrained reads, as `transformers` resolves it: a Hub repo id's snapshot at
    `revision` (a branch, tag or commit; the default branch when None) through huggingface_hub's
    cache (`cache_dir`, `token`, `local_files_only`, `force_download`: learntok.util.shipped.hub_folder),
    `path` itself for anything else (a folder, a run, a shipped name: the Hub's options have
    nothing to select there); then its `subfolder`, when one is given."""
    text, subfolder = os.fspath(path), options.get("subfolder") or ""
    checks.instance("from_pretrained", "subfolder", subfolder, (str, os.PathLike), "a folder's name")
    hub = {k: options.get(k) for k in HUB_OPTIONS}
    if subfolder:
        hub["allow_patterns"] = [f"{subfolder}/*"]  # that folder's files alone
    folder = shipped_folder(text) or hub_folder(text, **hub)
    if not subfolder:
        return folder or text
    return (folder or Path(text)) / subfolder


def aunet_names(state_dict: dict) -> dict:
    """A state dict of LearntokForCausalLM's names ("aunet." first) or of the AUNet's, with the AUNet's."""
    return {k.removeprefix("aunet."): v for k, v in state_dict.items()}


def labels_are_the_inputs(input_ids: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor) -> bool:
    """Whether `labels` are the ids themselves wherever the mask reads (-100 or anything at
    padding): the causal-LM fine-tune of HF's Trainer and PEFT, which learntok's whole objective
    trains. Other labels (a prompt masked with -100) train the LM loss on them alone."""
    real = mask.bool()
    return labels.shape == input_ids.shape and bool((labels[real] == input_ids[real]).all())


class LearntokForCausalLM(PreTrainedModel, GenerationMixin):
    config_class = LearntokConfig
    base_model_prefix = "aunet"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    _no_split_modules: list[str] = []

    def __init__(self, config: LearntokConfig, aunet: AUNet | None = None):
        super().__init__(config)
        self.aunet = aunet if aunet is not None else AUNet(config.model_config())
        if config.trained_seq_len:
            self.aunet.trained_seq_len = config.trained_seq_len  # save_pretrained records it
        # bytes and EOS only: BOS, PAD and the table's padding are never drawn (learntok.model.generate.sample_next)
        suppress = [BOS, PAD, *range(N_SYMBOLS, VOCAB_SIZE)]
        self.generation_config = GenerationConfig(
            bos_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD, suppress_tokens=suppress, use_cache=True
        )

    def _init_weights(self, module) -> None:
        """Nothing: AUNet.init_weights initialised the model when it was built."""

    def get_input_embeddings(self) -> torch.nn.Module:
        return self.aunet.embed

    def get_output_embeddings(self) -> torch.nn.Module:
        return self.aunet.head.linear

    def activation_checkpointing_enable(
        self, activation_checkpointing_kwargs: dict | None = None, every_n_layers: int = 1, offload: bool = False
    ) -> None:
        """Recompute each block's activations in the backward (AUNet.set_gradient_checkpointing;
        non-reentrant, whatever the keywords ask): the same loss and gradients, less memory. Every
        block is recomputed and nothing is offloaded: another `every_n_layers` or `offload=True`
        is refused, nothing changed. `transformers`' Trainer (`gradient_checkpointing=True`) calls
        this, or `gradient_checkpointing_enable`, its older name."""
        if every_n_layers != 1 or offload:
            raise ValueError(
                f"LearntokForCausalLM: activation checkpointing recomputes every block and offloads nothing "
                f"(every_n_layers={every_n_layers!r}, offload={offload!r} asked); nothing was changed"
            )
        self.aunet.set_gradient_checkpointing(True)

    def activation_checkpointing_disable(self) -> None:
        self.aunet.set_gradient_checkpointing(False)

    @property
    def is_activation_checkpointing(self) -> bool:
        return any(getattr(m, "checkpointing", False) for m in self.aunet.modules())

    def gradient_checkpointing_enable(
        self, gradient_checkpointing_kwargs: dict | None = None, every_n_layers: int = 1, offload: bool = False
    ) -> None:
        """`activation_checkpointing_enable`, by its older name."""
        self.activation_checkpointing_enable(gradient_checkpointing_kwargs, every_n_layers, offload)

    def gradient_checkpointing_disable(self) -> None:
        self.activation_checkpointing_disable()

    @property
    def is_gradient_checkpointing(self) -> bool:
        return self.is_activation_checkpointing

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """torch's load_state_dict, which also reads the AUNet's own names (the names a learntok
        folder's model.safetensors holds: `transformers`' Trainer reads that file into the model
        when it resumes from a checkpoint, with strict=False, which would load none of them)."""
        own = self.aunet.state_dict().keys()
        named = {f"aunet.{k}" if k in own and not k.startswith("aunet.") else k: v for k, v in state_dict.items()}
        return super().load_state_dict(named, strict=strict, assign=assign)

    def resize_token_embeddings(self, new_num_tokens: int | None = None, *args, **kwargs) -> torch.nn.Module:
        """The vocabulary is the 256 bytes and BOS, EOS, PAD (its table padded to VOCAB_SIZE rows):
        no token can be added. A size that every id already fits (from `len(tokenizer)`, which
        fine-tuning scripts pass, to the table's rows; or None) returns the embedding as it is;
        any other is refused before anything changes."""
        rows = self.aunet.embed.num_embeddings
        new_num_tokens = checks.number(
            "LearntokForCausalLM.resize_token_embeddings", "new_num_tokens", new_num_tokens, int, none=True
        )
        if new_num_tokens is not None and not N_SYMBOLS <= new_num_tokens <= rows:
            raise ValueError(
                f"LearntokForCausalLM.resize_token_embeddings({new_num_tokens}): the byte vocabulary is fixed "
                f"({N_SYMBOLS} ids in {rows} rows; {N_SYMBOLS} to {rows} keep it as it is); nothing was changed"
            )
        return self.aunet.embed

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        """generate() must not make a DynamicCache: this model makes its own (LearntokCache)."""
        return False

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        return_dict: bool | None = None,
        cache: "LearntokCache | None" = None,
        in_windows: bool = True,
        **kwargs,
    ) -> LearntokCausalLMOutput:
        """Logits (B, T, V) of the id after each position; with `labels`, the mean cross-entropy
        (nats) of the labels that are not -100. Rows longer than the window are read in `eval`'s
        windows (`window_rows`); `in_windows=False` reads them whole, as the native decoder does
        (generate() without a cache passes it, so its bytes are the cached decoder's at any length).
        Arguments that do not apply to this model (position ids, caches, use_cache) are accepted
        and ignored: positions are each row's own. `return_dict=False` gives the tuple of the
        fields given (loss, logits, boundaries), as `transformers` models do."""
        if input_ids is None or input_ids.dim() != 2:
            raise ValueError("LearntokForCausalLM: give input_ids (B, T), byte ids from LearntokByteTokenizer")
        if isinstance(cache, LearntokCache) and labels is None:
            return self.decode(input_ids, attention_mask, cache)
        B, T = input_ids.shape
        mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
        if mask.shape != input_ids.shape:
            raise ValueError(f"LearntokForCausalLM: attention_mask {tuple(mask.shape)} is not input_ids' {(B, T)}")
        if labels is not None and labels.shape != input_ids.shape:
            raise ValueError(f"LearntokForCausalLM: labels {tuple(labels.shape)} must have input_ids' shape {(B, T)}")
        x, spans = compact_rows(input_ids, mask)
        window = self.config.window if in_windows else x.size(1)
        rows, where = window_rows(
            x, [lead + n for _, n, lead in spans], window
        )  # (W, window), (B, T') index of each output
        whole = labels is not None and self.training and labels_are_the_inputs(input_ids, labels, mask)
        greedy = self.config.boundaries == "greedy" and not whole  # training draws its cuts, as learntok trains
        with PrivateRNG(self.config.boundary_seed, x.device).active():
            out = self.aunet(rows, greedy=greedy)
        logits = place(from_windows(out.logits, where), spans, T)  # (B, T, V)
        loss = None
        if whole:  # learntok's whole objective: the LM, the early head, the policy (REINFORCE), the rate
            loss, _ = objective_loss(out, rows, self.objective())
        elif labels is not None:
            target = labels[:, 1:].to(logits.device)  # (B, T-1): logits at t predict label t+1
            loss = torch.nn.functional.cross_entropy(
                logits[:, :-1].float().reshape(-1, logits.size(-1)), target.reshape(-1), ignore_index=-100
            )
        boundaries = place(from_windows(out.boundaries, where), spans, T)
        output = LearntokCausalLMOutput(loss=loss, logits=logits, boundaries=boundaries)
        return output if return_dict is not False else output.to_tuple()  # (loss, logits, boundaries), as given

    def objective(self) -> ObjectiveConfig:
        """The objective the model was trained with (its run config's [objective]; the defaults for
        a bare model config), as learntok's train applies it to this strategy."""
        d = self.config.learntok.get("objective") if isinstance(self.config.learntok.get("model"), dict) else None
        return objective_for(ObjectiveConfig(**(d or {})), self.aunet.strategy.has_policy)

    def generate(self, inputs=None, *args, **kwargs):
        """transformers' generate, its ids and temperature checked first: ids of the byte vocabulary
        (0..PAD), a temperature in learntok's range (learntok.util.ranges.TEMPERATURE), as
        `AUNet.generate` checks them."""
        ids = inputs if inputs is not None else kwargs.get("input_ids")
        if isinstance(ids, torch.Tensor) and ids.numel() and (int(ids.min()) < 0 or int(ids.max()) > PAD):
            raise ValueError(f"LearntokForCausalLM.generate: input ids must be 0-{PAD} (bytes, BOS, EOS, PAD)")
        temperature = kwargs.get("temperature")
        if isinstance(temperature, (int, float)) and TEMPERATURE.problem(float(temperature)):
            raise ValueError(
                f"LearntokForCausalLM.generate: temperature {temperature!r} {TEMPERATURE.problem(float(temperature))}"
            )
        return super().generate(inputs, *args, **kwargs)

    @torch.no_grad()
    def decode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, cache: LearntokCache):
        """Cached decoding: the first call reads the prompt (prefill), every later one the ids
        after those the cache has seen, one byte at a time (decode_step). Logits (B, 1, V): the
        next id's, which is all generate() reads."""
        greedy = self.config.boundaries == "greedy"
        if cache.state is None:
            mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
            x, _ = compact_rows(input_ids, mask)  # (B, T') every row the same length (prepare_inputs_for_generation)
            cache.rng = PrivateRNG(self.config.boundary_seed, x.device)
            with cache.rng.active():
                cache.state, logits, decisions = prefill(self.aunet, x, greedy=greedy)
            boundaries = decisions[:, -1:]
        else:
            for j in range(input_ids.size(1)):
                with cache.rng.active():
                    logits, a = decode_step(self.aunet, cache.state, input_ids[:, j], greedy=greedy)
            boundaries = a[:, None]
        cache.seen += input_ids.size(1)
        return LearntokCausalLMOutput(logits=logits[:, None], cache=cache, boundaries=boundaries)

    def prepare_inputs_for_generation(
        self, input_ids, attention_mask=None, cache=None, use_cache=None, **kwargs
    ) -> dict:
        """With a cache (generate's default, `use_cache=True`): the whole prompt first, then only the
        ids the cache has not seen. Rows whose prompts differ in length (left padding) are read
        whole at every step instead (learntok's decoding state keeps one position for all rows)."""
        whole = {"input_ids": input_ids, "attention_mask": attention_mask, "in_windows": False}
        if use_cache is False or (self.generation_config.use_cache is False and use_cache is None):
            return whole
        if cache is None:
            same = attention_mask is None or bool(attention_mask.bool().all())
            if not same:
                return whole
            cache = LearntokCache()
        if isinstance(cache, LearntokCache) and cache.state is not None:
            return {"input_ids": input_ids[:, cache.seen :], "cache": cache}
        return {"input_ids": input_ids, "attention_mask": attention_mask, "cache": cache}

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, config=None, **kwargs):
        """A learntok run folder (latest checkpoint), checkpoint or model folder, shipped name, or
        a folder `save_pretrained` / `learntok export` wrote; read by learntok (safetensors).
        Of `transformers`' keywords, `dtype` / `torch_dtype` and `device_map` (one device) are
        applied, and the Hub's (`source_folder`: revision, subfolder, cache_dir, token,
        local_files_only, force_download); the settings of `config` (boundaries, boundary_seed) and
        of keywords of that name are kept."""
        files = read_model(source_folder(pretrained_model_name_or_path, kwargs))
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
        wants_cuda = (
            (isinstance(device, str) and device.startswith("cuda"))
            or isinstance(device, int)
            or (isinstance(device, torch.device) and device.type == "cuda")
        )
        if wants_cuda and not torch.cuda.is_available():
            raise ValueError(
                f"LearntokForCausalLM.from_pretrained: device_map {device!r}, but this torch sees no CUDA device"
            )
        if device == "meta" or (isinstance(device, torch.device) and device.type == "meta"):
            raise ValueError(
                "LearntokForCausalLM.from_pretrained: device_map 'meta' holds no weights to run; give cpu or cuda"
            )
        if isinstance(device, (str, int, torch.device)) and device != "auto":
            model = model.to(device)
        return model.eval()

    def save_pretrained(
        self,
        save_directory,
        *,
        push_to_hub: bool = False,
        repo_id: str | None = None,
        token: str | bool | None = None,
        private: bool | None = None,
        commit_message: str | None = None,
        safe_serialization: bool = True,
        max_shard_size: int | str | None = None,
        is_main_process: bool = True,
        state_dict: dict | None = None,
        revision: str | None = None,
        create_pr: bool = False,
        commit_description: str | None = None,
        **kwargs,
    ) -> None:
        """Write a folder both learntok and `transformers` read, with its model card
        (learntok.hf.export.write_export); with `push_to_hub`, upload it to `repo_id` (default: the
        folder's name; `revision`, `create_pr`, `commit_description` as `transformers` takes them)
        through huggingface_hub. `state_dict` (as `transformers`' Trainer passes
        it: this model's names, or the AUNet's) holds the weights written instead of the model's
        own, checked against it. learntok writes one safetensors file: pickle
        (`safe_serialization=False`) and a model larger than `max_shard_size` are refused, as is
        any other keyword, rather than ignored; nothing is written then."""
        if kwargs:
            raise TypeError(f"LearntokForCausalLM.save_pretrained: unknown keyword {sorted(kwargs)[0]!r}")
        if not safe_serialization:
            raise ValueError(
                "LearntokForCausalLM.save_pretrained: learntok writes safetensors only (no pickle): drop safe_serialization=False"
            )
        if max_shard_size is not None:
            limit = max_shard_size if isinstance(max_shard_size, int) else convert_file_size_to_int(max_shard_size)
            size = sum(p.numel() * p.element_size() for p in self.aunet.state_dict().values())
            if size > limit:
                raise ValueError(
                    f"LearntokForCausalLM.save_pretrained: the weights take {size:,} bytes, more than max_shard_size "
                    f"{max_shard_size}; learntok writes them as one file: give a larger max_shard_size or none"
                )
        if push_to_hub:
            hub_ready()  # offline: one line, before anything is written
        if not is_main_process:
            return
        aunet = self.aunet
        if state_dict is not None:  # the weights a Trainer gathered, in a copy of the model
            aunet = copy.deepcopy(self.aunet)
            load_weights(aunet, aunet_names(state_dict), Path(save_directory))
        folder = write_export(
            aunet,
            self.config.learntok,
            save_directory,
            model_card(self.config.learntok, repo_id or Path(save_directory).name),
            what="save_pretrained:",
            beside=trainer_output,  # trainer.save_model() into its output_dir, beside its checkpoints
        )
        if push_to_hub:
            where = {"revision": revision, "create_pr": create_pr or None, "commit_description": commit_description}
            upload(folder, repo_id or folder.name, token, private, commit_message, **where)

    def push_to_hub(
        self, repo_id: str, commit_message: str | None = None, private: bool | None = None, token=None, **kwargs
    ) -> None:
        """Upload the folder `save_pretrained` writes (model, config, tokenizer, card) to `repo_id`,
        through huggingface_hub (learntok's own save; `transformers`' would write its own files)."""
        hub_ready()
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / repo_id.split("/")[-1]
            self.save_pretrained(
                folder,
                push_to_hub=True,
                repo_id=repo_id,
                token=token,
                private=private,
                commit_message=commit_message,
                **kwargs,
            )
