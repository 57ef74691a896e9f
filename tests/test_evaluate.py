"""`learntok eval`: the K-sample bound, P/R/F1, chunk lengths, determinism, breakdowns, loading."""

import json
import math

import numpy as np
import pytest
import torch

from learntok.evaluation import boundary_quality as bq
from learntok.run.checkpoint import load_run
from learntok.model.pretrained import check_format
from learntok.data import ByteData, encode
from learntok.util.errors import CheckpointError
from learntok.evaluation.evaluate import EvalOptions, EvalRequest, evaluate_bpb, logmeanexp_bound, run_eval
from learntok.evaluation.statistics import mean_and_se
from learntok.model.metrics import is_whitespace

from conftest import tiny_model

TEXT = [b"the cat sat on the mat. " * 4, b"a dog ran far away, then back home again! " * 3, b"x y z"]


def test_bound_equals_mean_for_one_sample():
    ce = torch.tensor([[3.0, 5.0, 7.0]])
    assert logmeanexp_bound(ce, 10) == pytest.approx(15.0 / (math.log(2) * 10))


def test_bound_below_mean_and_matches_formula():
    ce = torch.tensor([[3.0, 5.0], [4.0, 9.0], [3.5, 6.0]])  # (K=3, N=2)
    mean_bpb = float(ce.sum(1).mean()) / (math.log(2) * 7)
    want = sum(-math.log(sum(math.exp(-float(c)) for c in ce[:, n]) / 3) for n in range(2)) / (math.log(2) * 7)
    assert logmeanexp_bound(ce, 7) == pytest.approx(want)
    assert logmeanexp_bound(ce, 7) <= mean_bpb


def test_mean_and_se():
    m, se = mean_and_se(np.array([1.0, 2.0, 3.0, 4.0]))
    assert m == 2.5 and se == pytest.approx(np.std([1, 2, 3, 4], ddof=1) / 2)
    assert mean_and_se(np.array([5.0])) == (5.0, 0.0)


def test_precision_recall_f1_hand_made():
    x = encode("ab cd ef").unsqueeze(0)  # bytes at t = 1..8
    ref = bq.word_starts(x)
    assert ref[0].nonzero().flatten().tolist() == [4, 7]  # 'c', 'e'
    a = torch.zeros_like(x, dtype=torch.float)
    a[0, [0, 4, 5]] = 1  # BOS, 'c' (hit), ' ' after 'd' (miss)
    counts = bq.prf_counts(a, ref, bq.scored_positions(x))
    assert counts.tolist() == [1, 2, 2]
    m = bq.prf(counts)
    assert (m["precision"], m["recall"], m["f1"]) == (0.5, 0.5, 0.5)
    assert bq.prf(np.array([0, 0, 3])) == {"precision": 0.0, "recall": 0.0, "f1": 0.0}


def test_space_starts_first_whitespace_of_each_run():
    x = encode("ab  cd ef").unsqueeze(0)  # BOS a b ' ' ' ' c d ' ' e f
    assert bq.space_starts(x)[0].nonzero().flatten().tolist() == [3, 7]
    a = torch.zeros_like(x, dtype=torch.float)
    a[0, [0, 3, 7]] = 1  # a policy that cuts at the space
    m = bq.prf(bq.prf_counts(a, bq.space_starts(x), bq.scored_positions(x)))
    assert m["f1"] == 1.0


def test_word_ends_last_byte_before_whitespace():
    x = encode("ab  cd ef").unsqueeze(0)  # BOS a b ' ' ' ' c d ' ' e f
    assert bq.word_ends(x)[0].nonzero().flatten().tolist() == [2, 6]  # 'b', 'd'; not 'f' (last byte)
    a = torch.zeros_like(x, dtype=torch.float)
    a[0, [2, 6, 8]] = 1  # both word ends, and 'e' (a word start)
    m = bq.prf(bq.prf_counts(a, bq.word_ends(x), bq.scored_positions(x)))
    assert (m["precision"], m["recall"]) == (2 / 3, 1.0)
    # each convention is one byte from the next: a word end, then a space start, then a word start
    assert (bq.word_ends(x).roll(1, 1) & is_whitespace(x)).sum() == 2


def _quality_report(x: torch.Tensor, a: torch.Tensor) -> dict:
    """The figures run_eval derives from boundaries `a` on bytes `x`: rate, then P/R/F1 a reference."""
    mask = bq.scored_positions(x)
    report = {"boundary_rate": float((a.bool() & mask).sum() / mask.sum())}
    for name in bq.WORD_REFERENCES:
        report[name] = bq.prf(bq.prf_counts(a, bq.REFERENCES[name](x), mask))
    return report


