"""Nothing reused that no longer matches, nothing written outside the run (docs/reliability.md):
finished results and resumes checked against the settings asked for, folder names built from
values kept inside their parent, run-folder files never opened through a link, bounds checked
before work, compare's children ending with their parent, a relative data.source stored absolute,
and one Tokenizer shared by threads. Each kind a table; command lines as subprocesses."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import ROOT, TINY_RUN, assert_one_line_error, checksums, corpus_text, run_cli, tiny_model
from learntok.data.dataset import anchored_source
from learntok.util.errors import ConfigError, OutputError
from learntok.util.files import inside, open_no_follow
from tests.test_compare import TINY

SMALL = [o for o in TINY if not o.startswith(("train.steps", "data.source"))]


def compare_args(steps="1", source="corpus.txt", eval_bytes="512", extra=()) -> list[str]:
    return [
        "compare",
        "--strategies",
        "fixed",
        "--steps",
        steps,
        "--eval-bytes",
        eval_bytes,
        "--out",
        "out",
        *SMALL,
        f"data.source={source}",
        *extra,
    ]


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A folder with corpus.txt and a finished comparison out/ of it (data.source relative)."""
    root = tmp_path_factory.mktemp("finished")
    (root / "corpus.txt").write_text(corpus_text())
    r = run_cli(*compare_args(), cwd=root)
    assert r.returncode == 0, r.stderr[-2000:]
    return root


# ---------------------------------------------------------------- 1. finished results reused


@pytest.mark.parametrize(
    "args, words",
    [
        (compare_args(source="kjv"), "data.source"),
        (compare_args(steps="2"), "train.steps"),
        (compare_args(extra=["optim.lr=0.01"]), "optim.lr"),
        (compare_args(eval_bytes="1024"), "--eval-bytes"),
    ],
    ids=["data-source", "steps", "lr", "eval-bytes"],
)
def test_a_rerun_with_other_settings_does_not_report_the_old_figures(finished, args, words):
    before = checksums(finished)
    r = run_cli(*args, cwd=finished)
    assert_one_line_error(r.returncode, r.stderr, words, before, checksums(finished))


def test_a_rerun_with_the_same_settings_reuses_the_marker(finished):
    marker = finished / "out" / "fixed" / "done.json"
    before = marker.read_bytes()
    assert run_cli(*compare_args(), cwd=finished).returncode == 0
    assert marker.read_bytes() == before


FOLDER = object()  # a done.json that is a folder


def _record(finished: Path) -> dict:
    return json.loads((finished / "out" / "fixed" / "done.json").read_text())


@pytest.mark.parametrize(
    "content, words",
    [
        (lambda r: "{not json", "done.json"),
        (lambda r: "[]", "not a JSON object"),
        (lambda r: json.dumps({**r, "test_bpb": "low"}), "'test_bpb'"),
        (lambda r: json.dumps({k: v for k, v in r.items() if k != "val_bpb"}), "'val_bpb'"),
        (lambda r: json.dumps({**r, "test_bpb": float("nan")}), "'test_bpb'"),
        (lambda r: json.dumps({**r, "run": "uniform"}), "a marker of run"),
        (lambda r: "\udcff", "done.json"),
        (lambda r: json.dumps({**r, "seed": 7}), "'seed' is 7"),
        (lambda r: json.dumps({**r, "strategy": "uniform"}), "'strategy' is 'uniform'"),
        (lambda r: json.dumps({**r, "steps": 9}), "'steps' is 9"),
        (lambda r: FOLDER, "is a folder"),
    ],
    ids=[
        "not-json",
        "a-list",
        "a-string-figure",
        "a-missing-figure",
        "nan",
        "another-run",
        "not-utf8",
        "another-seed",
        "another-strategy",
        "other-steps",
        "a-folder",
    ],
)
def test_a_bad_done_marker_is_one_line(finished, tmp_path, content, words):
    work = tmp_path / "w"
    shutil.copytree(finished, work)
    text, marker = content(_record(finished)), work / "out" / "fixed" / "done.json"
    if text is FOLDER:  # the wrong kind of file at the marker's name: refused before any training
        marker.unlink()
        (marker / "x").mkdir(parents=True)
    else:
        marker.write_bytes(text.encode("utf-8", "surrogateescape"))
    before = checksums(work)
    r = run_cli(*compare_args(), cwd=work)
    assert_one_line_error(r.returncode, r.stderr, words, before, checksums(work))


