"""Figures that say what they measured: one rule for "at the target rate or not" in every table
(compare, compare --runs, the frontier, eval), the bytes a val bpb covers, the settings a learned
arm ran, the paper's figures only beside runs of their preset and rate, and `entropy` refused
where its early head would not train."""

from __future__ import annotations

import pytest

from learntok.compare.runner import split_warnings
from learntok.compare.report import format_seed_table, format_table, paper_figure, seed_summary
from learntok.run.config import load_config
from learntok.util.errors import ConfigError
from learntok.run.config_info import settings_label
from learntok.run.labels import RATE_SLACK, at_rate, covers, rate_cell, unequal_rate
from learntok.compare.frontier import frontier_markdown
from learntok.train.report import validation_line

from conftest import assert_one_line_error, checksums, run_cli


@pytest.mark.parametrize(
    "reached, target, reference, equal",
    [
        (0.200, 0.2, None, True),
        (0.209, 0.2, None, True),
        (0.210, 0.2, None, True),  # the slack itself is at the rate
        (0.211, 0.2, None, False),
        (0.189, 0.2, None, False),
        (0.254, 0.2, None, False),  # hnet in the main table
        (0.222, 0.2, None, False),  # bpe-causal
        (0.205, 0.2, 0.200, True),
        (0.205, 0.2, 0.190, False),  # at its own target, off the reference's rate
        (0.33, 0.33, 0.2, False),
    ],
)
def test_one_rule_decides_equal_rate(reached, target, reference, equal):
    assert at_rate(reached, target) == (abs(reached - target) <= RATE_SLACK + 1e-9)
    why = unequal_rate(reached, target, reference)
    assert (why == "") == equal
    assert ("not at an equal rate" in rate_cell(reached, target, reference)) == (not equal)
    if not equal:
        assert why.startswith("not at an equal rate: ") and f"{reached:.3f}" in why


@pytest.mark.parametrize(
    "n, total, words",
    [(65_536, 1_000_000, "first 65,536 bytes"), (1_000_000, 1_000_000, "all 1,000,000 bytes")],
)
def test_a_val_figure_says_what_it_covers(n, total, words):
    assert covers(n, total) == words
    line = validation_line(250, {"val_bpb": 1.8183, "val_boundary_rate": 0.2, "val_whitespace_rate": 0.1,
                                 "val_bytes": n, "val_split_bytes": total})  # fmt: skip
    assert f"val bpb ({words}) 1.8183" in line


@pytest.mark.parametrize(
    "preset, overrides, label",
    [
        ("tiny", [], "tiny recipe"),
        ("20M", [], "paper objective"),
        ("147M", ["strategy.window=1"], "paper objective"),  # w is the strategy's, not the objective's
        ("tiny", ["objective.gamma=1.0"], "tiny recipe, objective.gamma 1"),
        ("20M", ["objective.gamma=0.7"], "paper objective, objective.gamma 0.7"),
        ("tiny", ["model.boundary=uniform"], None),  # no policy: the settings are the policy's
    ],
)
def test_every_learned_arm_says_which_settings_ran(preset, overrides, label):
    cfg = load_config(preset, None, overrides)
    assert settings_label(cfg) == label
    record = {**record_of("learned", 0, 2.3, 0.2), "settings": label}
    cell = f"| learned ({label}) |" if label else "| learned |"
    assert cell in format_table([record])


FINEWEB = "data.source=/data/fineweb-edu/train"


@pytest.mark.parametrize(
    "spec, preset, overrides, reached, figure",
    [
        ("learned", "147M", [FINEWEB], 0.2, "1.297 bpb (147M)"),
        ("learned", "40M", [FINEWEB], 0.2, "ws 0.99 (40M)"),
        ("learned", "20M", [FINEWEB], 0.2, None),  # the 147M figure is not shown beside a 20M run
        ("learned", "90M", [FINEWEB], 0.2, None),
        ("uniform", "40M", [FINEWEB], 0.2, None),  # the paper gives uniform at 147M only
        ("learned", "147M", [FINEWEB, "model.target_rate=0.33"], 0.33, None),  # another target rate
        ("learned", "147M", [FINEWEB], 0.33, None),  # a run that reached another rate
        ("learned@0.2", "147M", [FINEWEB], None, "1.297 bpb (147M)"),
        ("learned", "147M", [], 0.2, None),  # Shakespeare by default
        ("learned", "tiny", [FINEWEB], 0.2, None),
    ],
)
def test_paper_figures_only_beside_runs_of_their_preset_and_rate(spec, preset, overrides, reached, figure):
    assert paper_figure(spec, preset, load_config(preset, None, overrides), reached) == figure


