"""`learntok eval`: bits per byte with error bars, the K-sample bound, and boundary quality.

Bits per byte (docs/design.md §4): sum of CE in nats over real target bytes / (ln 2 * those bytes),
corpus-level; and the mean over documents of each document's bpb, with its standard error.
With K samples per window, `bpb` is the mean over the K sampled segmentations (an upper bound
on the model's marginal bpb in expectation) and `bpb_bound` the log-mean-exp bound

    per window: -log( (1/K) sum_k exp(-CE_sum_k) ),  summed,  / (ln 2 * bytes)

which is <= the mean (Jensen), equals it at K = 1, and tightens toward -log p(x) as K grows.
Everything runs under its own seed (`runtime.inference`): the same seed gives the same numbers.

Shapes: B batch, T bytes (BOS at t = 0), K samples.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from learntok import boundary_quality as bq
from learntok.boundaries import build_strategy
from learntok.checkpoint import figures_of, load_run, load_run_folder
from learntok.config import ConfigError
from learntok.data import ByteData, DataConfig, DataError
from learntok.data.dataset import ALL, FIT_BYTES
from learntok.distributed import DistEnv, all_reduce
from learntok.errors import CheckpointError, NotFiniteError
from learntok.figures import rate_mark
from learntok.model.pretrained import resolve
from learntok.objective import bits_per_byte, boundary_counts, boundary_rates, token_ce
from learntok.progress import Progress, note
from learntok.rate import RateSetting, held_out_batches, set_rate
from learntok.runtime import autocast, inference, resolve_device, resolve_dtype


def logmeanexp_bound(ce_sums: torch.Tensor, n_bytes: int | float) -> float:
    """The K-sample bound in bits per byte. ce_sums (K, N): CE in nats summed over each of N
    windows, for K sampled segmentations; n_bytes: scored bytes in the N windows."""
    return float(bits_per_byte(float(window_bound_nats(ce_sums).sum()), n_bytes))


def window_bound_nats(ce_sums: torch.Tensor) -> torch.Tensor:
    """(N,) per window: -log( (1/K) sum_k exp(-CE_sum_k) ) from ce_sums (K, N) in nats."""
    K = ce_sums.size(0)
    return -(torch.logsumexp(-ce_sums.double(), dim=0) - math.log(K))


def mean_and_se(values: np.ndarray) -> tuple[float, float]:
    """Mean and its standard error (sample std / sqrt(n); 0 with fewer than two values)."""
    values = np.asarray(values, dtype=np.float64)
    if len(values) == 0:
        return 0.0, 0.0
    se = float(values.std(ddof=1) / math.sqrt(len(values))) if len(values) > 1 else 0.0
    return float(values.mean()), se


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


def position_bytes(cfg) -> int:
    """A lower bound on the memory one position of a forward takes (bytes): its int64 byte, its
    fp32 logits (vocab_size) and one fp32 activation (d_model). Sizes beyond memory are refused
    with it before anything is allocated (ByteData.check_window)."""
    return 8 + 4 * (cfg.vocab_size + cfg.d_model)


def evaluate_bpb(model, data: ByteData, split: str, opts: EvalOptions, env: DistEnv | None = None) -> dict:
    """The one evaluation of learntok (training's periodic validation, `eval`, `compare`): bits
    per byte of the final head over every byte of `split` (at most opts.max_bytes), the boundary
    and whitespace rates, and optionally per-document figures and boundary quality.

    Every figure is a sum kept on the device (no host sync per batch) and added over ranks once
    at the end: with `env` (world > 1), rank r scores batches r, r + world, ... and the result is
    the same as one process's. Batch i draws its boundaries from seed + i. With K samples, `bpb`
    is the mean over samples and `bpb_bound` the log-mean-exp bound (module docstring)."""
    device = next(model.parameters()).device
    K = 1 if opts.greedy else opts.samples
    rank, world = (env.rank, env.world) if env is not None else (0, 1)
    n_docs = data.n_documents(split) if opts.per_document else 0
    sizes = {
        "nats": K,  # CE nats per sample
        "bound": 1,  # the K-sample bound's nats
        "counts": 4,  # boundary_counts
        "bytes": 1,  # scored target bytes
        "doc_nats": n_docs,
        "doc_bytes": n_docs,  # per document (per_document)
        "quality": QUALITY_REFS * 3 + bq.HIST_MAX + 1,
    }  # P/R/F1 counts per reference; histogram
    sums = {name: torch.zeros(n, dtype=torch.float64, device=device) for name, n in sizes.items()}
    windows: list[torch.Tensor] = []  # per_window: (2, B) nats and bytes per batch
    if opts.per_window and world > 1:
        raise ConfigError("per-window figures are for one process (they pair two models' windows)")
    with inference(model, opts.seed, device):
        batches = data.eval_batches(split, opts.batch_size, opts.seq_len, max_bytes=opts.max_bytes)
        if opts.progress is not None:
            batches = Progress(
                batches,
                desc=opts.progress,
                unit="batch",
                total=data.n_eval_batches(split, opts.batch_size, opts.seq_len, opts.max_bytes),
            )
        for i, (x, doc_ids) in enumerate(batches):
            if i % world != rank:
                continue
            torch.manual_seed(opts.seed + i)
            x = x.to(device)
            ce_k = []
            for k in range(K):
                with autocast(device, opts.amp):
                    out = decide_and_forward(model, x, opts)
                ce, mask = token_ce(out.logits, x)  # (B, T-1)
                ce_k.append(ce.double().sum(1))  # (B,)
                if k == 0:
                    a = out.boundaries  # (B, T) the first sample's decisions
            ce_k = torch.stack(ce_k)  # (K, B)
            sums["nats"] += ce_k.sum(1)
            sums["bound"] += window_bound_nats(ce_k).sum()
            n_row = mask.double().sum(1)  # (B,) scored bytes
            sums["bytes"] += n_row.sum()
            sums["counts"] += boundary_counts(x, a).double()
            if opts.per_document:
                ids = doc_ids.to(device)
                sums["doc_nats"].index_add_(0, ids, ce_k.mean(0))
                sums["doc_bytes"].index_add_(0, ids, n_row)
            if opts.quality:
                sums["quality"] += _quality_counts(x, a, opts.reference_starts)
            if opts.per_window:
                windows.append(torch.stack([ce_k.mean(0), n_row]))
    flat = torch.cat(list(sums.values()))  # one all-reduce for every sum
    if world > 1:
        flat = all_reduce(flat, env)
    values = finite_sums(flat.cpu().numpy(), f"bits per byte on the {split} split")  # the one host sync
    totals = dict(zip(sums, np.split(values, np.cumsum(list(sizes.values()))[:-1])))
    result = _report(totals, K, opts)
    if opts.per_window:
        per = torch.cat(windows, dim=1).cpu().numpy() if windows else np.zeros((2, 0))
        result.update(window_nats=per[0], window_bytes=per[1])
    return result


def decide_and_forward(model, x: torch.Tensor, opts: EvalOptions):
    """The model's forward on x (B, T): with its own decisions, or with opts.boundaries_from's. The
    source draws from the evaluation's seeded stream where the model's own decisions would, and the
    model's draws with the decisions given (nawrot still draws its relaxed sample) are discarded, so
    a source that is the model itself gives the model's own evaluation exactly, at every sample k."""
    if opts.boundaries_from is None:
        return model(x, greedy=opts.greedy)
    given = opts.boundaries_from(x)  # (B, T) float 0/1
    with torch.random.fork_rng(devices=[x.device] if x.device.type == "cuda" else []):
        return model(x, boundaries=given, greedy=opts.greedy)


def window_nats(model, data: ByteData, split: str, opts: EvalOptions) -> dict[str, np.ndarray | float]:
    """Per window (row) of `split`: CE nats summed and scored bytes (evaluate_bpb's per-window
    figures, so their totals give its bpb), with the bpb and the boundary and whitespace rates.
    They pair two models (or one model's two sources of decisions) on the same windows."""
    r = evaluate_bpb(model, data, split, dataclasses.replace(opts, per_window=True))
    return {
        "nats": r["window_nats"],
        "bytes": r["window_bytes"],
        "bpb": r["bpb"],
        "rate": r["boundary_rate"],
        "whitespace_rate": r["whitespace_rate"],
    }


# Two-sided 95% quantiles of Student's t with 1..10 degrees of freedom (beyond: the normal's, plus a
# correction that is within 0.5% of the exact value from 11 on).
T95 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228]


