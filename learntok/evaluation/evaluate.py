"""`learntok eval`: bits per byte with error bars, the K-sample bound, and boundary quality.

Bits per byte (docs/design.md §4): sum of CE in nats over real target bytes / (ln 2 * those bytes),
corpus-level; and the mean over documents of each document's bpb, with its standard error.
With K samples per window, `bpb` is the mean over the K sampled segmentations (an upper bound
on the model's marginal bpb in expectation) and `bpb_bound` the log-mean-exp bound
(learntok.evaluation.metrics, where every metric is declared once). Everything runs under its own seed
(`runtime.inference`): the same seed gives the same numbers.

Shapes: B batch, T bytes (BOS at t = 0), K samples.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from learntok.evaluation import boundary_quality as bq
from learntok.boundaries import build_strategy
from learntok.run.checkpoint import RunRef, figures_of, load_run_folder
from learntok.data.dataset import ALL, FIT_BYTES, ByteData, DataConfig
from learntok.util.errors import CheckpointError, ConfigError, DataError
from learntok.evaluation.metrics import DEFAULT_WINDOW, EvalOptions, breakdown, metric_lines
from learntok.evaluation.metrics import logmeanexp_bound  # noqa: F401  (the public name, here as before)
from learntok.util.progress import note
from learntok.run.rate import held_out_batches, set_rate
from learntok.util.runtime import resolve_device
from learntok.evaluation.score import WINDOW_COLUMNS, evaluate_bpb, paired_difference, window_nats
from learntok.model.config import position_bytes


# ---------------------------------------------------------------- the command


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
        other, other_cfg, other_run = load_run_folder(spec, device)
    except CheckpointError as e:
        raise CheckpointError(f"--boundaries-from {spec}: {e}") from None
    if other.cfg.vocab_size != model.cfg.vocab_size:
        raise ConfigError(
            f"--boundaries-from {spec}: its byte vocabulary has {other.cfg.vocab_size} ids, this "
            f"model's {model.cfg.vocab_size}: they do not read the same windows"
        )
    info = {
        "source": str(other_run.folder),
        "strategy": other.cfg.boundary,
        "target_rate": other.cfg.target_rate,
        "data_source": other_cfg.data.source if other_cfg is not None else None,
    }
    return (lambda x: other(x, greedy=greedy).boundaries), info


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


@dataclass(frozen=True)
class EvalRequest:
    """What `learntok eval` is asked (`run_eval`): the run and every option of the command."""

    run: str | Path | RunRef  # a run folder (its latest checkpoint), a checkpoint or a model folder
    split: str = "test"  # train, val, test, or all (the data unsplit)
    source: str | None = None  # another data.source instead of the run's (a model folder needs one)
    samples: int = 1  # K sampled segmentations a window: mean bpb and log-mean-exp bound
    greedy: bool = False  # decide p > 0.5 instead of sampling
    batch_size: int | None = None  # rows a batch (None: the run's train.batch_size)
    seq_len: int | None = None  # bytes a row, BOS included (None: the window it was trained at)
    max_bytes: int | None = None  # score at most this many bytes (None: the whole split)
    seed: int = 0  # seed of the sampled boundaries
    bpe_vocab: int = 4096  # vocabulary of the reference BPE trained on the fly
    device: str = "cpu"  # where the model runs (learntok.util.runtime.resolve_device)
    rate: float | None = None  # run at this boundary rate, calibrated on the scored text's first bytes
    rate_mode: str | None = None  # with rate: online or calibrated (None: the strategy's default)
    boundaries_from: str | None = None  # score with another run's decisions, or "uniform" (decision_source)

    def __post_init__(self):
        if self.samples < 1:
            raise ConfigError(f"--samples {self.samples} must be >= 1")
        if self.rate is not None and self.boundaries_from is not None:
            raise ConfigError(
                "--rate sets the model's own boundary rate, which --boundaries-from replaces: give one of them"
            )


def run_eval(request: EvalRequest) -> dict:
    """Everything `learntok eval` reports, as one JSON-ready dict (`evaluate_request`)."""
    return evaluate_request(request)[1]


def evaluate_request(req: EvalRequest) -> tuple[RunRef, dict]:
    """The run read (located once: the report and the short-run hint describe the checkpoint
    evaluated) and everything `learntok eval` reports. The data is the run's own (`data.source`,
    its split), read through ByteData as training read it, or `source`. With `rate`, the model
    runs at that boundary rate, calibrated on the scored split's own first bytes and held online
    or fixed by `rate_mode` (learntok.run.rate.set_rate). With `boundaries_from` (`decision_source`),
    the figures are the model's with those decisions, and `own` holds its own decisions' on the
    same windows, paired (docs/compare.md)."""
    dev = resolve_device(req.device)
    model, run_cfg, run = load_run_folder(req.run, dev)
    decide, swap = (None, None)
    if req.boundaries_from is not None:
        decide, swap = decision_source(req.boundaries_from, model, req.greedy, dev)
    data_cfg = _data_config(run_cfg, req.source)
    data = ByteData.from_config(data_cfg, unsplit=req.split == ALL)
    opts = EvalOptions.for_run(
        run_cfg,
        dev,
        req.max_bytes,
        batch_size=req.batch_size,
        seq_len=req.seq_len or trained_window(model, run_cfg),
        samples=req.samples,
        greedy=req.greedy,
        seed=req.seed,
        per_document=True,
        quality=True,
        boundaries_from=decide,
        progress=f"eval {req.split}",
    )
    data.check_window(req.split, opts.seq_len, opts.batch_size, position_bytes(model.cfg))  # before allocating
    setting = None
    if req.rate is not None:  # before the reference BPE is trained: a rate this model cannot hold is refused first
        calibration = held_out_batches(data, opts.seq_len, split=req.split)  # the scored text's own first bytes
        setting = dataclasses.asdict(set_rate(model, req.rate, calibration, req.greedy, req.seed, mode=req.rate_mode))
    reference, bpe_info = reference_starts_for(model, data, req.bpe_vocab)
    opts = dataclasses.replace(opts, reference_starts=reference)
    with figures_of(run.folder):
        result = evaluate_bpb(model, data, req.split, dataclasses.replace(opts, per_window=decide is not None))
    if setting is not None:
        result["rate_setting"] = setting
    if decide is not None:
        result.update(swap_figures(model, data, req.split, opts, result, swap))
    doc_nats, doc_bytes = result.pop("doc_nats"), result.pop("doc_bytes")
    figures = {
        "checkpoint": str(run.folder),
        "split": req.split,
        "source": data_cfg.source,
        "strategy": model.cfg.boundary,
        "seq_len": opts.seq_len,
        "trained_seq_len": trained_window(model, run_cfg, None),
        "batch_size": opts.batch_size,
        "seed": req.seed,
        "target_rate": figure_target(model, setting, swap),
        "bpe_reference": bpe_info,
        **result,
    }
    names = data.names(req.split)
    if names is not None:
        figures.update(breakdown(names, doc_nats, doc_bytes))
    return run, figures


def _data_config(run_cfg, source: str | None) -> DataConfig:
    """The run's data, or `source` in its place; a model folder (no run config) needs `source`."""
    if source is None and run_cfg is None:
        raise DataError("this model folder holds no run config: pass --source")
    data_cfg = run_cfg.data if run_cfg is not None else DataConfig()
    return dataclasses.replace(data_cfg, source=source) if source is not None else data_cfg


