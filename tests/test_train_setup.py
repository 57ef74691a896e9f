"""`train()` reads top to bottom: each step of its set-up is one call into the package that owns
it (the process, the run folder, the data, the model, resume, the tracker), and the calls those
make stay near their own file. Measured as a newcomer reads it: the files of the calls `train`
makes and of the calls those make (two levels of learntok functions below it), in the order
they run, up to the first training step; a file entered again after the reading has left it
is a return. docs/architecture.md, "Every module"."""

import pytest

from learntok.train import loop
from reading_trail import returns, trail

MAX_RETURNS = 10
LEVELS = 3  # train itself, its calls, theirs


def set_up_trail(run_cfg, out_dir) -> list[str]:
    """The files (relative to learntok/) of the learntok calls `train` makes, LEVELS deep, until
    the training loop starts (`train_steps`)."""
    return trail(lambda: loop.train(run_cfg, out_dir, progress=False), LEVELS, stop="train_steps")


def test_the_set_up_returns_to_a_file_it_left_at_most_max_returns_times(train_cfg, tmp_path):
    files = set_up_trail(train_cfg("train.steps=1"), tmp_path / "run")
    assert files[0] == "train/loop.py" and len(set(files)) >= 8, files  # the whole set-up was read
    assert returns(files) <= MAX_RETURNS, f"{returns(files)} returns: {' > '.join(files)}"


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
