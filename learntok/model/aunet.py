"""The autoregressive U-Net over bytes (docs/design.md §2).

    embed -> encoder (bytes, sliding window) -> early-exit head
          -> boundary strategy -> chunker.down (e.g. select the boundary bytes) -> mid (tokens, causal)
          -> chunker.dechunk -> chunker.up (byte t reads its latest boundary's token) + skip
          -> decoder -> head

The strategy decides where tokens end; the chunker it names (learntok.nn.chunkers) makes the
tokens and gives them back to the bytes.

Shapes: B batch, T bytes (BOS at t = 0), S tokens, D width, V vocabulary.
"""

from __future__ import annotations

from dataclasses import InitVar, dataclass

import torch
from torch import nn

import learntok.boundaries  # noqa: F401  (registers the strategies)
from learntok.boundaries.base import BoundaryOutput, build_strategy
import learntok.util.checks as check
from learntok.util import unicode
from learntok.data.vocab import encode
from learntok.model.config import ModelConfig
from learntok.model.generate import generate, stream
from learntok.nn.layers import RMSNorm, Stack
from learntok.nn.chunkers import build_chunker
from learntok.nn.pooling import num_tokens, pack_rows
from learntok.util.ranges import SEED
from learntok.model.pretrained import WEIGHTS, ModelFiles, load_weights, read_model, save_model


@dataclass
class ModelOutput:
    logits: torch.Tensor  # (B, T, V) next-byte logits of the final head
    early_logits: torch.Tensor  # (B, T, V) next-byte logits of the early-exit head
    boundaries: torch.Tensor  # (B, T) float 0/1 decisions used; [:, 0] == 1
    boundary_logits: torch.Tensor  # (B, T) fp32 policy logits (0 without a policy)
    boundary_probs: torch.Tensor  # (B, T) fp32 P(a_t = 1)
    boundary_log_prob: torch.Tensor  # (B, T) fp32 log pi(a_t | x, a_<t); 0 at BOS / without a policy
    aux_loss: torch.Tensor  # () the strategy's own (weighted) loss
    target_rate: float | torch.Tensor  # rho* for the rate loss; (B,) each row's own (rate-conditioned training)
    n_tokens: torch.Tensor  # (B,) tokens per sequence
    # one built in Python is checked at its construction; the model's own forward passes False:
    # its fields are tensors by construction, and a check there would run on every forward
    checked: InitVar[bool] = True

    def __post_init__(self, checked: bool) -> None:
        if not checked:
            return
        for name in TENSOR_FIELDS:
            check.instance("ModelOutput", name, getattr(self, name), torch.Tensor, "a tensor")
        check.instance("ModelOutput", "target_rate", self.target_rate, (float, torch.Tensor), "a rate or a tensor (B,)")


TENSOR_FIELDS = tuple(k for k in ModelOutput.__annotations__ if k not in ("target_rate", "checked"))


def token_level_padded(model: "AUNet", h: torch.Tensor, b: BoundaryOutput) -> torch.Tensor:
    """Reference for `AUNet.token_level`: the mid blocks on (B, S) rows padded to the batch's
    largest token count (padding is last, so causal masking hides it)."""
    S = num_tokens(b.decisions, model.cfg.token_pad_multiple)
    z, tok_pos = model.chunker.down(h, b.decisions, b.relaxed, S)  # (B, S, D), (B, S) byte offsets
    return model.chunker.dechunk(model.mid(z, tok_pos), b.probs, tok_pos)