def t95(dof: int) -> float:
    return T95[dof - 1] if dof <= len(T95) else 1.96 + 2.4 / dof


def over_seeds(diffs) -> tuple[float, float, bool]:
    """Paired differences, one a seed -> their mean, its standard error over seeds, and whether the
    95% t-interval includes 0 (a tie; always with one seed, which says nothing of training noise)."""
    diff, se = mean_and_se(diffs)
    half = t95(len(diffs) - 1) * se if len(diffs) > 1 else math.inf
    return diff, se, abs(diff) <= half


def verdict(diff: float, tie: bool) -> str:
    """How a difference over seeds reads in a table: tie, lower or higher."""
    return "tie" if tie else ("lower" if diff < 0 else "higher")


def paired_difference(a: dict, b: dict) -> tuple[float, float]:
    """bpb of `a` minus bpb of `b` on the same windows (corpus level), and the standard error of
    the mean per-window difference (windows of one document are not independent: a lower bound)."""
    diff = bits_per_byte(a["nats"] - b["nats"], a["bytes"])
    mean = float(bits_per_byte(a["nats"].sum() - b["nats"].sum(), a["bytes"].sum()))
    return mean, float(diff.std(ddof=1) / math.sqrt(len(diff))) if len(diff) > 1 else 0.0


