"""A run located once (checkpoint.RunRef): `eval` reads `latest` and config.json once, and its
model, report and short-run hint describe that one checkpoint even when a training run rotates
`latest` meanwhile. The evaluation's metrics are declared once (eval_metrics.METRICS): a metric
added there is summed, reported and printed. EvalOptions for a run and a result's table columns
are each built in one place."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pytest
import torch

from learntok.evaluation import metrics as eval_metrics

from learntok.evaluation import evaluate as evaluate
from learntok.run.checkpoint import SETTLE_STEPS, RunRef, load_run_folder, locate_run, short_run_hint
from learntok.cli import main
from learntok.run.config import load_config
from learntok.data import ByteData
from learntok.evaluation.metrics import METRICS, EvalOptions, Metric, columns
from learntok.evaluation.evaluate import EvalRequest, evaluate_request, format_report
from learntok.model import pretrained
from learntok.util.runtime import resolve_dtype
from learntok.train.loop import train

from test_compare import TINY

OLD = Path(__file__).resolve().parent / "data" / "old-format"
LATER = f"step_{SETTLE_STEPS + 250:07d}"  # a checkpoint a short run's `latest` rotates to: long enough to settle


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("ref") / "run"
    train(load_config("tiny", None, [*TINY, "model.boundary=learned"]), run, progress=False)
    return run


@pytest.fixture
def run(trained, tmp_path) -> Path:
    """A copy of the 2-step learned run, free to rotate."""
    return Path(shutil.copytree(trained, tmp_path / "run"))


@pytest.fixture(autouse=True)
def small_reference_bpe(monkeypatch):
    monkeypatch.setattr(evaluate, "FIT_BYTES", 100_000)


def request(run, **kw) -> EvalRequest:
    return EvalRequest(run, max_bytes=256, bpe_vocab=300, **kw)


def rotate(run: Path) -> None:
    """What a training run does at its next checkpoint: a newer one, `latest` pointed at it."""
    ckpts = run / "checkpoints"
    shutil.copytree(ckpts / "step_0000002", ckpts / LATER)
    (ckpts / "latest").write_text(LATER)


def test_a_run_ref_says_its_checkpoint_step_and_strategy(run, tmp_path):
    ref = locate_run(run)
    assert ref == RunRef(run, run / "checkpoints" / "step_0000002", ref.config)
    assert (ref.step, ref.boundary) == (2, "learned") and locate_run(ref) is ref
    old = locate_run(OLD / "run")  # a run saved before RunRef: located from its own files
    assert (old.step, old.boundary) == (2, "learned")
    model = tmp_path / "model"
    load_run_folder(run)[0].save_pretrained(model)
    assert (locate_run(model).step, locate_run(model).boundary) == (None, None)
    with pytest.raises(AttributeError):
        ref.folder = run  # frozen


def test_an_eval_reads_latest_and_config_json_once(run, monkeypatch):
    reads = Counter()
    real = pretrained.read_input

    def counting(path, *args, **kwargs):
        reads[Path(path).name] += 1
        return real(path, *args, **kwargs)

    monkeypatch.setattr(pretrained, "read_input", counting)
    ref, report = evaluate_request(request(run))
    assert short_run_hint(ref) is not None  # the hint reads nothing more
    assert reads == {"latest": 1, "config.json": 1}
    assert report["checkpoint"] == str(ref.folder)


def test_the_hint_describes_the_checkpoint_evaluated_after_latest_rotates(run):
    ref, report = evaluate_request(request(run))
    rotate(run)
    assert report["checkpoint"].endswith("step_0000002")
    assert "trained 2 steps" in short_run_hint(ref)  # the reference, as it was located
    assert short_run_hint(run) is None  # located anew: the newer checkpoint, long enough to settle


def test_eval_on_the_command_line_hints_for_the_checkpoint_it_scored(run, monkeypatch, capsys):
    """latest rotates once the weights are read: the report and the hint both name step 2."""
    real = pretrained.read_weights

    def then_rotate(path, *args, **kwargs):
        weights = real(path, *args, **kwargs)
        if not (run / "checkpoints" / LATER).exists():
            rotate(run)
        return weights

    monkeypatch.setattr(pretrained, "read_weights", then_rotate)
    assert main(["eval", str(run), "--max-bytes", "256", "--bpe-vocab", "300"]) == 0
    out = capsys.readouterr()
    assert "step_0000002" in out.out.splitlines()[0]
    assert "hint: this run has trained 2 steps" in out.err


def test_a_metric_declared_in_the_table_is_summed_reported_and_printed(run, monkeypatch):
    rows = Metric(
        "rows",
        lambda opts, n_docs: {"rows": 1},
        lambda s, b: s["rows"].add_(b.x.size(0)),
        lambda t, opts, before: {"n_rows": int(t["rows"][0]), "after_bpb": "bpb" in before},
        lambda r: [f"rows {r['n_rows']}"],
    )
    monkeypatch.setattr(eval_metrics, "METRICS", (*METRICS, rows))
    _, report = evaluate_request(request(run, split="val"))
    _, cfg, _ = load_run_folder(run)
    batches = ByteData.from_config(cfg.data).eval_batches("val", cfg.train.batch_size, cfg.train.seq_len, max_bytes=256)
    windows = sum(x.size(0) for x, _ in batches)
    assert report["n_rows"] == windows and report["after_bpb"] is True
    keys = list(report)
    assert keys.index("bpb") < keys.index("boundary_rate") < keys.index("doc_bpb_mean") < keys.index("n_rows")
    assert format_report(report).splitlines()[-1] == f"rows {windows}"


def test_the_printed_report_is_the_metrics_lines_in_table_order(run):
    _, report = evaluate_request(request(run, samples=2))
    lines = format_report(report).splitlines()
    assert lines[1:] == eval_metrics.metric_lines(report)
    assert [line.split()[0] for line in lines[1:4]] == ["bpb", "K", "boundaries:"]


def test_eval_options_for_a_run_are_its_windows_seed_and_dtype(run):
    _, cfg, _ = load_run_folder(run)
    tc = cfg.train
    opts = EvalOptions.for_run(cfg, "cpu", 512)
    assert (opts.batch_size, opts.seq_len, opts.max_bytes, opts.seed) == (tc.batch_size, tc.seq_len, 512, tc.seed)
    assert opts.amp == resolve_dtype(cfg.system.dtype, torch.device("cpu")) and opts.k == 1
    given = EvalOptions.for_run(cfg, max_bytes=None, batch_size=None, seq_len=32, amp=torch.bfloat16, samples=3)
    assert (given.batch_size, given.seq_len, given.amp, given.k) == (tc.batch_size, 32, torch.bfloat16, 3)
    assert EvalOptions.for_run(cfg, "cpu", greedy=True, samples=3).k == 1
    folder = EvalOptions.for_run(None, "cpu")
    assert (folder.batch_size, folder.seq_len, folder.seed) == (
        eval_metrics.FOLDER_BATCH,
        eval_metrics.DEFAULT_WINDOW,
        0,
    )


def test_columns_name_figures_in_the_order_asked():
    r = {"bpb": 1.5, "doc_bpb_mean": 1.4, "n_bytes": 10, "boundary_rate": 0.2, "whitespace_rate": 0.1}
    got = columns(r, ("bpb", "split_bytes", "rate", "bytes"), "val_", split_bytes=99)
    assert list(got.items()) == [("val_bpb", 1.5), ("val_split_bytes", 99), ("val_rate", 0.2), ("val_bytes", 10)]
    with pytest.raises(KeyError):
        columns(r, ("docs",))
