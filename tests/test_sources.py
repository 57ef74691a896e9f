"""Every command that reads a run works on runs trained from every kind of data source: a
built-in corpus, a local text file, a folder, and a prepared (memory-mapped) folder (`eval`
on a run trained from a prepared folder once failed). And the scale path end to end at
toy size: prepare -> train two strategies -> compare table -> eval -> segment."""

import json

import pytest

from learntok.cli import main
from learntok.data.prepare import PrepareOptions, prepare

TINY = [
    "model.d_model=32",
    "model.n_heads=2",
    "model.n_mid=1",
    "train.seq_len=64",
    "train.batch_size=4",
    "optim.warmup_steps=1",
    "log.eval_every=0",
    "log.eval_bytes=512",
    "log.segment_every=0",
    "system.device=cpu",
]


def _text(n=400):
    return "\n".join(f"Line {i}: the quick brown fox jumps over the lazy dog, again and again." for i in range(n))


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("sources")
    (root / "corpus.txt").write_text(_text())
    folder = root / "folder"
    folder.mkdir()
    for i in range(70):
        (folder / f"doc{i:02d}.txt").write_text(_text(6) + f" document {i}")
    prepare([str(root / "corpus.txt")], root / "prepared", PrepareOptions(piece_bytes=512), progress=False)
    return {
        "builtin": "kjv",
        "file": str(root / "corpus.txt"),
        "folder": str(folder),
        "prepared": str(root / "prepared"),
    }


@pytest.mark.parametrize("kind", ["builtin", "file", "folder", "prepared"])
def test_every_command_reads_a_run_of_every_source(kind, sources, tmp_path, capsys):
    run = tmp_path / "run"
    assert (
        main(["train", "--preset", "tiny", "--out", str(run), f"data.source={sources[kind]}", "train.steps=2", *TINY])
        == 0
    )
    assert main(["eval", str(run), "--max-bytes", "600", "--bpe-vocab", "300", "--json", str(tmp_path / "e.json")]) == 0
    report = json.loads((tmp_path / "e.json").read_text())
    assert 0 < report["n_bytes"] <= 600 and report["split"] == "test" and report["source"] == sources[kind]
    assert main(["segment", str(run), "--held-out"]) == 0
    assert "held-out passage" in capsys.readouterr().out
    task = tmp_path / "t.jsonl"
    task.write_text(json.dumps({"context": "the quick brown", "continuation": "fox"}) + "\n")
    assert main(["eval-tasks", str(run), "--task", str(task)]) == 0
    assert (
        main(
            ["diagnose", str(run), "--batches", "1", "--samples", "2", "--seq-len", "32", "--out", str(tmp_path / "d")]
        )
        == 0
    )
    assert main(["plot", str(run), "--out", str(tmp_path / "p")]) == 0


def test_scale_path_end_to_end_on_a_prepared_folder(sources, tmp_path, capsys):
    """The README's scale path at toy size: compare two strategies on a prepared folder, then
    eval and segment one of its runs."""
    out = tmp_path / "cmp"
    assert (
        main(
            [
                "compare",
                "--strategies",
                "learned,uniform",
                "--steps",
                "2",
                "--out",
                str(out),
                f"data.source={sources['prepared']}",
                *TINY,
            ]
        )
        == 0
    )
    table = (out / "results.md").read_text()
    assert "| learned (tiny recipe) |" in table and "| uniform |" in table
    assert main(["eval", str(out / "learned"), "--max-bytes", "300", "--bpe-vocab", "300"]) == 0
    assert main(["segment", str(out / "uniform"), "--held-out"]) == 0


def test_eval_of_all_documents_of_a_prepared_folder(sources, tmp_path):
    run = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--preset",
                "tiny",
                "--out",
                str(run),
                f"data.source={sources['prepared']}",
                "train.steps=1",
                *TINY,
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "eval",
                str(run),
                "--split",
                "all",
                "--max-bytes",
                "2000",
                "--bpe-vocab",
                "300",
                "--json",
                str(tmp_path / "all.json"),
            ]
        )
        == 0
    )
    assert json.loads((tmp_path / "all.json").read_text())["n_bytes"] == 2000


def test_prepare_refuses_a_split_it_cannot_fill(tmp_path, capsys):
    """One 1.3 MB file used to give an empty test split silently; now the split is filled (small
    pieces by default, and few pieces are cut further, as training cuts them) or prepare says
    why and how to fix it."""
    big = tmp_path / "one.txt"
    big.write_text(_text(20000)[:1_300_000])
    for name, pieces in (("ok", []), ("big-pieces", ["--piece-bytes", "1000000"])):
        assert main(["prepare", str(big), "--out", str(tmp_path / name), *pieces]) == 0
        index = json.loads((tmp_path / name / "index.json").read_text())
        assert all(index["splits"][s]["documents"] > 0 for s in ("train", "val", "test"))
    assert main(["prepare", str(big), "--out", str(tmp_path / "bad"), "--min-doc-bytes", "100000"]) == 2
    assert "--min-doc-bytes" in capsys.readouterr().err and not (tmp_path / "bad").exists()