QUALITY_REFS = len(bq.REFERENCES) + 1  # the references, then the optional reference starts (BPE)


def _quality_counts(x: torch.Tensor, a: torch.Tensor, reference_starts) -> torch.Tensor:
    """(3 QUALITY_REFS + HIST_MAX + 1,) fp64: P/R/F1 counts against each of bq.REFERENCES and
    the reference starts (zeros without one), then the chunk-length histogram."""
    scored = bq.scored_positions(x)
    if reference_starts is not None:
        ref = bq.prf_counts(a, reference_starts(x), scored)
    else:
        ref = torch.zeros(3, device=x.device)
    words = [bq.prf_counts(a, starts(x), scored) for starts in bq.REFERENCES.values()]
    return torch.cat([*words, ref.long(), bq.chunk_length_histogram(x, a)]).double()


def finite_sums(values: np.ndarray, what: str) -> np.ndarray:
    """`values` (the sums a figure is made of), refused when one is NaN or infinite: the figure
    would print as nan, so no figure is reported (the one check of evaluate_bpb and eval-tasks)."""
    if not np.isfinite(values).all():
        raise NotFiniteError(
            f"{what} came out NaN or infinite: the model's outputs are not finite numbers "
            f"(weights that overflow?), so no figure is reported"
        )
    return values


