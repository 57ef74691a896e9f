"""`train()` reads top to bottom: each step of its set-up is one call into the package that owns
it (the process, the run folder, the data, the model, resume, the tracker), and the calls those
make stay near their own file. Measured as a newcomer reads it: the files of the calls `train`
makes and of the calls those make (two levels of learntok functions below it), in the order
they run, up to the first training step; a file entered again after the reading has left it
is a return. docs/architecture.md, "Every module"."""

import sys
from pathlib import Path

import pytest

import learntok
from learntok.train import loop

PACKAGE = str(Path(learntok.__file__).parent)
MAX_RETURNS = 10
LEVELS = 3  # train itself, its calls, theirs


def returns(files: list[str]) -> int:
    """How often the reading comes back to a file it had left (a file's consecutive calls are one visit)."""
    visits = [f for i, f in enumerate(files) if i == 0 or files[i - 1] != f]
    return sum(1 for i, f in enumerate(visits) if f in visits[:i])


def set_up_trail(run_cfg, out_dir) -> list[str]:
    """The files (relative to learntok/) of the learntok calls `train` makes, LEVELS deep, until
    the training loop starts (`train_steps`)."""
    trail, done = [], []

    def depth(frame) -> int:
        n = 0
        while frame is not None:
            n += frame.f_code.co_filename.startswith(PACKAGE)
            frame = frame.f_back
        return n

    def profile(frame, event, arg):
        code = frame.f_code
        if done or event != "call" or not code.co_filename.startswith(PACKAGE) or code.co_name.startswith("<"):
            return
        if code.co_name == "train_steps":
            done.append(True)
        elif depth(frame) <= LEVELS:
            trail.append(code.co_filename[len(PACKAGE) + 1 :])

    sys.setprofile(profile)
    try:
        loop.train(run_cfg, out_dir, progress=False)
    finally:
        sys.setprofile(None)
    return trail


def test_the_set_up_returns_to_a_file_it_left_at_most_max_returns_times(train_cfg, tmp_path):
    trail = set_up_trail(train_cfg("train.steps=1"), tmp_path / "run")
    assert trail[0] == "train/loop.py" and len(set(trail)) >= 8, trail  # the whole set-up was read
    assert returns(trail) <= MAX_RETURNS, f"{returns(trail)} returns: {' > '.join(trail)}"


@pytest.mark.parametrize(
    "files, want",
    [
        (["a", "a", "b", "c"], 0),
        (["a", "b", "a"], 1),
        (["a", "b", "a", "b", "a"], 3),
        (["a", "b", "b", "c", "b"], 1),
    ],
)
def test_the_return_count_can_fail(files, want):
    assert returns(files) == want
