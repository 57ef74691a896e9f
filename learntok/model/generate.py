"""Generation: cached incremental decoding of an AUNet, one byte at a time (docs/benchmarks.md
has its speed; the model layer: it needs only the model, and `AUNet.generate` / `AUNet.stream` call it).

For each new byte t (docs/design.md §2, in the same order as `AUNet.forward`):
  embed and encode it (byte-level KV caches keep the last attn_window keys) -> early head ->
  decide a[t] with the strategy's `step` (its state: e.g. the last w-1 decisions) ->
  the chunker's `down_step` (its own state: e.g. the running segment's sum) gives the vector
  that becomes a token -> only if a[t] = 1, run the token level on the new token (its KV cache
  grows by one key, at RoPE position t, the token's byte offset) and keep the output, after the
  chunker's `dechunk_step`, as the row's current token -> y = h + the chunker's `up_step` ->
  decoder (sliding-window caches) -> head: logits of byte t+1.
No boundary is forced at the newest byte: byte t reads its latest boundary's token, exactly
as in training (the paper's code forces one, a situation the model never saw).

The prompt is prefilled with one full forward pass that also fills the caches. Prompts of
different lengths in one batch: the common prefix (the shortest prompt's length) is prefilled
for every row in parallel, then every row steps one byte at a time, the longer prompts' remaining
bytes fed as forced inputs (their boundaries decided by `step`, causally, as for generated
bytes). So rows share byte positions; left padding would shift them. A row that has made
`max_bytes` bytes (or sampled EOS) keeps stepping on filler until every row is done.

Random draws (bytes and boundaries) come from a private seeded stream swapped in around each
step: `seed` makes a generation reproducible and leaves the caller's RNG untouched.

Shapes: B batch, T bytes, D width, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Iterator, NamedTuple, Sequence

import torch

from learntok.data.vocab import BOS, EOS, PAD, encode, is_byte
from learntok.nn.cache import ModelCache, TokenKV
from learntok.nn.pooling import token_counts
import learntok.util.checks as check
from learntok.util import unicode
from learntok.util.ranges import GENERATED_BYTES, INT64, MIN_TEMPERATURE, SEED, TEMPERATURE, bounds
from learntok.util.runtime import MODEL_STATE, PrivateRNG, eval_mode

BOUNDARY_MODES = ("greedy", "sample")
# The one default decision rule wherever a text is cut: the tokenizer, `segment`, `sample` and
# generation all take p > 0.5 unless told to sample as training does (docs/tokenizer.md).
DEFAULT_BOUNDARIES = "greedy"


@dataclass
class DecodeState:
    cache: ModelCache  # KV caches of every level
    strategy: dict  # the boundary strategy's decoding state (see BoundaryStrategy.step)
    chunker: dict  # the chunker's decoding state: each row's current token and its own (see learntok.nn.chunkers)
    t: int  # position of the next byte to read (shared by all rows)

    def select(self, rows: torch.Tensor) -> None:
        """Keep rows `rows` (R,) long, in that order (a row may repeat): what beam search does to
        its rows between steps. Every part of the state is per row, the row first."""
        rows = rows.to(torch.long)
        self.cache.select(rows)
        self.strategy, self.chunker = rows_of(self.strategy, rows), rows_of(self.chunker, rows)


def rows_of(value, rows: torch.Tensor):
    """A decoding state's per-row values (tensors (B, ...), lists of B items, dicts of them) at
    `rows` (R,): row r of the result is row rows[r]. Anything else (a 0-d tensor, a number) is
    shared by every row and kept."""
    if isinstance(value, torch.Tensor):
        return value[rows.to(value.device)] if value.dim() else value
    if isinstance(value, dict):
        return {k: rows_of(v, rows) for k, v in value.items()}
    if isinstance(value, list):
        return [value[i] for i in rows.tolist()]
    return value


@torch.no_grad()
def prefill(
    model, x: torch.Tensor, boundaries: torch.Tensor | None = None, greedy: bool = False
) -> tuple[DecodeState, torch.Tensor, torch.Tensor]:
    """Read a prompt x (B, T) (BOS first) in one full forward pass, filling the caches.
    Decisions are the strategy's (sampled or greedy) or the prescribed `boundaries` (B, T).
    Returns the state, the logits (B, V) of byte T and the decisions (B, T)."""
    cfg, strategy, chunker = model.cfg, model.strategy, model.chunker
    T = x.size(1)
    cache = ModelCache.empty_bytes(cfg.n_down, cfg.n_up, cfg.attn_window)
    pos = torch.arange(T, device=x.device)  # (T,)
    h = model.encoder.forward_cached(model.embed(x), pos, cache.encoder)  # (B, T, D)
    early = model.early_head(h)  # (B, T, V)
    b = strategy(h, x, boundaries=boundaries, early_logits=early, greedy=greedy)
    counts, _, S = token_counts(b.decisions)  # (B,) tokens per row; the largest (one host sync)
    z, tok_pos = chunker.down(h, b.decisions, b.relaxed, S)  # (B, S, D), (B, S)
    cache.mid = [TokenKV(counts, S) for _ in range(cfg.n_mid)]
    z = chunker.dechunk(model.mid.forward_cached(z, tok_pos, cache.mid), b.probs, tok_pos)
    y = h + chunker.up(z, b.decisions, b.probs)  # (B, T, D)
    logits = model.head(model.decoder.forward_cached(y, pos, cache.decoder)[:, -1])  # (B, V): byte T's only
    state = DecodeState(
        cache, strategy.prefill_state(h, x, b.decisions, early), chunker.prefill_state(h, b.decisions, z), T
    )
    return state, logits, b.decisions


@torch.no_grad()
def decode_step(
    model, state: DecodeState, x: torch.Tensor, boundaries: torch.Tensor | None = None, greedy: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Read one new byte per row, x (B,), at position state.t; advance the state in place.
    `boundaries` (B,) prescribes a[t] (teacher forcing), else the strategy decides.
    Returns the logits (B, V) of byte t+1 and the decisions a[t] (B,) float 0/1."""
    strategy, chunker, t = model.strategy, model.chunker, state.t
    pos = torch.tensor([t], device=x.device)  # (1,) byte position
    h = model.encoder.forward_cached(model.embed(x)[:, None], pos, state.cache.encoder)  # (B, 1, D)
    early = model.early_head(h)  # (B, 1, V)
    a, probs, state.strategy = strategy.step(
        h[:, 0], x, t, state.strategy, early[:, 0], greedy=greedy, boundaries=boundaries
    )
    rows = a.nonzero().flatten()  # (R,) rows with a new token
    tok, state.chunker = chunker.down_step(h[:, 0], a, state.chunker)  # (B, D) the new token's vector where a = 1
    if rows.numel() == a.numel():  # every row: no gather
        z = model.mid.forward_cached(tok[:, None], pos, state.cache.mid_rows(None))  # (B, 1, D)
        state.chunker = chunker.dechunk_step(z[:, 0], None, probs, state.chunker)
    elif rows.numel():
        z = model.mid.forward_cached(tok[rows, None], pos, state.cache.mid_rows(rows))  # (R, 1, D)
        state.chunker = chunker.dechunk_step(z[:, 0], rows, probs, state.chunker)
    y = h + chunker.up_step(a, probs, state.chunker)[:, None]  # (B, 1, D)
    logits = model.head(model.decoder.forward_cached(y, pos, state.cache.decoder))[:, 0]  # (B, V)
    state.t += 1
    return logits, a