def _report(v: dict[str, np.ndarray], K: int, opts: EvalOptions) -> dict:
    """The figures from evaluate_bpb's named sums."""
    counts, n, doc_nats, doc_bytes, quality = v["counts"], v["bytes"][0], v["doc_nats"], v["doc_bytes"], v["quality"]
    per_sample = bits_per_byte(v["nats"], n).tolist()
    rates = boundary_rates(torch.from_numpy(counts))
    result = {
        "bpb": float(np.mean(per_sample)),
        "bpb_per_sample": per_sample,
        "samples": K,
        "greedy": opts.greedy,
        "bpb_bound": float(bits_per_byte(v["bound"][0], n)),
        "n_bytes": int(n),
        "boundary_rate": float(rates["boundary_rate"]),
        "whitespace_rate": float(rates["whitespace_rate"]),
    }
    if opts.per_document:
        seen = doc_bytes > 0
        doc_mean, doc_se = mean_and_se(bits_per_byte(doc_nats[seen], doc_bytes[seen]))
        result.update(
            doc_bpb_mean=doc_mean,
            doc_bpb_se=doc_se,
            n_docs=int(seen.sum()),
            doc_nats=doc_nats,
            doc_bytes=doc_bytes.astype(np.int64),
        )
    if opts.quality:
        hist = quality[3 * QUALITY_REFS :].astype(np.int64)
        n_chunks = int(hist.sum())
        result.update(
            mean_chunk_length=float(counts[1] / max(n_chunks, 1)),
            n_chunks=n_chunks,
            chunk_length_hist={
                "bins": [str(i) for i in range(1, bq.HIST_MAX + 1)] + [f">{bq.HIST_MAX}"],
                "counts": hist.tolist(),
            },
            **{name: bq.prf(quality[3 * i : 3 * i + 3]) for i, name in enumerate(bq.REFERENCES)},
        )
        if opts.reference_starts is not None:
            result["bpe_starts"] = bq.prf(quality[3 * QUALITY_REFS - 3 : 3 * QUALITY_REFS])
        result["settled_on"] = bq.settled_on(result)
    return result


# ---------------------------------------------------------------- the command


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


def reference_starts_for(model, data: ByteData, vocab_size: int) -> tuple[Callable, dict]:
    """(x -> (B, T) bool reference token starts, description): the strategy's own reference when it
    has one (`bpe`: its tokenizer's starts), otherwise a BPE trained here on a bounded sample of
    the training documents."""
    if model.strategy.has_reference:
        return model.strategy.reference_starts, {"tokenizer": f"the run's {model.cfg.boundary} strategy"}
    fit_split = ALL if ALL in data.split_names else "train"
    note(f"training a reference BPE ({vocab_size} tokens) on the {fit_split} split")
    tok = bq.reference_bpe(data.sample_documents(fit_split, FIT_BYTES), vocab_size)
    return (lambda x: bq.bpe_starts(tok, x)), {
        "tokenizer": f"trained on the {fit_split} split",
        "vocab_size": tok.get_vocab_size(),
    }


UNIFORM = "uniform"  # `--boundaries-from uniform`: the rule, not a folder (write ./uniform for one)


def decision_source(spec: str, model, greedy: bool, device: torch.device) -> tuple[Callable, dict]:
    """(x -> (B, T) decisions, what they are) for `eval --boundaries-from`: `uniform` (the uniform
    rule at the model's target rate) or another run's (or model folder's) model deciding with its
    own strategy on each window, sampled (or greedy, as the evaluation) from the evaluation's
    seeded stream (`decide_and_forward`). A non-causal source (`bpe`) is fine: nothing is generated."""
    if spec == UNIFORM:
        rule = build_strategy(dataclasses.replace(model.cfg, boundary=UNIFORM, strategy={}))  # reads no encoder output
        return (lambda x: rule(None, x).decisions), {
            "source": UNIFORM,
            "strategy": UNIFORM,
            "target_rate": model.cfg.target_rate,
        }
    if not Path(spec).exists():
        raise ConfigError(f"--boundaries-from {spec}: no such run or model folder (or give '{UNIFORM}')")
    try:
        other, other_cfg = load_run(spec, device)
    except CheckpointError as e:
        raise CheckpointError(f"--boundaries-from {spec}: {e}") from None
    if other.cfg.vocab_size != model.cfg.vocab_size:
        raise ConfigError(
            f"--boundaries-from {spec}: its byte vocabulary has {other.cfg.vocab_size} ids, this "
            f"model's {model.cfg.vocab_size}: they do not read the same windows"
        )
    info = {
        "source": str(resolve(spec)),
        "strategy": other.cfg.boundary,
        "target_rate": other.cfg.target_rate,
        "data_source": other_cfg.data.source if other_cfg is not None else None,
    }
    return (lambda x: other(x, greedy=greedy).boundaries), info