def record_of(variant, seed, bpb, rate, target=0.2):
    return {
        "variant": variant,
        "seed": seed,
        "test_bpb": bpb,
        "val_bpb": bpb,
        "test_doc_bpb": bpb,
        "test_doc_se": 0.01,
        "test_boundary_rate": rate,
        "test_whitespace_rate": 0.1,
        "target_rate": target,
        "val_bytes": 4096,
        "val_split_bytes": 9000,
    }


@pytest.mark.parametrize("rate, marked", [(0.2, False), (0.205, False), (0.254, True), (0.15, True)])
def test_compare_tables_mark_a_row_off_its_target(rate, marked):
    records = [
        r
        for seed in (0, 1, 2)
        for r in (record_of("uniform", seed, 2.35, 0.2), record_of("hnet", seed, 2.29 + 0.001 * seed, rate))
    ]
    every = format_table(records)
    hnet_rows = [line for line in every.splitlines() if line.startswith("| hnet")]
    assert all(("not at an equal rate" in line) == marked for line in hnet_rows) and len(hnet_rows) == 3
    assert "val bpb (first 4,096 bytes)" in every
    seeds = format_seed_table(seed_summary(records, ["uniform", "hnet"]))
    (hnet,) = [line for line in seeds.splitlines() if line.startswith("| hnet")]
    assert ("lower, not at an equal rate" in hnet) == marked and "lower" in hnet
    (uniform,) = [line for line in seeds.splitlines() if line.startswith("| uniform")]
    assert "not at an equal rate" not in uniform


@pytest.mark.parametrize("rate, marked", [(0.2, False), (0.222, True)])
def test_frontier_marks_a_row_off_its_target(rate, marked):
    row = {"variant": "bpe-causal@0.2", "target_rate": 0.2, "rate": rate, "test_bpb": 2.3, "vs_uniform": -0.05,
           "vs_uniform_se": 0.01, "flops_per_byte": 1e6}  # fmt: skip
    (line,) = [s for s in frontier_markdown([row], [], None).splitlines() if s.startswith("| bpe-causal")]
    assert ("not at an equal rate" in line) == marked


def test_compare_repeats_the_small_split_warning(tmp_path, capsys):
    small = tmp_path / "small.txt"
    small.write_text("\n\n".join(f"document {i}: " + "words " * 40 for i in range(30)))
    lines = split_warnings(load_config("tiny", None, [f"data.source={small}"]))
    assert lines and all(line.startswith("warning: the ") and "too noisy" in line for line in lines)
    assert capsys.readouterr().err.splitlines() == lines
    assert split_warnings(load_config("tiny", None, [])) == []  # the packaged corpus is large enough


@pytest.mark.parametrize(
    "preset, overrides, refused",
    [
        ("20M", ["model.boundary=entropy"], True),  # the paper presets: baselines at early-exit weight 0
        ("147M", ["model.boundary=entropy"], True),
        ("20M", ["model.boundary=entropy", "objective.early_for=all"], False),
        ("tiny", ["model.boundary=entropy"], False),
        ("tiny", ["model.boundary=entropy", "objective.lambda_early=0"], True),
        ("20M", ["model.boundary=uniform"], False),  # reads no early head
        ("20M", ["model.boundary=learned"], False),  # a policy: its head trains
    ],
)
def test_entropy_is_refused_where_its_early_head_would_not_train(preset, overrides, refused):
    if refused:
        with pytest.raises(ConfigError, match="early-exit head"):
            load_config(preset, None, overrides)
    else:
        load_config(preset, None, overrides)


@pytest.mark.parametrize(
    "args, words",
    [
        (["config", "--preset", "20M", "model.boundary=entropy"], "early-exit head"),
        (["compare", "--preset", "40M", "--strategies", "learned,entropy"], "early-exit head"),
        (["compare", "--strategies", "learned", "--rate", "0.2"], "--rates 0.2"),
        (["compare", "--strategies", "learned", "--rate-mode", "online"], "needs --rate"),
    ],
)
def test_bad_command_lines_get_one_line(tmp_path, args, words):
    before = checksums(tmp_path)
    r = run_cli(*args, cwd=tmp_path)
    assert_one_line_error(r.returncode, r.stderr, words, before, checksums(tmp_path))