def sample_next(
    logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None
) -> torch.Tensor:
    """Next byte ids (B,) from logits (B, V) over the 256 byte values and EOS (BOS, PAD and the
    table's padding are never drawn). temperature 0 is argmax (so is any below
    learntok.util.ranges.MIN_TEMPERATURE, its limit; learntok.util.ranges.TEMPERATURE bounds it above); top_k keeps the k likeliest;
    top_p keeps the smallest set whose probability reaches p (nucleus sampling)."""
    logits = logits.float()
    allowed = is_byte(torch.arange(logits.size(-1), device=logits.device))  # (V,)
    allowed[EOS] = True
    logits = logits.masked_fill(~allowed, float("-inf"))  # (a boolean index would be a host sync)
    if temperature < MIN_TEMPERATURE:  # 0, or so near it that logits / temperature could overflow
        return logits.argmax(-1)
    logits = logits / temperature
    if top_k is not None and top_k > 0:
        kth = logits.topk(min(top_k, logits.size(-1)), dim=-1).values[:, -1:]  # (B, 1); -inf past the allowed ones
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)  # (B, V)
        probs = sorted_logits.softmax(-1)
        drop = probs.cumsum(-1) - probs >= top_p  # mass before this one already reaches p
        logits = logits.scatter(-1, order, sorted_logits.masked_fill(drop, float("-inf")))
    return torch.multinomial(logits.softmax(-1), 1)[:, 0]