DEFAULT_WINDOW = 1024  # bytes a row when nothing says what the model was trained at


def trained_window(model, run_cfg, default: int | None = DEFAULT_WINDOW) -> int | None:
    """The window (train.seq_len) the model was trained at: its run config's, or the one a model
    folder recorded (`trained_seq_len`); `default` when neither says. Evaluating at another
    length gives another bpb for the same weights."""
    if run_cfg is not None:
        return run_cfg.train.seq_len
    return getattr(model, "trained_seq_len", None) or default


def figure_target(model, setting: dict | None, swap: dict | None) -> float:
    """The rate the evaluated decisions aim at: --rate's, the swapped-in source's, or the model's own."""
    if setting is not None:
        return setting["target"]
    return swap["target_rate"] if swap is not None else model.cfg.target_rate


def run_eval(
    path: str | Path,
    split: str = "test",
    source: str | None = None,
    samples: int = 1,
    greedy: bool = False,
    batch_size: int | None = None,
    seq_len: int | None = None,
    max_bytes: int | None = None,
    seed: int = 0,
    bpe_vocab: int = 4096,
    device: str = "cpu",
    rate: float | None = None,
    boundaries_from: str | None = None,
    rate_mode: str | None = None,
) -> dict:
    """Everything `learntok eval` reports, as one JSON-ready dict. The data is the run's own
    (`data.source`, its split), read through ByteData as training read it, or `source`. With
    `rate`, the model runs at that boundary rate, calibrated on the val split and held online or
    fixed by `rate_mode` (learntok.rate.set_rate).
    With `boundaries_from` (`decision_source`), the figures are the model's with those decisions,
    and `own` holds its own decisions' on the same windows, paired (docs/compare.md)."""
    if samples < 1:
        raise ConfigError(f"--samples {samples} must be >= 1")
    if rate is not None and boundaries_from is not None:
        raise ConfigError(
            "--rate sets the model's own boundary rate, which --boundaries-from replaces: give one of them"
        )
    dev = resolve_device(device)
    model, run_cfg, folder = load_run_folder(path, dev)
    decide, swap = decision_source(boundaries_from, model, greedy, dev) if boundaries_from is not None else (None, None)
    if source is None and run_cfg is None:
        raise DataError("this model folder holds no run config: pass --source")
    data_cfg = run_cfg.data if run_cfg is not None else DataConfig()
    if source is not None:
        data_cfg = dataclasses.replace(data_cfg, source=source)
    data = ByteData.from_config(data_cfg, unsplit=split == ALL)
    seq_len = seq_len or trained_window(model, run_cfg)
    batch_size = batch_size or (run_cfg.train.batch_size if run_cfg else 16)
    data.check_window(split, seq_len, batch_size, position_bytes(model.cfg))  # rows that cannot fit, before allocating
    setting = None
    if rate is not None:  # before the reference BPE is trained: a rate this model cannot hold is refused first
        calibration = held_out_batches(data, seq_len, split=split)  # the scored text's own first bytes
        setting = dataclasses.asdict(set_rate(model, rate, calibration, greedy, seed, mode=rate_mode))
    reference, bpe_info = reference_starts_for(model, data, bpe_vocab)
    opts = EvalOptions(
        batch_size,
        seq_len,
        max_bytes,
        samples,
        greedy,
        seed,
        amp=resolve_dtype(run_cfg.system.dtype if run_cfg else "auto", dev),
        per_document=True,
        quality=True,
        reference_starts=reference,
        boundaries_from=decide,
        progress=f"eval {split}",
    )
    with figures_of(folder):
        result = evaluate_bpb(model, data, split, dataclasses.replace(opts, per_window=decide is not None))
    if setting is not None:
        result["rate_setting"] = setting
    if decide is not None:
        own = window_nats(
            model, data, split, dataclasses.replace(opts, boundaries_from=None, per_document=False, quality=False)
        )
        swapped = {"nats": result.pop("window_nats"), "bytes": result.pop("window_bytes")}
        diff, se = paired_difference(swapped, own)
        result.update(
            boundaries_from=swap,
            swap_minus_own=diff,
            swap_minus_own_se=se,
            n_windows=len(own["nats"]),
            own={k: own[k] for k in ("bpb", "rate", "whitespace_rate")},
        )
    doc_nats, doc_bytes = result.pop("doc_nats"), result.pop("doc_bytes")
    report = {
        "checkpoint": str(folder),
        "split": split,
        "source": data_cfg.source,
        "strategy": model.cfg.boundary,
        "seq_len": opts.seq_len,
        "trained_seq_len": trained_window(model, run_cfg, None),
        "batch_size": opts.batch_size,
        "seed": seed,
        "target_rate": figure_target(model, setting, swap),
        "bpe_reference": bpe_info,
        **result,
    }
    names = data.names(split)
    if names is not None:
        report.update(breakdown(names, doc_nats, doc_bytes))
    return report


