"""`learntok eval-tasks`: task files, scoring only the continuation, accuracy and bpb."""

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from learntok.data.dataset import reading_windows
from learntok.util.errors import TaskError
from learntok.evaluation.tasks import (
    _rows,
    evaluate_task,
    join,
    read_task,
    rolling_windows,
    TasksRequest,
    run_tasks,
    score_requests,
)

from conftest import tiny_model, write_jsonl, write_lm_eval_tasks

MC = [
    {"query": "Question: what is red?\n", "choices": ["an apple", "the sky"], "gold": 0},
    {"query": "Q: two plus two", "choices": ["four", "five", "six"], "gold": 0},
]
CONT = [{"context": "the cat sat on the", "continuation": "mat"}, {"context": "hello", "continuation": "world"}]


def test_read_task_forms(tmp_path):
    form, ex = read_task(write_jsonl(tmp_path / "mc.jsonl.gz", MC))
    assert form == "multiple_choice" and len(ex) == 2 and ex[1].choices == ["four", "five", "six"]
    form, ex = read_task(write_jsonl(tmp_path / "c.jsonl", CONT))
    assert form == "continuation" and ex[0].choices == ["mat"] and ex[0].gold == 0


def test_missing_field_names_line_and_field(tmp_path):
    bad = MC[:1] + [{"query": "q", "choices": ["a", "b"]}]
    with pytest.raises(TaskError, match=r"line 2: missing field 'gold'"):
        read_task(write_jsonl(tmp_path / "bad.jsonl", bad))
    with pytest.raises(TaskError, match=r"line 1: missing field 'continuation'"):
        read_task(write_jsonl(tmp_path / "bad2.jsonl", [{"context": "x"}]))
    with pytest.raises(TaskError, match=r"line 1: field 'gold' 5"):
        read_task(write_jsonl(tmp_path / "bad3.jsonl", [{"query": "q", "choices": ["a"], "gold": 5}]))


def test_join_delimiter():
    assert join("the cat", "sat") == (b"the cat", b" sat")
    assert join("Question: x\n", "yes") == (b"Question: x\n", b"yes")


def test_rows_mark_only_continuation_targets():
    x, cont = _rows([(b"ab", b"cd"), (b"x", b"y")], seq_len=16)
    assert x[0].tolist() == [256, 97, 98, 99, 100] and x[1, 3:].tolist() == [258, 258]
    assert cont[0].tolist() == [False, False, True, True] and cont[1].tolist() == [False, True, False, False]
    x, cont = _rows([(b"abcdef", b"gh")], seq_len=5)  # cut from the left
    assert x[0].tolist() == [256, 101, 102, 103, 104] and cont[0].tolist() == [False, False, True, True]


def test_score_conditions_on_context_and_is_batched():
    model = tiny_model().eval()
    reqs = [(b"the cat sat on the", b" mat"), (b"hi", b" there you"), (b"", b"abc")]
    one = [score_requests(model, [r], greedy=True)[0] for r in reqs]
    batched = score_requests(model, reqs, batch_size=3, greedy=True)
    for a, b in zip(one, batched):
        assert a[0] == pytest.approx(b[0], abs=1e-4) and a[1] == b[1]
    assert [n for _, n, _ in batched] == [4, 10, 3]
    # the same as scoring the whole row and keeping the continuation's log-probs
    x = torch.tensor([[256] + list(b"hi there you")])
    logp = torch.log_softmax(model(x, greedy=True).logits[0, :-1], -1).gather(-1, x[0, 1:, None]).squeeze(-1)
    assert float(logp[-10:].sum().detach()) == pytest.approx(batched[1][0], abs=1e-4)
    s1 = score_requests(model, reqs, batch_size=2, seed=3)
    assert s1 == score_requests(model, reqs, batch_size=2, seed=3)  # sampled, fixed seed: deterministic


def test_evaluate_task_metrics(tmp_path):
    model = tiny_model().eval()
    _, ex = read_task(write_jsonl(tmp_path / "mc.jsonl", MC))
    r = evaluate_task(model, "multiple_choice", ex, greedy=True)
    assert r["n"] == 2 and 0 <= r["accuracy"] <= 1 and 0 <= r["accuracy_norm"] <= 1
    ll = score_requests(model, [join(e.context, e.choices[e.gold]) for e in ex], greedy=True)
    per = [-s / math.log(2) / n for s, n, _ in ll]
    assert r["gold_bpb"] == pytest.approx(sum(per) / 2, rel=1e-4)
    assert r["gold_bytes"] == sum(n for _, n, _ in ll)
    _, ex = read_task(write_jsonl(tmp_path / "c.jsonl", CONT))
    r = evaluate_task(model, "continuation", ex, greedy=True)
    assert r["accuracy"] in (0.0, 0.5, 1.0) and r["gold_bpb"] > 0


def test_run_tasks_from_model_folder(tmp_path):
    tiny_model().save_pretrained(tmp_path / "m")
    tasks = [str(write_jsonl(tmp_path / "mc.jsonl.gz", MC)), str(write_jsonl(tmp_path / "lam.jsonl", CONT))]
    rep = run_tasks(tmp_path / "m", TasksRequest(tasks, batch_size=4, seq_len=64, seed=1))
    assert set(rep["tasks"]) == {"mc", "lam"} and rep["boundaries"] == "sampled (seed 1)"
    assert rep == run_tasks(tmp_path / "m", TasksRequest(tasks, batch_size=4, seq_len=64, seed=1))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 60), max_size=6), st.integers(2, 20))
