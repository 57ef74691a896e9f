"""Two walks a newcomer follows, measured as the training set-up is (tests/reading_trail.py):
`eval --rate` and `compare` with a variant of its own data source, three levels of learntok
calls deep; and the rate dial's own walk (`set_rate`, every level), whose strategy side is one
module, learntok/boundaries/rate.py, beside the strategy's own file. The caps are the counts
measured when the rate dial, the metrics log and the commands' inputs each got one home
(docs/architecture.md); a change that makes a reader come back to a file more often fails here."""

import pytest

from conftest import TINY_RUN
from reading_trail import returns, trail

LEVELS = 3
MAX_RETURNS = {"eval --rate": 8, "compare": 10}


def test_eval_at_another_rate_returns_to_a_file_it_left_at_most_its_cap(base):
    from learntok.evaluation.evaluate import EvalRequest, run_eval

    files = trail(lambda: run_eval(EvalRequest(base / "run", rate=0.3, max_bytes=2048, batch_size=4)), LEVELS)
    assert files[0] == "evaluation/evaluate.py" and "run/rate.py" in files, files
    assert returns(files) <= MAX_RETURNS["eval --rate"], f"{returns(files)} returns: {' > '.join(files)}"


def test_compares_variants_return_to_a_file_they_left_at_most_its_cap(base, tmp_path):
    from learntok.compare.runner import compare

    corpus = base / "corpus.txt"
    variants = ["learned", f"uniform+data.source={corpus}"]
    overrides = [*TINY_RUN, "train.steps=2", f"data.source={corpus}"]
    files = trail(
        lambda: compare(variants, tmp_path / "cmp", preset="tiny", overrides=overrides, progress=False),
        LEVELS,
        stop="train_steps",
    )
    assert files[0] == "compare/runner.py" and "data/corpora.py" in files, files  # each variant's source checked
    assert returns(files) <= MAX_RETURNS["compare"], f"{returns(files)} returns: {' > '.join(files)}"


@pytest.mark.parametrize("mode", ["calibrated", "online"])
def test_the_rate_dials_strategy_side_is_one_module(base, mode):
    """Every learntok file `set_rate` enters, at every level: of the strategies' package, only
    the dial's module and the strategy's own file."""
    from learntok.data.dataset import ByteData
    from learntok.run.checkpoint import load_run
    from learntok.run.rate import held_out_batches, set_rate

    model, cfg = load_run(base / "run")[:2]
    batches = held_out_batches(ByteData.from_config(cfg.data), 64, split="test")
    files = set(trail(lambda: set_rate(model, 0.3, batches, False, 0, mode=mode), levels=99))
    assert {f for f in files if f.startswith("boundaries/")} == {"boundaries/rate.py", "boundaries/learned.py"}
    assert "run/rate.py" in files