def format_report(r: dict) -> str:
    """A short human-readable summary of `run_eval`'s dict."""
    trained = r.get("trained_seq_len")
    length = (
        "its training length"
        if trained == r["seq_len"]
        else f"it was trained at {trained}"
        if trained
        else "the default: the folder does not record its training length"
    )
    lines = [
        f"{r['checkpoint']}  split {r['split']}  {r['n_bytes']:,} bytes, {r['n_docs']} documents, "
        f"windows of {r['seq_len']} bytes ({length})",
        f"bpb {r['bpb']:.4f}  (per document {r['doc_bpb_mean']:.4f} +- {r['doc_bpb_se']:.4f} s.e.)",
    ]
    if r["samples"] > 1:
        lines.append(f"K = {r['samples']} samples: mean bpb {r['bpb']:.4f}, log-mean-exp bound {r['bpb_bound']:.4f}")
    if "rate_setting" in r:
        lines.append(RateSetting(**r["rate_setting"]).describe().replace("held-out", "val"))
    lines.append(
        f"boundaries{' (greedy)' if r['greedy'] else ''}: rate {r['boundary_rate']:.3f}  whitespace rate "
        f"{r['whitespace_rate']:.3f}  mean chunk {r['mean_chunk_length']:.2f} bytes"
        + (f"  ({mark})" if (mark := rate_mark(r["boundary_rate"], r["target_rate"])) else "")
    )
    if "boundaries_from" in r:
        src, own = r["boundaries_from"], r["own"]
        lines[1:1] = [
            f"boundaries from {src['source']} ({src['strategy']}): the figures below are this model's with "
            f"those decisions",
            f"own boundaries on the same windows: bpb {own['bpb']:.4f}, rate {own['rate']:.3f}, whitespace rate "
            f"{own['whitespace_rate']:.3f}; swapped - own {r['swap_minus_own']:+.4f} bpb "
            f"({r['swap_minus_own_se']:.4f} s.e. over {r['n_windows']} windows): what its own boundaries are "
            f"worth to it",
        ]
    for ref in (*bq.REFERENCES, "bpe_starts"):
        if ref in r:
            m = r[ref]
            lines.append(f"vs {bq.REFERENCE_LABELS[ref]}: P {m['precision']:.3f} R {m['recall']:.3f} F1 {m['f1']:.3f}")
    if "settled_on" in r:
        where = r["settled_on"]
        lines.append(
            f"settled on: {bq.REFERENCE_LABELS[where]} (F1 {r[where]['f1']:.3f}, of the three places a word boundary "
            "can sit)"
            if where
            else "settled on: no word boundary (none of the three word references above twice chance)"
        )
    for name, m in r.get("per_file", {}).items():
        lines.append(f"  {name}: {m['bpb']:.4f} bpb ({m['bytes']:,} bytes)")
    return "\n".join(lines)