def seeded_generator(seed: int, device: torch.device) -> torch.Generator | None:
    """A generator on `device` seeded with `seed` (None on the meta device, which draws nothing)."""
    return None if device.type == "meta" else torch.Generator(device).manual_seed(seed)


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
        self.cfg = check.instance("AUNet", "cfg", cfg, ModelConfig, "a learntok.ModelConfig")
        d, db, nh, base = cfg.d_model, cfg.byte_width, cfg.n_heads, cfg.rope_base
        seed = int(torch.randint(0, 2**62, (), device="cpu"))  # one draw, whatever the strategy
        with torch.random.fork_rng(devices=[]):  # construction's own draws are discarded
            self.embed = nn.Embedding(cfg.vocab_size, db)
            self.encoder = Stack(cfg.n_down, db, nh, cfg.mlp_ratio_bytes, cfg.attn_window, base)
            self.early_head = Head(db, cfg.vocab_size)
            self.strategy = build_strategy(cfg)  # reads byte states: width db
            self.chunker = build_chunker(self.strategy.chunker)  # no weights
            self.mid = Stack(cfg.n_mid, d, nh, cfg.mlp_ratio_tokens, None, base, d_io=db)
            self.decoder = Stack(cfg.n_up, db, nh, cfg.mlp_ratio_bytes, cfg.attn_window, base)
            self.head = Head(db, cfg.vocab_size)
        self.init_weights(seed)

    @torch.no_grad()
    def set_gradient_checkpointing(self, on: bool = True) -> None:
        """Recompute every block's activations in the backward instead of keeping them (all three
        stacks): less memory for about one more forward of compute; the same loss and gradients."""
        if type(on) is not bool:
            raise TypeError(f"AUNet.set_gradient_checkpointing: on must be True or False, got {on!r}")
        for module in self.modules():
            if isinstance(module, Stack):
                module.checkpointing = on

    def init_weights(self, seed: int = 0) -> None:
        """Linear and embedding weights ~ N(0, init_std); output projections of every block
        scaled by 1/sqrt(2 * n_layers) (GPT-2); norms at 1; the early head starts as a copy of
        the main head so the early-exit reward starts near 0 (docs/architecture.md).

        Controlled comparisons: the backbone draws from its own generator seeded by `seed` and
        the strategy from another (seed + 1), so at one seed every strategy's backbone is
        bit-identical, whatever parameters the strategy adds (tests/test_identical_init.py)."""
        seed = check.number("AUNet.init_weights", "seed", seed, int, SEED)
        std = self.cfg.init_std
        device = self.embed.weight.device
        backbone, own = seeded_generator(seed, device), seeded_generator(seed + 1, device)
        n_layers = self.cfg.n_down + self.cfg.n_mid + self.cfg.n_up
        for name, p in self.named_parameters():
            if name.startswith("strategy."):
                continue
            if p.dim() == 2:
                scaled = name.endswith("attn.proj.weight") or name.endswith("mlp.down.weight")
                nn.init.normal_(p, std=std / (2 * n_layers) ** 0.5 if scaled else std, generator=backbone)
            elif name.endswith("weight"):
                nn.init.ones_(p)
        self.early_head.load_state_dict(self.head.state_dict())
        self.strategy.init_weights(own)

    def forward(
        self, x: torch.Tensor | str | bytes, boundaries: torch.Tensor | None = None, greedy: bool = False
    ) -> ModelOutput:
        x = self.as_ids(x)  # (B, T)
        check.flag("AUNet", "greedy", greedy)
        if boundaries is not None:
            check.tensor("AUNet", "boundaries", boundaries, 2, False, "None or float 0/1 decisions (B, T)")
            if boundaries.shape != x.shape:
                raise ValueError(
                    f"AUNet: boundaries must have the shape of the ids {tuple(x.shape)}; got {tuple(boundaries.shape)}"
                )
        pos = torch.arange(x.size(1), device=x.device)  # (T,) byte positions
        h, early = self.byte_level(x, pos)  # (B, T, D), (B, T, V)
        b = self.strategy(h, x, boundaries=boundaries, early_logits=early, greedy=greedy)
        z = self.token_level(h, b)  # (B, S, D)
        y = h + self.chunker.up(z, b.decisions, b.probs)  # (B, T, D)
        logits = self.head(self.decoder(y, pos))  # (B, T, V)
        return ModelOutput(
            logits=logits,
            early_logits=early,
            boundaries=b.decisions,
            boundary_logits=b.logits,
            boundary_probs=b.probs,
            boundary_log_prob=b.log_prob,
            aux_loss=b.aux_loss,
            target_rate=self.cfg.target_rate if b.target is None else b.target,
            n_tokens=b.decisions.sum(1),
            checked=False,
        )

    def byte_level(self, x: torch.Tensor, pos: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """What the boundaries are decided from: x (B, T) -> encoder output h (B, T, D) and the
        early-exit logits (B, T, V). Nothing here draws random numbers, so the strategy called
        on these decides as the full forward does (segment reads boundaries this way, without the
        token level and the decoder)."""
        check.tensor("AUNet.byte_level", "x", x, 2, True, "byte ids, a LongTensor (B, T) with BOS first")
        if pos is not None:
            check.tensor("AUNet.byte_level", "pos", pos, 1, True, "None or byte positions, a LongTensor (T,)")
        pos = torch.arange(x.size(1), device=x.device) if pos is None else pos
        h = self.encoder(self.embed(x), pos)
        return h, self.early_head(h)

    def as_ids(self, x) -> torch.Tensor:
        """Byte ids (B, T) as given, or a str (UTF-8) / bytes as one row with BOS first
        (learntok.data.encode), on the model's device."""
        if isinstance(x, (str, bytes)):
            return encode(unicode.text("AUNet", "x", x)).unsqueeze(0).to(self.embed.weight.device)
        if not isinstance(x, torch.Tensor) or x.is_floating_point() or x.is_complex():
            raise TypeError(
                f"AUNet takes byte ids, a LongTensor (B, T) with BOS first "
                f"(learntok.data.encode(text).unsqueeze(0)), or a str or bytes; got {type(x).__name__}"
                + (f" of {x.dtype}" if isinstance(x, torch.Tensor) else "")
            )
        if x.dim() != 2:
            raise ValueError(
                f"byte ids must be (B, T), got shape {tuple(x.shape)} "
                "(one text: learntok.data.encode(text).unsqueeze(0))"
            )
        return check.byte_ids("AUNet", "x", x, self.cfg.vocab_size)

    def token_level(self, h: torch.Tensor, b: BoundaryOutput) -> torch.Tensor:
        """Downsample -> mid -> dechunk on packed tokens: h (B, T, D) -> (B, S, D) padded rows.
        The mid blocks run on the N tokens of all rows packed into one sequence (attention
        stays within each row: learntok.nn.layers.packed_attention); `token_level_padded`
        is the plain reference it is tested against."""
        check.tensor("AUNet.token_level", "h", h, 3, False, "the byte level's output, a float tensor (B, T, D)")
        check.instance("AUNet.token_level", "b", b, BoundaryOutput, "the strategy's BoundaryOutput")
        packing = pack_rows(b.decisions, self.cfg.token_pad_multiple)  # the forward's one host sync
        z = self.chunker.down_packed(h, b.decisions, b.relaxed, packing)  # (N, D) the tokens, packed
        z = self.mid(z, packing.pos, packing)  # (N, D); RoPE at each token's byte offset
        return self.chunker.dechunk(packing.to_padded(z), b.probs, packing.padded_pos())

    def generate(self, prompt, max_bytes: int = 256, **kwargs):
        """Sample bytes after a prompt with cached incremental decoding: see learntok.model.generate."""
        return generate(self, prompt, max_bytes, **kwargs)

    def stream(self, prompt, max_bytes: int = 256, **kwargs):
        """Iterator over the generated bytes as they are made: see learntok.model.generate.stream."""
        return stream(self, prompt, max_bytes, **kwargs)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def save_pretrained(self, path) -> None:
        """Write the model folder (weights + model config): see learntok.model.pretrained."""
        save_model(self, check.path("AUNet.save_pretrained", "path", path))

    @classmethod
    def from_pretrained(cls, path, map_location="cpu") -> "AUNet":
        """An AUNet from a model folder, a checkpoint folder or a run folder (latest checkpoint),
        in eval mode (as transformers loads models: call .train() to train it further)."""
        where = "AUNet.from_pretrained"
        path, map_location = check.path(where, "path", path), check.device(where, "map_location", map_location)
        return cls.from_files(read_model(path, map_location), map_location)

    @classmethod
    def from_files(cls, files: ModelFiles, map_location="cpu") -> "AUNet":
        """An AUNet from a folder's files read once (learntok.model.pretrained.read_model), in
        eval mode (call .train() to train it further)."""
        check.instance(
            "AUNet.from_files", "files", files, ModelFiles, "a folder's files (learntok.model.pretrained.read_model)"
        )
        model = cls(files.model)
        load_weights(model, files.weights, files.folder / WEIGHTS)
        model.trained_seq_len = files.trained_seq_len  # save_pretrained records it in a model folder
        return model.to(map_location).eval()