def test_reading_windows_are_consecutive_slices_from_each_texts_start(lengths, seq_len):
    """The one reading of a long text (eval, lm-eval's rolling windows, the transformers model)
    against a plain loop: consecutive slices of seq_len - 1 bytes from each text's start."""
    expect = [(t, a, min(n - a, seq_len - 1)) for t, n in enumerate(lengths) for a in range(0, n, seq_len - 1)]
    text, start, size = reading_windows(np.array(lengths, dtype=np.int64), seq_len)
    assert list(zip(text.tolist(), start.tolist(), size.tolist())) == expect


@pytest.mark.parametrize(
    "lengths, seq_len, words",
    [([3], 1, "seq_len 1"), ([3], 0, "seq_len 0"), ([3], 2.5, "seq_len 2.5"), ([3], True, "seq_len True"),
     ([-1], 8, "lengths"), ([[3]], 8, "lengths")],
)  # fmt: skip
def test_reading_windows_names_a_wrong_argument(lengths, seq_len, words):
    with pytest.raises(ValueError, match=words):
        reading_windows(np.array(lengths), seq_len)


def test_rolling_windows_score_every_byte_once_after_bos():
    data = bytes(range(50))
    wins = rolling_windows(data, seq_len=17)  # rows of 17: BOS and 16 bytes
    assert b"".join(w for _, w in wins) == data
    assert [len(w) for _, w in wins] == [16, 16, 16, 2] and all(c == b"" for c, _ in wins)


def test_lm_eval_adapter_offline(tmp_path, monkeypatch):
    """A local task definition (JSON data, YAML config), no hub: multiple choice and rolling."""
    for var in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"):
        monkeypatch.setenv(var, "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf"))
    lm_eval = pytest.importorskip("lm_eval")
    from lm_eval.tasks import TaskManager

    import learntok.evaluation.lm_eval_adapter  # noqa: F401  (registers the model type)

    tiny_model().save_pretrained(tmp_path / "m")
    d = tmp_path / "tasks"
    d.mkdir()
    write_lm_eval_tasks(
        d,
        [
            {"q": "what is red?", "choices": ["an apple", "the sky"], "label": 0},
            {"q": "two plus two", "choices": ["four", "five"], "label": 1},
        ],
        '"Question: {{q}}\\nAnswer:"\n',
    )
    res = lm_eval.simple_evaluate(
        model="learntok",
        model_args=f"pretrained={tmp_path / 'm'},seq_len=64,greedy_boundaries=true",
        tasks=["tiny_mc", "tiny_roll"],
        batch_size=4,
        device="cpu",
        task_manager=TaskManager(include_path=str(d), include_defaults=False),
    )["results"]
    assert 0 <= res["tiny_mc"]["acc,none"] <= 1
    # rolling bpb equals scoring each text from BOS (the texts fit in one window)
    ll = score_requests(tiny_model().eval(), [(b"", b"what is red?"), (b"", b"two plus two")], greedy=True)
    want = -sum(s for s, _, _ in ll) / (math.log(2) * sum(n for _, n, _ in ll))
    assert res["tiny_roll"]["bits_per_byte,none"] == pytest.approx(want, rel=1e-4)


def doc_block(marker: str) -> str:
    """The indented code block of docs/evaluation.md that contains `marker`, unindented."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "evaluation.md").read_text()
    for block in re.findall(r"(?:^(?:    .*)?\n)+", text, re.M):
        if marker in block:
            return "\n".join(line[4:] for line in block.splitlines()) + "\n"
    raise AssertionError(f"no code block with {marker!r} in docs/evaluation.md")


def test_the_lm_eval_example_of_the_docs_runs_as_written(tmp_path):
    """docs/evaluation.md's three local tasks (multiple choice, rolling, generation), on small
    files of the same form, with RUN and EVALS set and a smaller --limit."""
    pytest.importorskip("lm_eval")
    tiny_model().save_pretrained(tmp_path / "m")
    write_jsonl(
        tmp_path / "piqa.jsonl.gz",
        [
            {
                "query": f"Question: how to do thing {i}?\nAnswer:",
                "choices": ["carefully", "with a spoon"],
                "gold": i % 2,
            }
            for i in range(4)
        ],
    )
    write_jsonl(
        tmp_path / "lambada_openai.jsonl.gz",
        [{"context": f"The story number {i} ends with the word", "continuation": "end"} for i in range(4)],
    )
    script = doc_block("learntok_lambada_gen")
    script = re.sub(r"^RUN=\S+", f"RUN={tmp_path / 'm'}", script, flags=re.M)
    script = re.sub(r"^EVALS=\S+", f"EVALS={tmp_path}", script, flags=re.M).replace("--limit 100", "--limit 3")
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "HF_DATASETS_CACHE": str(tmp_path / "hf"),
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
        "OMP_NUM_THREADS": "1",
    }
    r = subprocess.run(["bash", "-euc", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    for task, metric in (
        ("learntok_piqa", "acc"),
        ("learntok_lambada_bpb", "bits_per_byte"),
        ("learntok_lambada_gen", "exact_match"),
    ):
        assert re.search(rf"\|{task}\s*\|.*\|{metric}\s*\|", r.stdout), r.stdout