class Piece(NamedTuple):
    """One byte of a streamed sequence."""

    byte: int  # 0..255
    boundary: bool  # a[t] = 1: this byte is a boundary byte, the last a token reads
    generated: bool  # sampled by the model (False: a prompt byte)


@dataclass
class _Event:
    ids: torch.Tensor  # (B, L) bytes at positions t .. t+L-1 (the prefill: L = prompt prefix)
    decisions: torch.Tensor  # (B, L) float 0/1
    keep: torch.Tensor  # (B, L) bool: part of the row's sequence (prompt or generated)
    generated: torch.Tensor  # (B, L) bool: sampled by the model
    logits: torch.Tensor  # (B, V) next-byte logits after the event's last byte


PROMPT = "a str, bytes or a 1-D LongTensor of byte ids"


def prompt_ids(prompt, where: str = "generate", name: str = "prompt") -> torch.Tensor:
    """str | bytes | 1-D LongTensor of ids -> (T,) ids with BOS first."""
    if isinstance(prompt, torch.Tensor):
        ids = check.tensor(where, name, prompt, 1, True, PROMPT).long()
        return ids if ids.numel() and int(ids[0]) == BOS else torch.cat([torch.tensor([BOS]), ids])
    return encode(unicode.text(where, name, prompt))


@dataclass(frozen=True)
class SamplingOptions:
    """How `generate` and `stream` draw: the bytes (temperature, top_k, top_p), the boundaries,
    the seed of both and when to stop. `AUNet.generate` / `AUNet.stream` take the same fields as
    keywords."""

    max_bytes: int = 256  # bytes to generate per prompt (fewer where EOS is drawn and stop_at_eos)
    temperature: float = 1.0  # of the next-byte distribution; 0: argmax
    top_k: int | None = None  # sample from the k likeliest bytes (None: all)
    top_p: float | None = None  # nucleus: the smallest set of bytes with probability >= p (None: all)
    seed: int | None = None  # of the sampled bytes and boundaries (None: drawn from torch's global RNG)
    boundaries: str = DEFAULT_BOUNDARIES  # BOUNDARY_MODES: "greedy" takes p > 0.5, "sample" draws as training does
    stop_at_eos: bool = True  # a row ends where it draws EOS

    @classmethod
    def of(cls, where: str, max_bytes, options: dict) -> "SamplingOptions":
        """The options `where` (generate, stream) was called with, checked (learntok.util.checks):
        an unknown keyword is a TypeError naming it."""
        unknown = sorted(set(options) - {f.name for f in fields(cls)})
        if unknown:
            known = ", ".join(f.name for f in fields(cls))
            raise TypeError(f"{where}: unknown keyword {unknown[0]!r}; known: {known}")
        given = cls(max_bytes, **options)
        return cls(
            check.number(where, "max_bytes", given.max_bytes, int, GENERATED_BYTES),
            check.number(where, "temperature", given.temperature, float, TEMPERATURE),
            check.number(where, "top_k", given.top_k, int, bounds(ge=1, le=INT64[1]), none=True),
            check.number(where, "top_p", given.top_p, float, bounds(gt=0, le=1), none=True),
            check.number(where, "seed", given.seed, int, SEED, none=True),
            check.choice(where, "boundaries", given.boundaries, BOUNDARY_MODES),
            check.flag(where, "stop_at_eos", given.stop_at_eos),
        )


def prompts_of(where: str, prompts) -> list[torch.Tensor]:
    """A prompt or a non-empty list of them, as ids (`prompt_ids`), checked."""
    if isinstance(prompts, (list, tuple)):
        if not prompts:
            raise check.wrong_value(where, "prompt", "a prompt or a non-empty list of prompts", prompts)
        return [prompt_ids(p, where, f"prompt[{i}]") for i, p in enumerate(prompts)]
    return [prompt_ids(prompts, where)]


