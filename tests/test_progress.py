"""Commands that talk while they work: progress as timestamped lines when stderr is a log, each
validation as a line, `compare --jobs` keeping each variant's log and naming it on failure."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from learntok.util.progress import Progress, note

from test_compare import TINY

ROOT = Path(__file__).resolve().parents[1]
STAMPED = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \S")
# every display at once (no delay, no interval), so that a 2-step run shows its lines
EAGER = {"TQDM_DELAY": "0", "TQDM_MININTERVAL": "0"}
STEPS1 = [o for o in TINY if not o.startswith("train.steps")]


def learntok(*args, env=None):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **EAGER, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "learntok", *map(str, args)], env=env, capture_output=True, text=True, timeout=300
    )


def test_train_to_a_pipe_prints_timestamped_lines_and_each_validation(tmp_path):
    r = learntok("train", "--steps", "2", "--out", tmp_path / "r", *STEPS1)
    assert r.returncode == 0, r.stderr
    assert "\r" not in r.stderr and "\r" not in r.stdout
    lines = r.stderr.splitlines()
    assert lines and all(STAMPED.match(line) for line in lines), lines
    assert any(re.search(r" r: +100% 2/2 step \[", line) for line in lines)  # the bar, as whole lines
    for step in (1, 2):
        assert any(
            re.search(
                rf"step {step}: val bpb \((first|all) [\d,]+ bytes\) \d+\.\d{{4}}, boundary rate 0\.\d{{3}}, "
                r"whitespace rate "
                r"0\.\d{3}$",
                line,
            )
            for line in lines
        )
    assert json.loads(r.stdout)["step"] == 2  # --steps on train


def test_only_rank_0_shows_progress(monkeypatch, capsys):
    for rank, shown in (("0", True), ("1", False)):
        monkeypatch.setenv("RANK", rank)
        monkeypatch.setenv("WORLD_SIZE", "2")  # a rank below the world size (runtime.launch_vars checks it)
        for _ in Progress(range(3), desc="work", total=3, delay=0):
            pass
        note("a message")
        err = capsys.readouterr().err
        assert ("work:" in err and "a message" in err) == shown and (err == "") != shown


def test_compare_jobs_keeps_a_log_per_variant_and_shows_one_line_each(tmp_path):
    r = learntok(
        "compare",
        "--strategies",
        "fixed,uniform",
        "--steps",
        "1",
        "--eval-bytes",
        "512",
        "--jobs",
        "2",
        "--out",
        tmp_path,
        *STEPS1,
    )
    assert r.returncode == 0, r.stderr
    for variant in ("fixed", "uniform"):
        log = (tmp_path / variant / "train.log").read_text()
        assert "\r" not in log and "step 1: val bpb" in log and f"{variant} test: 100%" in log
        progress = [line for line in log.splitlines() if re.search(r"\d+% \d+/\d+ |: val bpb ", line)]
        assert len(progress) >= 4 and all(STAMPED.match(line) for line in progress)
        # the parent's line for this variant: its step, and its val bpb once logged
        assert re.search(rf"^\S+ \S+ {re.escape(variant)}: 100% 1/1 step \[.*val_bpb=\d+\.\d{{4}}", r.stderr, re.M)
    assert (tmp_path / "fixed" / "done.json").is_file()


def test_a_failed_variant_names_its_log(tmp_path):
    """The child fails when it reads the data (the parent checks only the config and that the
    source is there); the error says so and where the whole log is."""
    (tmp_path / "empty.txt").write_bytes(b"")
    r = learntok(
        "compare",
        "--strategies",
        "fixed",
        "--jobs",
        "2",
        "--steps",
        "1",
        "--out",
        tmp_path / "cmp",
        *STEPS1,
        f"data.source={tmp_path / 'empty.txt'}",
    )
    log = tmp_path / "cmp" / "fixed" / "train.log"
    assert r.returncode == 2 and r.stderr.count("learntok: error:") == 1
    assert "variant fixed failed (exit 2)" in r.stderr and f"its whole log: {log}" in r.stderr
    assert "empty.txt is empty" in r.stderr and "empty.txt is empty" in log.read_text()


@pytest.mark.parametrize("command", ["eval", "segment"])
def test_eval_and_segment_hint_that_a_short_learned_run_has_not_settled(tmp_path, command):
    from learntok.run.checkpoint import SETTLE_STEPS
    from learntok.cli import main

    for name, boundary in (("learned", "learned"), ("fixed", "fixed")):
        assert (
            main(["train", "--steps", "1", "--out", str(tmp_path / name), *STEPS1, f"model.boundary={boundary}"]) == 0
        )
    args = {"eval": ["--max-bytes", "512", "--bpe-vocab", "300"], "segment": ["some text"]}[command]
    hint = f"this run has trained 1 steps; a learned boundary policy needs about {SETTLE_STEPS}"
    assert hint in learntok(command, tmp_path / "learned", *args).stderr
    assert "hint:" not in learntok(command, tmp_path / "fixed", *args).stderr  # no policy to settle


def test_on_a_terminal_it_is_a_bar_that_redraws_in_place():
    """stderr a pseudo-terminal: tqdm's bar, redrawn with carriage returns, no timestamps."""
    import fcntl
    import pty
    import struct
    import termios

    code = (
        "import time\nfrom learntok.util.progress import Progress, note\n"
        "for i in Progress(range(3), desc='work', total=3, unit='step'):\n    time.sleep(0.05)\nnote('done')\n"
    )
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # a fresh pty is 0 wide
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stderr=follower,
        stdout=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(ROOT), **EAGER},
    )
    os.close(follower)
    out = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    proc.wait(timeout=60)
    text = out.decode("utf-8", errors="replace")
    assert proc.returncode == 0 and "\r" in text and "work: 100%" in text and "3/3" in text and "done" in text
    assert not any(STAMPED.match(line) for line in text.replace("\r", "\n").splitlines())