@pytest.mark.parametrize(
    "override, words",
    [("data.source=kjv", "data.source"), ("optim.lr=0.01", "optim.lr"), ("model.target_rate=0.3", "target_rate")],
)
def test_a_resume_with_other_settings_is_refused_and_config_kept(workdir, override, words):
    before = checksums(workdir)
    r = run_cli("train", "--out", "run", "--resume", "train.steps=4", override, cwd=workdir)
    assert_one_line_error(r.returncode, r.stderr, words, before, checksums(workdir))


# ---------------------------------------------------------------- 6. a relative data.source


@pytest.mark.parametrize(
    "source, expected",
    [
        ("shakespeare", lambda: "shakespeare"),
        ("corpus.txt", lambda: os.path.abspath("corpus.txt")),
        ("./a/../corpus.txt", lambda: os.path.abspath("corpus.txt")),
        ("~/data.txt", lambda: os.path.expanduser("~/data.txt")),
        ("/abs/data.txt", lambda: "/abs/data.txt"),
    ],
)
def test_anchored_source(source, expected):
    assert anchored_source(source) == expected()


def test_a_run_evaluated_from_another_folder_scores_the_file_it_was_trained_on(workdir):
    stored = [line for line in (workdir / "run" / "config.toml").read_text().splitlines() if line.startswith("source")]
    assert stored and Path(json.loads(stored[0].split("=", 1)[1])).is_absolute()
    other = workdir / "elsewhere"
    other.mkdir()
    (other / "corpus.txt").write_text("another file of the same name. " * 400)
    figures = []
    for cwd, run in ((workdir, "run"), (other, "../run")):
        r = run_cli("eval", run, "--split", "val", "--max-bytes", "1024", "--json", "e.json", cwd=cwd)
        assert r.returncode == 0, r.stderr[-2000:]
        figures.append(json.loads((cwd / "e.json").read_text())["bpb"])
    assert figures[0] == figures[1]


# ---------------------------------------------------------------- 2. paths built from values


@pytest.mark.parametrize(
    "name, ok",
    [
        ("fixed", True),
        ("fixed/seed0", True),
        ("learned+strategy.tokenizer=/abs/tok.json", True),
        ("..", False),
        ("a/..", False),
        ("a/../../x", False),
        ("/etc", False),
        ("", False),
        ("a\0b", False),
        ("link/x", False),
        ("loop", False),
        ("loop/x", False),
        ("a/../loop", False),
    ],
)
def test_inside(tmp_path, name, ok):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "link").symlink_to(tmp_path)
    (tmp_path / "out" / "loop").symlink_to("loop")  # a link to itself: resolving it never ends
    if ok:
        assert inside(tmp_path / "out", name, "variant") == tmp_path / "out" / name
    else:
        with pytest.raises(ConfigError, match="variant"):
            inside(tmp_path / "out", name, "variant")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", ".", "..", "", "/", "loop"]), min_size=1, max_size=6))
def test_inside_never_leaves_its_parent(tmp_path_factory, parts):
    parent = tmp_path_factory.getbasetemp() / "parent"
    parent.mkdir(exist_ok=True)
    if not (parent / "loop").is_symlink():
        (parent / "loop").symlink_to("loop")  # a link to itself: a name through it is refused, never a traceback
    try:
        path = inside(parent, "/".join(parts), "name")
    except ConfigError:
        return
    assert parent.resolve() in path.resolve().parents


def test_a_variant_that_names_a_folder_outside_out_is_refused(tmp_path):
    (tmp_path / "corpus.txt").write_text(corpus_text())
    before = checksums(tmp_path)
    variant = "fixed+data.source=x/../../../escape"
    r = run_cli(*[variant if a == "fixed" else a for a in compare_args()], cwd=tmp_path)
    assert_one_line_error(r.returncode, r.stderr, "outside", before, checksums(tmp_path))
    assert not (tmp_path.parent / "escape").exists() and not (tmp_path / "escape").exists()


# ---------------------------------------------------------------- 3. run-folder files through links


