"""`learntok eval`: bits per byte with error bars, the K-sample bound, and boundary quality.

Bits per byte (DESIGN §4): sum of CE in nats over real target bytes / (ln 2 * those bytes),
corpus-level; and the mean over documents of each document's bpb, with its standard error.
With K samples per window, `bpb` is the mean over the K sampled segmentations (an upper bound
on the model's marginal bpb in expectation) and `bpb_bound` the log-mean-exp bound

    per window: -log( (1/K) sum_k exp(-CE_sum_k) ),  summed,  / (ln 2 * bytes)

which is <= the mean (Jensen), equals it at K = 1, and tightens toward -log p(x) as K grows.
Everything runs under its own seed (`isolated_rng`): the same seed gives the same numbers.

Shapes: B batch, T bytes (BOS at t = 0), K samples.
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import torch

from learntok import boundary_quality as bq
from learntok.checkpoint import CONFIG, CheckpointError, check_format, load_model, resolve
from learntok.config import ConfigError, RunConfig
from learntok.data import ByteData, DataConfig, DataError, load_documents
from learntok.data.corpora import _files_below, _is_binary
from learntok.objective import LN2, is_whitespace, token_ce
from learntok.runtime import autocast, isolated_rng


def logmeanexp_bound(ce_sums: torch.Tensor, n_bytes: int | float) -> float:
    """The K-sample bound in bits per byte. ce_sums (K, N): CE in nats summed over each of N
    windows, for K sampled segmentations; n_bytes: scored bytes in the N windows."""
    K = ce_sums.size(0)
    per_window = -(torch.logsumexp(-ce_sums.double(), dim=0) - math.log(K))  # (N,)
    return float(per_window.sum()) / (LN2 * max(n_bytes, 1))


def mean_and_se(values: np.ndarray) -> tuple[float, float]:
    """Mean and its standard error (sample std / sqrt(n); 0 with fewer than two values)."""
    values = np.asarray(values, dtype=np.float64)
    if len(values) == 0:
        return 0.0, 0.0
    se = float(values.std(ddof=1) / math.sqrt(len(values))) if len(values) > 1 else 0.0
    return float(values.mean()), se


@torch.no_grad()
def evaluate_bpb(model, batches: Iterable[tuple[torch.Tensor, torch.Tensor]], n_docs: int, samples: int = 1,
                 greedy: bool = False, seed: int = 0, device: torch.device | None = None,
                 amp_dtype: torch.dtype | None = None,
                 reference_starts: Callable[[torch.Tensor], torch.Tensor] | None = None) -> dict:
    """Bits per byte and boundary statistics over `batches` of (x (B, T), doc_ids (B,)), e.g.
    ByteData.eval_batches. `samples` K segmentations per window (1 when `greedy`: p > 0.5);
    boundary statistics come from the first sample. `reference_starts(x)` -> (B, T) bool, e.g.
    BPE token starts, adds precision/recall/F1 against it. Returns a dict of figures, plus
    `doc_nats` / `doc_bytes` (n_docs,) arrays for breakdowns."""
    device = device or next(model.parameters()).device
    K = 1 if greedy else samples
    doc_nats, doc_bytes = np.zeros(n_docs), np.zeros(n_docs, dtype=np.int64)
    window_ce: list[torch.Tensor] = []                           # (K, B) per batch
    sums = np.zeros(5)                                           # boundaries, real, ws boundaries, ws, bytes
    word, space, bpe = (np.zeros(3, dtype=np.int64) for _ in range(3))
    hist, n_chunks = np.zeros(bq.HIST_MAX + 1, dtype=np.int64), 0
    was_training = model.training
    model.eval()
    try:
        with isolated_rng(seed, device):
            for x, doc_ids in batches:
                x = x.to(device)
                ce_k = []
                for k in range(K):
                    with autocast(device, amp_dtype):
                        out = model(x, greedy=greedy)
                    ce, mask = token_ce(out.logits, x)           # (B, T-1)
                    ce_k.append(ce.sum(1).double())              # (B,)
                    if k == 0:
                        a = out.boundaries
                ce_k = torch.stack(ce_k)                         # (K, B)
                n_row = mask.sum(1).long().cpu().numpy()         # (B,) scored bytes
                window_ce.append(ce_k.cpu())
                np.add.at(doc_nats, doc_ids.numpy(), ce_k.mean(0).cpu().numpy())
                np.add.at(doc_bytes, doc_ids.numpy(), n_row)
                real = (x[:, 1:] < 256).float()
                ws = is_whitespace(x[:, 1:]).float() * real
                d = a[:, 1:].float()
                sums += np.array([float((d * real).sum()), float(real.sum()), float((d * ws).sum()),
                                  float(ws.sum()), float(n_row.sum())])
                scored = bq.scored_positions(x)
                word += bq.prf_counts(a, bq.word_starts(x), scored)
                space += bq.prf_counts(a, bq.space_starts(x), scored)
                if reference_starts is not None:
                    bpe += bq.prf_counts(a, reference_starts(x), scored)
                lengths = bq.chunk_lengths(x, a)
                hist += bq.length_histogram(lengths)
                n_chunks += len(lengths)
    finally:
        model.train(was_training)
    n_bytes = int(sums[4])
    ce_all = torch.cat(window_ce, dim=1) if window_ce else torch.zeros(K, 0)  # (K, N windows)
    per_sample = (ce_all.sum(1) / (LN2 * max(n_bytes, 1))).tolist()
    seen = doc_bytes > 0
    doc_mean, doc_se = mean_and_se(doc_nats[seen] / (LN2 * doc_bytes[seen]))
    result = {
        "bpb": float(np.mean(per_sample)), "bpb_per_sample": per_sample, "samples": K, "greedy": greedy,
        "bpb_bound": logmeanexp_bound(ce_all, n_bytes),
        "doc_bpb_mean": doc_mean, "doc_bpb_se": doc_se, "n_docs": int(seen.sum()), "n_bytes": n_bytes,
        "boundary_rate": sums[0] / max(sums[1], 1), "whitespace_rate": sums[2] / max(sums[3], 1),
        "mean_chunk_length": float(sums[1] / max(n_chunks, 1)), "n_chunks": n_chunks,
        "chunk_length_hist": {"bins": [str(i) for i in range(1, bq.HIST_MAX + 1)] + [f">{bq.HIST_MAX}"],
                              "counts": hist.tolist()},
        "word_starts": bq.prf(word),
        "space_starts": bq.prf(space),
    }
    if reference_starts is not None:
        result["bpe_starts"] = bq.prf(bpe)
    result["doc_nats"], result["doc_bytes"] = doc_nats, doc_bytes
    return result


# ---------------------------------------------------------------- loading


def load_for_eval(path: str | Path, device: str | torch.device = "cpu"):
    """(model in eval mode, RunConfig or None) from a run, checkpoint or model folder. A config or
    weights that do not fit this version's model say that the checkpoint may be from another version."""
    folder = resolve(path)
    try:
        config = json.loads((folder / CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise CheckpointError(f"cannot read {folder / CONFIG}: {e}") from None
    config = check_format(config, folder / CONFIG)
    try:
        model = load_model(folder, map_location=device)
        run_cfg = RunConfig.from_dict(config) if isinstance(config.get("model"), dict) else None
    except (CheckpointError, ConfigError) as e:
        raise CheckpointError(f"{e} (a checkpoint from an incompatible learntok version?)") from None
    return model.eval(), run_cfg


# ---------------------------------------------------------------- the command


def eval_documents(run_cfg: RunConfig | None, split: str, source: str | None) -> tuple[list[bytes], list[str] | None, list[bytes]]:
    """(documents to score, their names when the source is a folder, train documents for the BPE
    reference). `split` all: every document of the source, unsplit."""
    if source is None and run_cfg is None:
        raise DataError("this model folder holds no run config: pass --source")
    data_cfg = run_cfg.data if run_cfg is not None else DataConfig()
    if source is not None:
        data_cfg = DataConfig(**{**data_cfg.__dict__, "source": source})
    docs = load_documents(data_cfg.source, data_cfg.text_field)
    if split == "all":
        scored, train = docs, docs
    else:
        from learntok.data import split_documents
        splits = split_documents(docs, seed=data_cfg.split_seed, val_fraction=data_cfg.val_fraction,
                                 test_fraction=data_cfg.test_fraction)
        scored, train = splits[split], splits["train"]
    return scored, _folder_names(data_cfg.source, scored), train


def _folder_names(source: str, docs: list[bytes]) -> list[str] | None:
    """Relative file names of `docs` when `source` is a folder (None if some document is not a
    whole file, e.g. a piece cut from a large file)."""
    root = Path(source).expanduser()
    if not root.is_dir():
        return None
    by_content = {}
    for path in _files_below(root):
        data = path.read_bytes()
        if data and not _is_binary(data):
            by_content.setdefault(data, str(path.relative_to(root)))
    names = [by_content.get(d) for d in docs]
    return None if None in names else names


def breakdown(names: list[str], doc_nats: np.ndarray, doc_bytes: np.ndarray) -> dict[str, dict]:
    """Per file and per file extension ("language"): bytes and bits per byte."""
    groups: dict[str, dict[str, list[int]]] = {"per_file": {}, "per_extension": {}}
    for i, name in enumerate(names):
        groups["per_file"].setdefault(name, []).append(i)
        groups["per_extension"].setdefault(Path(name).suffix or "(none)", []).append(i)
    return {kind: {key: {"bytes": int(doc_bytes[idx].sum()),
                         "bpb": float(doc_nats[idx].sum() / (LN2 * max(doc_bytes[idx].sum(), 1)))}
                   for key, idx in sorted(g.items())}
            for kind, g in groups.items()}


def bpe_reference(model, train_docs: list[bytes], vocab_size: int):
    """(x -> (B, T) bool BPE token starts, description). A `bpe` run's own tokenizer (its causal
    token starts, i.e. its own decisions); otherwise a BPE trained here on the train documents."""
    if model.cfg.boundary == "bpe":
        return (lambda x: model.strategy.boundaries(x).to(x.device) > 0.5), {"tokenizer": "the run's bpe strategy"}
    tok = bq.train_bpe(train_docs, vocab_size)
    return (lambda x: bq.bpe_starts(tok, x)), {"tokenizer": "trained on the train split",
                                               "vocab_size": tok.get_vocab_size()}


def run_eval(path: str | Path, split: str = "test", source: str | None = None, samples: int = 1,
             greedy: bool = False, batch_size: int | None = None, seq_len: int | None = None,
             max_bytes: int | None = None, seed: int = 0, bpe_vocab: int = 4096,
             device: str = "cpu") -> dict:
    """Everything `learntok eval` reports, as one JSON-ready dict."""
    model, run_cfg = load_for_eval(path, device)
    if samples < 1:
        raise ConfigError(f"--samples {samples} must be >= 1")
    tc = run_cfg.train if run_cfg is not None else None
    batch_size = batch_size or (tc.batch_size if tc else 16)
    seq_len = seq_len or (tc.seq_len if tc else 1024)
    docs, names, train_docs = eval_documents(run_cfg, split, source)
    data = ByteData({"train": docs})
    reference, bpe_info = bpe_reference(model, train_docs, bpe_vocab)
    result = evaluate_bpb(model, data.eval_batches("train", batch_size, seq_len, max_bytes), len(docs),
                          samples=samples, greedy=greedy, seed=seed, device=torch.device(device),
                          reference_starts=reference)
    doc_nats, doc_bytes = result.pop("doc_nats"), result.pop("doc_bytes")
    report = {"checkpoint": str(resolve(path)), "split": split, "source": source or (run_cfg.data.source if run_cfg else None),
              "strategy": model.cfg.boundary, "seq_len": seq_len, "batch_size": batch_size, "seed": seed,
              "bpe_reference": bpe_info, **result}
    if names is not None:
        report.update(breakdown(names, doc_nats, doc_bytes))
    return report


def format_report(r: dict) -> str:
    """A short human-readable summary of `run_eval`'s dict."""
    lines = [f"{r['checkpoint']}  split {r['split']}  {r['n_bytes']:,} bytes, {r['n_docs']} documents",
             f"bpb {r['bpb']:.4f}  (per document {r['doc_bpb_mean']:.4f} +- {r['doc_bpb_se']:.4f} s.e.)"]
    if r["samples"] > 1:
        lines.append(f"K = {r['samples']} samples: mean bpb {r['bpb']:.4f}, log-mean-exp bound {r['bpb_bound']:.4f}")
    lines.append(f"boundaries{' (greedy)' if r['greedy'] else ''}: rate {r['boundary_rate']:.3f}  whitespace rate "
                 f"{r['whitespace_rate']:.3f}  mean chunk {r['mean_chunk_length']:.2f} bytes")
    for ref in ("word_starts", "space_starts", "bpe_starts"):
        if ref in r:
            m = r[ref]
            lines.append(f"vs {ref.replace('_', ' ')}: P {m['precision']:.3f} R {m['recall']:.3f} F1 {m['f1']:.3f}")
    for name, m in r.get("per_file", {}).items():
        lines.append(f"  {name}: {m['bpb']:.4f} bpb ({m['bytes']:,} bytes)")
    return "\n".join(lines)