def swap_figures(model, data: ByteData, split: str, opts: EvalOptions, result: dict, swap: dict) -> dict:
    """The boundary swap's figures: the model's own decisions on the same windows as `result`
    (evaluate_bpb's, with the swapped-in decisions and their windows, which are taken out of it),
    and the paired difference swapped - own."""
    own = window_nats(
        model, data, split, dataclasses.replace(opts, boundaries_from=None, per_document=False, quality=False)
    )
    swapped = {"nats": result.pop("window_nats"), "bytes": result.pop("window_bytes")}
    diff, se = paired_difference(swapped, own)
    return {
        "boundaries_from": swap,
        "swap_minus_own": diff,
        "swap_minus_own_se": se,
        "n_windows": len(own["nats"]),
        "own": {k: own[k] for k in WINDOW_COLUMNS},
    }


def format_report(r: dict) -> str:
    """A short human-readable summary of `run_eval`'s dict: what was scored, the boundary swap,
    then each metric's lines (learntok.evaluation.metrics.METRICS), then each file's bpb."""
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
        f"windows of {r['seq_len']} bytes ({length})"
    ]
    if "boundaries_from" in r:
        src, own = r["boundaries_from"], r["own"]
        lines += [
            f"boundaries from {src['source']} ({src['strategy']}): the figures below are this model's with "
            f"those decisions",
            f"own boundaries on the same windows: bpb {own['bpb']:.4f}, rate {own['rate']:.3f}, whitespace rate "
            f"{own['whitespace_rate']:.3f}; swapped - own {r['swap_minus_own']:+.4f} bpb "
            f"({r['swap_minus_own_se']:.4f} s.e. over {r['n_windows']} windows): what its own boundaries are "
            f"worth to it",
        ]
    lines += metric_lines(r)
    lines += [f"  {name}: {m['bpb']:.4f} bpb ({m['bytes']:,} bytes)" for name, m in r.get("per_file", {}).items()]
    return "\n".join(lines)