@pytest.mark.parametrize(
    "name, resume",
    [
        (".lock", False),
        ("train.log", False),
        ("metrics.jsonl", False),
        ("segments.txt", False),
        ("config.toml", False),
        ("checkpoints", False),
        ("metrics.jsonl", True),
        ("segments.txt", True),
        ("train.log", True),
    ],
)
def test_a_link_in_a_run_folder_is_refused_and_its_target_kept(workdir, tmp_path_factory, name, resume):
    outside = tmp_path_factory.mktemp("outside")
    target = outside / "target"
    target.mkdir() if name == "checkpoints" else target.write_text("not the run's\n")
    run = workdir / ("run" if resume else "fresh")
    run.mkdir(exist_ok=True)
    (run / name).unlink(missing_ok=True)
    (run / name).symlink_to(target)
    before, outside_before = checksums(workdir), checksums(outside)
    args = ["--resume", "train.steps=4"] if resume else ["--preset", "tiny", *TINY_RUN, "data.source=corpus.txt"]
    r = run_cli("train", "--out", run.name, *args, cwd=workdir)
    assert_one_line_error(r.returncode, r.stderr, "symbolic link", before, checksums(workdir))
    assert checksums(outside) == outside_before


@pytest.mark.parametrize("mode", ["a", "w"])
def test_the_run_folder_opener_never_writes_through_a_link(tmp_path, mode):
    (tmp_path / "target").write_text("kept\n")
    (tmp_path / "metrics.jsonl").symlink_to(tmp_path / "target")
    with pytest.raises(OutputError, match="symbolic link"):
        open_no_follow(tmp_path / "metrics.jsonl", mode)
    assert (tmp_path / "target").read_text() == "kept\n"


# ---------------------------------------------------------------- 5. bounds before work


@pytest.mark.parametrize(
    "override, words",
    [
        (["train.seq_len=100000000"], "real bytes"),
        (["model.n_mid=100000"], "blocks"),
        (["model.d_model=100000000", "model.n_heads=2"], "weights"),
        (["train.batch_size=1000000000000"], "train.batch_size"),
    ],
)
def test_a_plan_of_huge_sizes_is_refused_before_work(tmp_path, override, words):
    started = time.monotonic()
    r = run_cli("config", "--plan", "--preset", "tiny", *override, cwd=tmp_path, timeout=120)
    assert_one_line_error(r.returncode, r.stderr, words, {}, {})
    assert time.monotonic() - started < 110