def _events(model, prompts: Sequence[torch.Tensor], opts: SamplingOptions) -> Iterator[_Event]:
    greedy, max_bytes = opts.boundaries == "greedy", opts.max_bytes
    device = next(model.parameters()).device
    sizes = [p.numel() for p in prompts]
    lens = torch.tensor(sizes, device=device)  # (B,)
    B, L0, Lmax = len(prompts), min(sizes), max(sizes)  # from the host: no device read
    x = torch.full((B, Lmax), PAD, dtype=torch.long, device=device)  # (B, Lmax) prompts, PAD after each end
    for b, p in enumerate(prompts):
        x[b, : p.numel()] = p.to(device)
    rng = PrivateRNG(opts.seed, device)
    # Each step holds the model's state (eval mode, its knob, the RNG swapped in) and gives it
    # back, never across a yield: another thread may use the model between two bytes, and its
    # changes are undone before the next step (runtime.MODEL_STATE).
    with MODEL_STATE, eval_mode(model), rng.active():
        state, logits, a = prefill(model, x[:, :L0], greedy=greedy)
    ones = torch.ones_like(a, dtype=torch.bool)
    yield _Event(x[:, :L0], a, ones, ~ones, logits)
    made = torch.zeros(B, dtype=torch.long, device=device)
    done = torch.zeros(B, dtype=torch.bool, device=device)
    for t in range(L0, Lmax + max_bytes):
        in_prompt = t < lens  # (B,)
        with rng.active():
            nxt = sample_next(logits, opts.temperature, opts.top_k, opts.top_p)
        nxt = torch.where(in_prompt, x[:, min(t, Lmax - 1)], nxt)  # (B,)
        if opts.stop_at_eos:
            done |= ~in_prompt & (nxt == EOS)
        gen = ~in_prompt & ~done
        if not bool((in_prompt | gen).any()):
            return
        with MODEL_STATE, eval_mode(model), rng.active():
            logits, a = decode_step(model, state, nxt, greedy=greedy)
        yield _Event(nxt[:, None], a[:, None], (in_prompt | gen)[:, None], gen[:, None], logits)
        made += gen.long()
        done |= made >= max_bytes


def stream(model, prompt, max_bytes: int = 256, include_prompt: bool = False, **options) -> Iterator[Piece]:
    """Generate after one prompt, yielding each byte as it is made (with the prompt's bytes
    first when include_prompt); `options`: the other fields of SamplingOptions. The arguments
    are checked when it is called, not when it is first read."""
    if isinstance(prompt, (list, tuple)):
        raise check.wrong_type("stream", "prompt", PROMPT + " (one prompt: generate takes a list)", prompt)
    prompts, opts = prompts_of("stream", prompt), SamplingOptions.of("stream", max_bytes, options)
    check.flag("stream", "include_prompt", include_prompt)
    return _pieces(model, prompts, opts, include_prompt)


def _pieces(model, prompts: list[torch.Tensor], opts: SamplingOptions, include_prompt: bool) -> Iterator[Piece]:
    for ev in _events(model, prompts, opts):
        for i, a, keep, gen in zip(
            ev.ids[0].tolist(), ev.decisions[0].tolist(), ev.keep[0].tolist(), ev.generated[0].tolist()
        ):
            if keep and is_byte(i) and (gen or include_prompt):
                yield Piece(i, a > 0.5, gen)


def generate(model, prompt, max_bytes: int = 256, **options):
    """Sample up to max_bytes bytes after `prompt` (str, bytes or 1-D ids; a list of them for a
    batch); `options`: the other fields of SamplingOptions (temperature, top_k, top_p, seed,
    boundaries, stop_at_eos). Returns (generated bytes, decisions), decisions (len(bytes),)
    float 0/1 aligned with the bytes: decisions[i] = 1 when generated byte i is a boundary byte
    (a chunk ends there) (the prompt's decisions come with its bytes from
    `stream(include_prompt=True)`); lists of both for a batch. boundaries: "greedy" (the default)
    takes p > 0.5, "sample" draws the strategy's decisions.

        data, decisions = model.generate("ROMEO.", max_bytes=100)  # bytes: a character may be cut"""
    single = not isinstance(prompt, (list, tuple))
    prompts, opts = prompts_of("generate", prompt), SamplingOptions.of("generate", max_bytes, options)
    events = list(_events(model, prompts, opts))
    ids, dec, gen = (
        torch.cat([getattr(e, f) for e in events], dim=1).cpu() for f in ("ids", "decisions", "generated")
    )  # (B, L) each
    texts = [bytes(ids[b][gen[b]].tolist()) for b in range(len(prompts))]
    decisions = [dec[b][gen[b]] for b in range(len(prompts))]
    return (texts[0], decisions[0]) if single else (texts, decisions)
