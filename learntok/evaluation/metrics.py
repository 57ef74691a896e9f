"""What one evaluation measures (learntok.evaluation.evaluate.evaluate_bpb): its options, and each metric
declared once in `METRICS`, with the sums it keeps on the device, what a batch adds to them,
the figures it reports from their totals and its lines of `learntok eval`'s printed report. A
new metric is one entry there; the JSON, the printed report and the one all-reduce follow.

Bits per byte (docs/design.md §4): sum of CE in nats over real target bytes / (ln 2 * those
bytes), corpus-level. With K samples per window, `bpb_bound` is the log-mean-exp bound

    per window: -log( (1/K) sum_k exp(-CE_sum_k) ),  summed,  / (ln 2 * bytes)

which is <= the mean over samples (Jensen), equals it at K = 1, and tightens toward -log p(x).

Shapes: B batch, T bytes (BOS at t = 0), K samples.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from learntok.evaluation import boundary_quality as bq
from learntok.run.config import RunConfig
from learntok.evaluation.statistics import mean_and_se
from learntok.util.errors import NotFiniteError
from learntok.run.labels import rate_mark
from learntok.model.metrics import bits_per_byte, boundary_counts, boundary_rates
from learntok.run.rate import RateSetting
from learntok.util.runtime import resolve_dtype

DEFAULT_WINDOW = 1024  # bytes a row when nothing says what the model was trained at
FOLDER_BATCH = 16  # rows a batch for a bare model folder, which holds no run config


@dataclass
class EvalOptions:
    """How `evaluate_bpb` scores a split."""

    batch_size: int  # rows per forward
    seq_len: int  # T: bytes per row, BOS included
    max_bytes: int | None = None  # score at most this many bytes (None: the whole split)
    samples: int = 1  # K sampled segmentations per window (1 when greedy)
    greedy: bool = False  # decide p > 0.5 instead of sampling
    seed: int = 0  # batch i draws its boundaries from seed + i, on any world size
    amp: torch.dtype | None = None  # autocast dtype: the run's (bf16 on CUDA), so that training's
    # periodic figures and `eval`/`compare` agree
    per_document: bool = False  # per-document bpb (mean and standard error)
    quality: bool = False  # chunk lengths and P/R/F1 against word and space starts
    # each window's CE nats and scored bytes (pairs two models on the same windows; one process)
    per_window: bool = False
    reference_starts: Callable[[torch.Tensor], torch.Tensor] | None = None  # x -> (B, T) bool, e.g. BPE starts
    boundaries_from: Callable[[torch.Tensor], torch.Tensor] | None = None  # x -> (B, T) decisions the model is scored
    # with instead of its own (the boundary swap: `decision_source`)
    progress: str | None = None  # show a progress bar (stderr) under this name; None: silent

    @property
    def k(self) -> int:
        """K: the segmentations scored per window (one when greedy)."""
        return 1 if self.greedy else self.samples

    @classmethod
    def for_run(
        cls,
        cfg: RunConfig | None,
        device: torch.device | str | None = None,
        max_bytes: int | None = None,
        *,
        batch_size: int | None = None,
        seq_len: int | None = None,
        **given,
    ) -> EvalOptions:
        """A run's own windows, the one place they are read from its config: train.batch_size rows
        of train.seq_len bytes (None: these), boundaries seeded by train.seed, autocast at its
        system.dtype on `device` (unless `amp` is given); the other fields `given`. A bare model
        folder (cfg None): FOLDER_BATCH rows of DEFAULT_WINDOW bytes, seed 0, dtype auto."""
        tc = cfg.train if cfg is not None else None
        own = {
            "batch_size": batch_size or (tc.batch_size if tc else FOLDER_BATCH),
            "seq_len": seq_len or (tc.seq_len if tc else DEFAULT_WINDOW),
            "seed": tc.seed if tc else 0,
        }
        if "amp" not in given:
            own["amp"] = resolve_dtype(cfg.system.dtype if cfg is not None else "auto", torch.device(device))
        return cls(max_bytes=max_bytes, **{**own, **given})


def window_bound_nats(ce_sums: torch.Tensor) -> torch.Tensor:
    """(N,) per window: -log( (1/K) sum_k exp(-CE_sum_k) ) from ce_sums (K, N) in nats."""
    K = ce_sums.size(0)
    return -(torch.logsumexp(-ce_sums.double(), dim=0) - math.log(K))


def logmeanexp_bound(ce_sums: torch.Tensor, n_bytes: int | float) -> float:
    """The K-sample bound in bits per byte. ce_sums (K, N): CE in nats summed over each of N
    windows, for K sampled segmentations; n_bytes: scored bytes in the N windows."""
    return float(bits_per_byte(float(window_bound_nats(ce_sums).sum()), n_bytes))


def finite_sums(values: np.ndarray, what: str) -> np.ndarray:
    """`values` (the sums a figure is made of), refused when one is NaN or infinite: the figure
    would print as nan, so no figure is reported (the one check of evaluate_bpb and eval-tasks)."""
    if not np.isfinite(values).all():
        raise NotFiniteError(
            f"{what} came out NaN or infinite: the model's outputs are not finite numbers "
            f"(weights that overflow?), so no figure is reported"
        )
    return values


# ---------------------------------------------------------------- the metrics


@dataclass(frozen=True)
class Batch:
    """What one batch of evaluate_bpb gives every metric."""

    x: torch.Tensor  # (B, T) bytes, BOS first
    ce: torch.Tensor  # (K, B) fp64 CE nats summed over each row, one row of K per sample
    n_row: torch.Tensor  # (B,) fp64 scored bytes of each row
    a: torch.Tensor  # (B, T) the first sample's boundary decisions
    doc_ids: torch.Tensor  # (B,) each row's document
    opts: EvalOptions


Sums = dict[str, torch.Tensor]  # named fp64 sums on the device, each (n,)
Totals = dict[str, np.ndarray]  # every kept sum, added over batches and ranks


@dataclass(frozen=True)
class Metric:
    """One metric of an evaluation: its named sums, kept on the device and added over ranks in
    one all-reduce; its figures (JSON fields, in this order); its lines of the printed report."""

    name: str
    sums: Callable[[EvalOptions, int], dict[str, int]]  # (opts, documents in the split) -> size of each sum
    add: Callable[[Sums, Batch], None]  # a batch added into the sums, in place on the device
    report: Callable[[Totals, EvalOptions, dict], dict]  # its figures from the totals (and the figures before it)
    lines: Callable[[dict], list[str]]  # its lines of `learntok eval`'s report, from the whole report
    kept: Callable[[EvalOptions], bool] = lambda opts: True  # whether an evaluation with `opts` has it


def _add_bpb(s: Sums, b: Batch) -> None:
    s["nats"] += b.ce.sum(1)
    s["bound"] += window_bound_nats(b.ce).sum()
    s["bytes"] += b.n_row.sum()


def _bpb(t: Totals, opts: EvalOptions, _: dict) -> dict:
    n = t["bytes"][0]
    per_sample = bits_per_byte(t["nats"], n).tolist()
    return {
        "bpb": float(np.mean(per_sample)),
        "bpb_per_sample": per_sample,
        "samples": opts.k,
        "greedy": opts.greedy,
        "bpb_bound": float(bits_per_byte(t["bound"][0], n)),
        "n_bytes": int(n),
    }


def _bpb_lines(r: dict) -> list[str]:
    lines = [f"bpb {r['bpb']:.4f}  (per document {r['doc_bpb_mean']:.4f} +- {r['doc_bpb_se']:.4f} s.e.)"]
    if r["samples"] > 1:
        lines.append(f"K = {r['samples']} samples: mean bpb {r['bpb']:.4f}, log-mean-exp bound {r['bpb_bound']:.4f}")
    return lines


def _add_counts(s: Sums, b: Batch) -> None:
    s["counts"] += boundary_counts(b.x, b.a).double()


def _rates(t: Totals, opts: EvalOptions, _: dict) -> dict:
    rates = boundary_rates(torch.from_numpy(t["counts"]))
    return {"boundary_rate": float(rates["boundary_rate"]), "whitespace_rate": float(rates["whitespace_rate"])}


def _rate_lines(r: dict) -> list[str]:
    """The rate the boundaries were set at (--rate), then the rates they reached."""
    # calibrated on the split it scores (learntok.evaluation.evaluate), where one is named
    scored = f"bytes of the {r['split']} split scored" if r.get("split") else "held-out bytes"
    held = (
        [RateSetting(**r["rate_setting"]).describe().replace("held-out bytes", scored)] if "rate_setting" in r else []
    )
    mark = rate_mark(r["boundary_rate"], r["target_rate"])
    return [
        *held,
        f"boundaries{' (greedy)' if r['greedy'] else ''}: rate {r['boundary_rate']:.3f}  whitespace rate "
        f"{r['whitespace_rate']:.3f}  mean chunk {r['mean_chunk_length']:.2f} bytes" + (f"  ({mark})" if mark else ""),
    ]


def _add_documents(s: Sums, b: Batch) -> None:
    ids = b.doc_ids.to(b.x.device)
    s["doc_nats"].index_add_(0, ids, b.ce.mean(0))
    s["doc_bytes"].index_add_(0, ids, b.n_row)


def _documents(t: Totals, opts: EvalOptions, _: dict) -> dict:
    """Per document: the mean bpb and its standard error; the sums themselves (run_eval's breakdown)."""
    nats, n = t["doc_nats"], t["doc_bytes"]
    seen = n > 0
    mean, se = mean_and_se(bits_per_byte(nats[seen], n[seen]))
    return {
        "doc_bpb_mean": mean,
        "doc_bpb_se": se,
        "n_docs": int(seen.sum()),
        "doc_nats": nats,
        "doc_bytes": n.astype(np.int64),
    }


def breakdown(names: list[str], doc_nats: np.ndarray, doc_bytes: np.ndarray) -> dict[str, dict]:
    """Per file and per file extension ("language"): bytes and bits per byte."""
    groups: dict[str, dict[str, list[int]]] = {"per_file": {}, "per_extension": {}}
    for i, name in enumerate(names):
        groups["per_file"].setdefault(name, []).append(i)
        groups["per_extension"].setdefault(Path(name).suffix or "(none)", []).append(i)
    return {
        kind: {
            key: {
                "bytes": int(doc_bytes[idx].sum()),
                "bpb": float(bits_per_byte(doc_nats[idx].sum(), doc_bytes[idx].sum())),
            }
            for key, idx in sorted(g.items())
        }
        for kind, g in groups.items()
    }


BPE = "bpe_starts"  # the optional reference: EvalOptions.reference_starts (a BPE's token starts)


def _references(opts: EvalOptions) -> list[str]:
    return [*bq.REFERENCES, *([BPE] if opts.reference_starts is not None else [])]


def _quality_sums(opts: EvalOptions, _: int) -> dict[str, int]:
    """[true positives, predicted, reference] against each reference; the chunk-length histogram."""
    return {**{f"prf {ref}": 3 for ref in _references(opts)}, "hist": bq.HIST_MAX + 1}


def _add_quality(s: Sums, b: Batch) -> None:
    scored = bq.scored_positions(b.x)
    for ref, starts in bq.REFERENCES.items():
        s[f"prf {ref}"] += bq.prf_counts(b.a, starts(b.x), scored).double()
    if b.opts.reference_starts is not None:
        s[f"prf {BPE}"] += bq.prf_counts(b.a, b.opts.reference_starts(b.x), scored).double()
    s["hist"] += bq.chunk_length_histogram(b.x, b.a).double()


def _quality(t: Totals, opts: EvalOptions, before: dict) -> dict:
    hist = t["hist"].astype(np.int64)
    n_chunks = int(hist.sum())
    result = {
        "mean_chunk_length": float(t["counts"][1] / max(n_chunks, 1)),
        "n_chunks": n_chunks,
        "chunk_length_hist": {
            "bins": [str(i) for i in range(1, bq.HIST_MAX + 1)] + [f">{bq.HIST_MAX}"],
            "counts": hist.tolist(),
        },
        **{ref: bq.prf(t[f"prf {ref}"]) for ref in _references(opts)},
    }
    return {**result, "settled_on": bq.settled_on({**before, **result})}


def _quality_lines(r: dict) -> list[str]:
    lines = [
        f"vs {bq.REFERENCE_LABELS[ref]}: P {r[ref]['precision']:.3f} R {r[ref]['recall']:.3f} F1 {r[ref]['f1']:.3f}"
        for ref in (*bq.REFERENCES, BPE)
        if ref in r
    ]
    if "settled_on" in r:
        where = r["settled_on"]
        lines.append(
            f"settled on: {bq.REFERENCE_LABELS[where]} (F1 {r[where]['f1']:.3f}, of the three places a word boundary "
            "can sit)"
            if where
            else "settled on: no word boundary (none of the three word references above twice chance)"
        )
    return lines


METRICS = (
    Metric("bpb", lambda opts, _: {"nats": opts.k, "bound": 1, "bytes": 1}, _add_bpb, _bpb, _bpb_lines),
    Metric("rates", lambda opts, _: {"counts": 4}, _add_counts, _rates, _rate_lines),
    Metric(
        "documents",
        lambda opts, n_docs: {"doc_nats": n_docs, "doc_bytes": n_docs},
        _add_documents,
        _documents,
        lambda r: [],  # its figures are in the header and the bpb line
        kept=lambda opts: opts.per_document,
    ),
    Metric("quality", _quality_sums, _add_quality, _quality, _quality_lines, kept=lambda opts: opts.quality),
)


def kept_metrics(opts: EvalOptions) -> list[Metric]:
    return [m for m in METRICS if m.kept(opts)]


def report(metrics: list[Metric], totals: Totals, opts: EvalOptions) -> dict:
    """Every metric's figures, in the order of METRICS."""
    result: dict = {}
    for m in metrics:
        result.update(m.report(totals, opts, result))
    return result


def metric_lines(r: dict) -> list[str]:
    """Every metric's lines of the printed report, in the order of METRICS."""
    return [line for m in METRICS for line in m.lines(r)]


# ---------------------------------------------------------------- table columns

# A table column of an evaluation (`columns`) -> the figure of evaluate_bpb's result it shows.
COLUMNS = {
    "bpb": "bpb",
    "doc_bpb": "doc_bpb_mean",
    "doc_se": "doc_bpb_se",
    "docs": "n_docs",
    "bytes": "n_bytes",
    "boundary_rate": "boundary_rate",
    "rate": "boundary_rate",
    "whitespace_rate": "whitespace_rate",
}


def columns(r: dict, names: Iterable[str], prefix: str = "", **given) -> dict:
    """The table columns `names` of an evaluation's figures `r`, in that order, each named prefix +
    name: a column of COLUMNS shows its figure, any other one what the caller `given`s for it (the
    whole split's bytes, a paired difference)."""
    return {prefix + name: given[name] if name in given else r[COLUMNS[name]] for name in names}