@pytest.mark.parametrize("where", [*bq.WORD_REFERENCES, "random", "every byte"])
def test_settled_on_names_the_word_reference_the_boundaries_sit_at(where):
    """Boundaries exactly at one of the three word references, or at most of them plus random cuts,
    are named as that reference; random cuts at any rate, and a cut at every byte, as none."""
    x = encode(b"".join(TEXT) * 2).unsqueeze(0)
    gen = torch.Generator().manual_seed(0)
    noise = torch.rand(x.shape, generator=gen)
    if where in bq.REFERENCES:
        ref = bq.REFERENCES[where](x)
        for keep, extra in ((1.0, 0.0), (0.7, 0.05)):  # exact; then 70% of them and 5% random cuts
            a = ((ref & (noise < keep)) | (torch.rand(x.shape, generator=gen) < extra)).float()
            assert bq.settled_on(_quality_report(x, a)) == where
    else:
        a = (noise < 0.2).float() if where == "random" else torch.ones(x.shape)
        assert bq.settled_on(_quality_report(x, a)) is None


@pytest.mark.parametrize("text", ["plain ascii", "日本語のテキスト", "Grüße, naïve café", "a😀b", "e\u0301 ж"])
def test_char_starts_are_the_first_byte_of_each_character(text):
    x = encode(text).unsqueeze(0)  # BOS first
    want = [1 + len(text[:i].encode()) for i in range(len(text))]  # each character's first byte
    assert bq.char_starts(x)[0].nonzero().flatten().tolist() == want


def test_chunk_lengths_and_histogram():
    x = torch.cat([encode("abcdefg"), torch.full((3,), 258)]).unsqueeze(0)  # 7 bytes then PAD
    a = torch.zeros(x.shape)
    a[0, [0, 3, 4]] = 1  # chunks start at bytes 0, 2, 3
    lengths = bq.chunk_lengths(x, a)
    assert lengths.tolist() == [2, 1, 4]
    hist = bq.length_histogram(np.array([1, 1, 2, 40]))
    assert hist[0] == 2 and hist[1] == 1 and hist[-1] == 1 and hist.sum() == 4


def test_bpe_reference_starts_are_byte_offsets():
    tok = bq.reference_bpe([b"hello world hello world hello there " * 20], vocab_size=300)
    x = encode("hello world").unsqueeze(0)
    starts = bq.bpe_starts(tok, x)[0].nonzero().flatten().tolist()
    assert starts[0] == 1 and 6 in starts  # 'h' and ' world' start tokens


DATA = ByteData({"test": TEXT, "train": TEXT})


def _eval(model, batch_size=2, seq_len=32, **kw):
    return evaluate_bpb(model, DATA, "test", EvalOptions(batch_size, seq_len, per_document=True, quality=True, **kw))


def test_evaluate_bpb_deterministic_and_samples():
    model = tiny_model().eval()
    r1 = _eval(model, samples=3, seed=5)
    r2 = _eval(model, samples=3, seed=5)
    assert r1["bpb"] == r2["bpb"] and r1["bpb_bound"] == r2["bpb_bound"]
    assert r1["bpb_bound"] <= r1["bpb"] + 1e-12
    assert r1["n_bytes"] == sum(map(len, TEXT)) and r1["n_docs"] == 3
    assert sum(r1["chunk_length_hist"]["counts"]) == r1["n_chunks"]
    one = _eval(model, samples=1, seed=5)
    assert one["bpb_bound"] == pytest.approx(one["bpb"])
    g = _eval(model, samples=4, greedy=True)
    assert g["samples"] == 1


def test_evaluate_bpb_greedy_does_not_depend_on_batch_size():
    model = tiny_model().eval()
    a = _eval(model, batch_size=1, greedy=True)
    b = _eval(model, batch_size=3, greedy=True)
    assert a["bpb"] == pytest.approx(b["bpb"], rel=1e-5)
    assert a["doc_bpb_mean"] == pytest.approx(b["doc_bpb_mean"], rel=1e-5)


def test_run_eval_on_folder_gives_per_file_breakdown(tmp_path):
    model_dir, src = tmp_path / "model", tmp_path / "src"
    tiny_model().save_pretrained(model_dir)
    (src / "sub").mkdir(parents=True)
    (src / "a.py").write_bytes(TEXT[0])
    (src / "sub" / "b.txt").write_bytes(TEXT[1])
    r = run_eval(EvalRequest(model_dir, "all", str(src), samples=2, batch_size=2, seq_len=32, bpe_vocab=300))
    assert set(r["per_file"]) == {"a.py", "sub/b.txt"} and set(r["per_extension"]) == {".py", ".txt"}
    total = sum(m["bpb"] * m["bytes"] for m in r["per_file"].values()) / r["n_bytes"]
    assert total == pytest.approx(r["bpb"], rel=1e-6)
    assert 0 <= r["bpe_starts"]["f1"] <= 1 and r["bpe_reference"]["tokenizer"] == "trained on the all split"
    json.dumps(r)  # JSON-ready
    assert (
        run_eval(EvalRequest(model_dir, "all", str(src), samples=2, batch_size=2, seq_len=32, bpe_vocab=300))["bpb"]
        == r["bpb"]
    )