@pytest.mark.parametrize(
    "env, words",
    [
        ({"WORLD_SIZE": "abc"}, "WORLD_SIZE"),
        ({"WORLD_SIZE": "0"}, "WORLD_SIZE"),
        ({"WORLD_SIZE": "99999999999"}, "WORLD_SIZE"),
        ({"WORLD_SIZE": "2", "RANK": "2"}, "RANK"),
        ({"WORLD_SIZE": "2", "RANK": "-1"}, "RANK"),
        ({"RANK": "one"}, "RANK"),
        ({"WORLD_SIZE": "2", "LOCAL_RANK": "x"}, "LOCAL_RANK"),
        ({"WORLD_SIZE": "2", "RANK": "1"}, "MASTER_ADDR"),
        ({"WORLD_SIZE": "2", "RANK": "1", "MASTER_ADDR": "localhost", "MASTER_PORT": "0"}, "MASTER_PORT"),
    ],
)
def test_bad_launch_variables_are_one_line_without_a_wait(tmp_path, env, words):
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    }
    r = subprocess.run(
        [sys.executable, "-m", "learntok", "train", "--preset", "tiny", *TINY_RUN, "--out", "r"],
        cwd=tmp_path,
        env={**clean, **env, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert_one_line_error(r.returncode, r.stderr, words, {}, {})
    assert not (tmp_path / "r").exists()


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=["TERM", "INT", "KILL"])
def test_compare_jobs_children_end_with_their_parent(tmp_path, sig):
    (tmp_path / "corpus.txt").write_text(corpus_text())
    args = compare_args(steps="100000")
    args[2] = "fixed,uniform"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    parent = subprocess.Popen(
        [sys.executable, "-m", "learntok", *args, "--jobs", "2"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not all(
            (tmp_path / "out" / v / "metrics.jsonl").is_file() for v in ("fixed", "uniform")
        ):
            time.sleep(0.5)
        children = _children(parent.pid)
        assert len(children) == 2, children
        parent.send_signal(sig)
        _, err = parent.communicate(timeout=60)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(map(_alive, children)):
            time.sleep(0.5)
        assert not any(map(_alive, children))
        if sig != signal.SIGKILL:
            assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("learntok: interrupted"), err
    finally:
        parent.kill()
        parent.wait()


# ---------------------------------------------------------------- 4. a Tokenizer shared by threads


def test_a_tokenizer_shared_by_threads_gives_each_its_own_rate_and_keeps_the_model():
    from learntok import Tokenizer

    tok = Tokenizer(tiny_model("learned", seed=3).eval())
    text = corpus_text(20)
    knob = {k: v.clone() for k, v in tok.model.state_dict().items()}
    alone = {rate: tok.encode(text, rate=rate).bytes for rate in (0.1, 0.4)}
    got, errors = {0.1: [], 0.4: []}, []

    def work(rate):
        try:
            for _ in range(6):
                got[rate].append(tok.encode(text, rate=rate).bytes)
        except Exception as e:  # reported by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(rate,)) for rate in (0.1, 0.4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert all(b == alone[rate] for rate, runs in got.items() for b in runs)
    assert alone[0.1] != alone[0.4]
    assert all(torch.equal(v, tok.model.state_dict()[k]) for k, v in knob.items())


@settings(max_examples=6, deadline=None)
@given(
    st.sampled_from(["learned", "entropy", "hnet"]),
    st.sampled_from([0.1, 0.3]),
    st.sampled_from(["greedy", "sample"]),
    st.integers(0, 99),
)
def test_generate_and_encode_at_a_rate_in_two_threads_give_what_each_gives_alone(boundary, rate, mode, seed):
    """Everything that borrows a model's state for a while (a rate and its online control, eval
    mode, torch's RNG) holds runtime.MODEL_STATE: `generate` in one thread while another encodes
    at a rate gives, every time, the bytes of each alone, and never fails."""
    from learntok import Tokenizer

    model = tiny_model(boundary, seed=seed).eval()
    tok, text, prompt = Tokenizer(model), corpus_text(8), "the quick brown"
    gen = dict(max_bytes=24, seed=seed, boundaries=mode)
    made = model.generate(prompt, **gen)
    cut = tok.encode(text, rate=rate, seed=seed).bytes
    assert model.generate(prompt, **gen)[0] == made[0]
    got, errors = {"generate": [], "encode": []}, []

    def work(name, call):
        try:
            for _ in range(4):
                got[name].append(call())
        except Exception as e:  # reported by the assertion below
            errors.append(e)

    threads = [
        threading.Thread(target=work, args=("generate", lambda: model.generate(prompt, **gen))),
        threading.Thread(target=work, args=("encode", lambda: tok.encode(text, rate=rate, seed=seed).bytes)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert all(b == made[0] and torch.equal(d, made[1]) for b, d in got["generate"])
    assert all(b == cut for b in got["encode"])


# ---------------------------------------------------------------- 7. the data a run was trained on


def _docs(folder: Path) -> None:
    folder.mkdir()
    for i in range(12):
        (folder / f"{i:02d}.txt").write_text(f"document {i}: " + "some words of text here. " * 40)


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> Path:
    """Runs trained to step 2 on a text file, a folder and a prepared folder, and a finished
    comparison on the text file; each case changes a source, runs, and puts it back."""
    from learntok.data.prepare import prepare

    root = tmp_path_factory.mktemp("sources")
    (root / "corpus.txt").write_text(corpus_text())
    _docs(root / "docs")
    prepare([str(root / "docs")], root / "prep", progress=False)
    for name, source in (("run-file", "corpus.txt"), ("run-folder", "docs"), ("run-prep", "prep")):
        args = ["train", "--preset", "tiny", *SMALL, "train.steps=2", f"data.source={source}", "--out", name]
        r = run_cli(*args, cwd=root)
        assert r.returncode == 0, r.stderr[-2000:]
    r = run_cli(*compare_args(), cwd=root)
    assert r.returncode == 0, r.stderr[-2000:]
    return root


def _same_size_edit(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[0] ^= 1
    path.write_bytes(bytes(data))


def _rewrite_index(root: Path) -> None:
    index = json.loads((root / "index.json").read_text())
    (root / "index.json").write_text(json.dumps({**index, "sources": ["elsewhere"]}))


RESUME = ["train", "--resume", "train.steps=3", "--out"]
CHANGES = [
    ("file-grown", "corpus.txt", lambda t: (t / "corpus.txt").open("a").write(" more"), [*RESUME, "run-file"], "size"),
    ("file-edited", "corpus.txt", lambda t: _same_size_edit(t / "corpus.txt"), [*RESUME, "run-file"], "content"),
    (
        "file-replaced",
        "corpus.txt",
        lambda t: (t / "corpus.txt").write_text(corpus_text(200)),
        [*RESUME, "run-file"],
        "size",
    ),
    ("folder-added", "docs", lambda t: (t / "docs" / "new.txt").write_text("new"), [*RESUME, "run-folder"], "added"),
    ("folder-removed", "docs", lambda t: (t / "docs" / "03.txt").unlink(), [*RESUME, "run-folder"], "removed"),
    ("folder-edited", "docs", lambda t: _same_size_edit(t / "docs" / "05.txt"), [*RESUME, "run-folder"], "05.txt"),
    ("prepared-index", "prep", lambda t: _rewrite_index(t / "prep"), [*RESUME, "run-prep"], "index.json"),
    ("compare-rerun", "corpus.txt", lambda t: _same_size_edit(t / "corpus.txt"), compare_args(), "corpus.txt"),
]


@pytest.mark.parametrize("name, change, args, words", [pytest.param(*c[1:], id=c[0]) for c in CHANGES])
def test_a_resume_or_rerun_on_changed_data_is_refused(sources, name, change, args, words):
    """learntok.data.identity: the source a run recorded (every checkpoint's state.pt, compare's
    done.json) is checked on resume and on reuse; other bytes at the same path are one line."""
    saved = sources / "saved"
    (shutil.copytree if (sources / name).is_dir() else shutil.copy)(sources / name, saved)
    try:
        change(sources)
        before = {k: v for k, v in checksums(sources).items() if k.startswith(("run-", "out/"))}
        r = run_cli(*args, cwd=sources)
        after = checksums(sources)
        assert_one_line_error(r.returncode, r.stderr, (words,), before, after)
        assert "changed since it was trained" in r.stderr
    finally:
        (shutil.rmtree if (sources / name).is_dir() else Path.unlink)(sources / name)
        saved.rename(sources / name)


def test_a_resume_on_the_same_data_or_of_a_run_without_a_record_goes_on(tmp_path):
    """The same bytes resume; a checkpoint written before runs recorded their data resumes too."""
    (tmp_path / "corpus.txt").write_text(corpus_text())
    args = ["train", "--preset", "tiny", *SMALL, "train.steps=2", "data.source=corpus.txt", "--out", "run"]
    assert run_cli(*args, cwd=tmp_path).returncode == 0
    r = run_cli("train", "--resume", "train.steps=3", "--out", "run", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    state = tmp_path / "run" / "checkpoints" / "step_0000003" / "state.pt"
    old = torch.load(state, weights_only=True)
    assert "corpus.txt" in old["data_identity"]
    del old["data_identity"]
    torch.save(old, state)
    (tmp_path / "corpus.txt").open("a").write(" more text")
    r = run_cli("train", "--resume", "train.steps=4", "--out", "run", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.binary(max_size=300), st.sampled_from([8, 64, 1 << 20]))
def test_a_file_identity_changes_with_its_bytes(tmp_path_factory, a, b, whole):
    """Any two contents of a small file (hashed whole) have other identities, and `changes` names
    the file; a large one is told apart by its size, head and tail (EDGE_BYTES each)."""
    from learntok.data import identity

    folder = tmp_path_factory.mktemp("id")
    old, identity.WHOLE_BYTES, identity.EDGE_BYTES = (identity.WHOLE_BYTES, identity.EDGE_BYTES), whole, 4
    try:
        (folder / "f.txt").write_bytes(a)
        first = identity.source_identity(str(folder / "f.txt"))
        (folder / "f.txt").write_bytes(b)
        second = identity.source_identity(str(folder / "f.txt"))
    finally:
        identity.WHOLE_BYTES, identity.EDGE_BYTES = old
    seen = len(b) <= whole or a[:4] != b[:4] or a[-4:] != b[-4:] or len(a) != len(b)
    if a == b or not seen:
        assert identity.changes(first, second) == [] or a != b
    else:
        assert first != second
        (change,) = identity.changes(first, second)
        assert change.startswith("f.txt changed")