def test_incompatible_checkpoint_says_so(tmp_path):
    with pytest.raises(CheckpointError, match="format 99"):
        check_format({"format_version": 99, "learntok_version": "9.0"}, tmp_path / "config.json")
    model_dir = tmp_path / "model"
    tiny_model().save_pretrained(model_dir)
    cfg = json.loads((model_dir / "config.json").read_text())
    cfg["some_future_field"] = 1
    (model_dir / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="incompatible learntok version"):
        load_run(model_dir)


def test_command_line_eval_eval_tasks_diagnose_plot(tmp_path, capsys):
    """One tiny run, then every evaluation subcommand through learntok.cli.main."""
    from learntok.cli import main
    from learntok.run.config import load_config
    from learntok.train.loop import train

    corpus = tmp_path / "corpus.txt"
    corpus.write_text(" ".join(f"the quick brown fox {i} jumps over the lazy dog." for i in range(200)))
    cfg = load_config(
        overrides=[
            "model.d_model=32",
            "model.n_heads=2",
            "model.n_mid=1",
            f"data.source={corpus}",
            "system.device=cpu",
            "train.seq_len=48",
            "train.batch_size=4",
            "train.steps=4",
            "optim.warmup_steps=1",
            "log.eval_every=2",
            "log.eval_bytes=256",
            "log.segment_every=0",
            "log.log_every=1",
        ]
    )
    run = tmp_path / "run"
    train(cfg, run, progress=False)
    args = ["eval", str(run), "--samples", "2", "--max-bytes", "400", "--bpe-vocab", "300"]
    assert main(args + ["--json", str(tmp_path / "e1.json")]) == 0
    assert main(args + ["--json", str(tmp_path / "e2.json")]) == 0
    e1, e2 = (json.loads((tmp_path / f"e{i}.json").read_text()) for i in (1, 2))
    assert e1["bpb"] == e2["bpb"] and e1["bpb_bound"] <= e1["bpb"] and e1["n_bytes"] == 400
    task = tmp_path / "t.jsonl"
    task.write_text(json.dumps({"context": "the quick brown", "continuation": "fox"}) + "\n")
    assert main(["eval-tasks", str(run), "--task", str(task), "--json", str(tmp_path / "t.json")]) == 0
    assert json.loads((tmp_path / "t.json").read_text())["tasks"]["t"]["n"] == 1
    task.write_text('{"context": "x"}\n')
    assert main(["eval-tasks", str(run), "--task", str(task)]) == 2
    assert "line 1: missing field 'continuation'" in capsys.readouterr().err
    assert main(["diagnose", str(run), "--batches", "1", "--samples", "2", "--seq-len", "32"]) == 0
    assert (run / "diagnose" / "diagnose.png").is_file()
    assert main(["plot", str(run)]) == 0 and (run / "plots" / "bpb.png").is_file()


def test_device_histogram_matches_the_plain_reference():
    torch.manual_seed(0)
    x = torch.randint(0, 256, (5, 40))
    x[:, 0] = 256
    x[1, 30:] = 258  # a short row: PAD after its end
    x[4, 1:] = 258  # an empty row
    a = (torch.rand(5, 40) < 0.3).float()
    a[:, 0] = 1
    want = bq.length_histogram(bq.chunk_lengths(x, a))
    assert bq.chunk_length_histogram(x, a).tolist() == want.tolist()


def test_sharded_evaluation_adds_up_to_one_process(monkeypatch):
    """Rank r of world 2 scores batches r, r + 2, ...: the sums over ranks give the one-process figures."""
    import learntok.evaluation.score as ev
    from learntok.run.distributed import DistEnv

    model, cpu = tiny_model().eval(), torch.device("cpu")
    opts = EvalOptions(1, 32, samples=2, seed=3, per_document=True, quality=True)
    partial = []
    monkeypatch.setattr(ev, "all_reduce", lambda t, env: partial.append(t.clone()) or t)
    for rank in range(2):
        ev.evaluate_bpb(model, DATA, "test", opts, DistEnv(rank, 2, 0, cpu))
    monkeypatch.setattr(ev, "all_reduce", lambda t, env: partial[0] + partial[1])
    merged = ev.evaluate_bpb(model, DATA, "test", opts, DistEnv(0, 2, 0, cpu))
    whole = ev.evaluate_bpb(model, DATA, "test", opts)
    for key in ("bpb", "bpb_bound", "n_bytes", "boundary_rate", "whitespace_rate", "doc_bpb_mean", "n_chunks"):
        assert merged[key] == pytest.approx(whole[key], rel=1e-9), key
