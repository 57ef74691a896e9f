"""Every value a user gives is checked by kind (docs/reliability.md, "Values"): each numeric
config field declares its range where it is defined (learntok.util.ranges) and the loader checks
every key at start-up; each numeric command-line option is a ranged argparse type; JSON and TOML
are parsed one way, so a file nested 200,000 deep is one line, not a RecursionError.

The keys and options are enumerated from the dataclasses and the parser, so a key or option
added later is covered without a new row. The subprocess rows of the same kinds (exit 2, one
line, no traceback, nothing changed) are in tests/test_bad_input.py.
"""

import dataclasses
import json
import math
import types
import typing
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from learntok import cli
from learntok.boundaries import strategy_class, strategy_names
from learntok.run.config import SECTIONS, STRATEGY, RunConfig, load_config, read_file
from learntok.data.corpora import json_records
from learntok.data.shards import read_index
from learntok.util.errors import CheckpointError, ConfigError, DataError
from learntok.compare.jobs import last_line
from learntok.model.pretrained import read_config
from learntok.run import metrics_log
from learntok.util.ranges import INT64, Range, field_range
from learntok.run.folder import trim_logs

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def config_keys() -> list[tuple[str, str, list[str]]]:
    """(section, key, overrides that make the key exist) for every field of every section and of
    every strategy's own options."""
    keys = [(section, f.name, []) for section, cls in SECTIONS.items() for f in dataclasses.fields(cls)]
    for name in strategy_names():
        keys += [
            (STRATEGY, f.name, [f"model.boundary={name}"]) for f in dataclasses.fields(strategy_class(name).Config)
        ]
    return keys


def config_classes() -> list[type]:
    return [*SECTIONS.values(), *{strategy_class(n).Config for n in strategy_names()}]


def numeric(tp) -> bool:
    """int, float, or a tuple (or optional) of them."""
    args = typing.get_args(tp)
    if typing.get_origin(tp) in (tuple, typing.Union, types.UnionType):
        return any(numeric(a) for a in args if a is not type(None) and a is not Ellipsis)
    return tp in (int, float)


def test_every_numeric_config_field_declares_its_range():
    missing = [
        f"{cls.__name__}.{f.name}"
        for cls in config_classes()
        for f, tp in ((f, typing.get_type_hints(cls)[f.name]) for f in dataclasses.fields(cls))
        if numeric(tp) and field_range(f) is None
    ]
    assert not missing, "declare a range (learntok.util.ranges.ranged) for: " + ", ".join(missing)


def test_every_default_is_inside_its_range():
    for cls in config_classes():
        for f in dataclasses.fields(cls):
            if field_range(f) is not None and f.default is not dataclasses.MISSING:
                for v in f.default if isinstance(f.default, tuple) else (f.default,):
                    assert field_range(f).problem(v) is None, (cls.__name__, f.name, v)


def assert_valid(cfg: RunConfig) -> None:
    """What a config the loader accepted must satisfy: every number finite, within int64 and
    within its field's declared range (the strategy's options too)."""
    parts = [(name, getattr(cfg, name)) for name in SECTIONS]
    parts.append((STRATEGY, strategy_class(cfg.model.boundary).Config(**cfg.model.strategy)))
    for name, part in parts:
        for f in dataclasses.fields(part):
            value = getattr(part, f.name)
            for v in value if isinstance(value, tuple) else (value,):
                if isinstance(v, float):
                    assert math.isfinite(v), (name, f.name, v)
                if isinstance(v, int) and not isinstance(v, bool):
                    assert INT64[0] <= v <= INT64[1], (name, f.name, v)
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    assert (field_range(f) or Range()).problem(v) is None, (name, f.name, v)


def assert_one_line_naming(e: ConfigError, key: str) -> None:
    """The message names the key (the command line prints it as one line, whitespace collapsed)."""
    message = " ".join(str(e).split())
    assert message and key in message, (key, message)


# Texts of the kinds that broke the loader: signs, zero, NaN, infinities, overflowing floats and
# ints, wrong types, empty, separators, and anything else
BAD_TEXT = st.one_of(
    st.sampled_from(
        [
            "nan",
            "-nan",
            "inf",
            "-inf",
            "Infinity",
            "1e400",
            "-1e400",
            "0",
            "-1",
            "-0.0",
            "1e-400",
            "18446744073709551616",
            str(2**63),
            str(-(2**63) - 1),
            "9" * 400,
            "1_000",
            "0x10",
            "1.5",
            "true",
            "none",
            "",
            " ",
            "[1, 2]",
            "1,2,3",
            "abc",
            "caf\udce9",
        ]
    ),
    st.integers(-(2**80), 2**80).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(max_size=6),
)


@SETTINGS
@given(st.sampled_from(config_keys()), BAD_TEXT)
def test_any_override_of_any_key_is_a_valid_config_or_one_line_naming_it(key, text):
    section, name, setup = key
    try:
        cfg = load_config("tiny", None, [*setup, f"{section}.{name}={text}"])
    except ConfigError as e:
        assert_one_line_naming(e, name)
    else:
        assert_valid(cfg)


JSON_VALUES = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=4),
        st.sampled_from([10**400, -(10**400), 2**63, float("nan")]),
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=3), inner, max_size=2)),
    max_leaves=5,
)


@SETTINGS
@given(st.sampled_from(config_keys()), JSON_VALUES)
def test_any_file_value_of_any_key_is_a_valid_config_or_one_line_naming_it(key, value):
    """The values a TOML or JSON config (or a checkpoint's config.json) can hold, of any type."""
    section, name, setup = key
    tables = {"model": {"boundary": setup[0].partition("=")[2]}} if setup else {}
    tables.setdefault(section, {})[name] = value
    try:
        cfg = RunConfig.from_dict(tables)
    except ConfigError as e:
        assert_one_line_naming(e, name)
    else:
        assert_valid(cfg)


@pytest.mark.parametrize(
    "override, words",
    [
        ("optim.lr=-1", "optim.lr -1.0 must be in (0, 10000]"),
        ("model.n_heads=0", "model.n_heads 0 must be >= 1"),
        ("model.vocab_size=10", "model.vocab_size 10 must be >= 259"),
        ("train.seed=18446744073709551616", "train.seed 18446744073709551616 does not fit in 64 bits"),
        ("optim.weight_decay=-1", "optim.weight_decay -1.0 must be >= 0"),
        ("model.d_model=0", "model.d_model 0 must be >= 2"),
        ("model.n_down=-1", "model.n_down -1 must be >= 0"),
        ("log.eval_bytes=-5", "log.eval_bytes -5 must be >= 1"),
        ("log.eval_bytes=0", "log.eval_bytes 0 must be >= 1"),
        ("optim.lr=nan", "optim.lr nan must be a finite number"),
        ("optim.betas=0.9,inf", "optim.betas (0.9, inf)"),
        ("model.target_rate=1", "model.target_rate 1.0 must be in (0, 1)"),
        ("train.train_bytes=1e300", "train.train_bytes 1e+300 is beyond float32's range"),
        ("train.train_bytes=1e30", "train.train_bytes 1e+30 must be in [0, 9223372036854775807]"),
        ("system.threads=99999", "system.threads 99999 must be in [0, 1024]"),
        ("data.source=caf\udce9.txt", "data.source 'caf\\udce9.txt' is not UTF-8 text"),
        ("strategy.window=0", "strategy.window 0 must be >= 1"),
        ("model.policy_window=0", "strategy.window 0 must be >= 1"),  # the old key, at its new place
        ("strategy.softcap=nan", "strategy.softcap nan must be a finite number"),
        ("strategy.logit_scale=0", "strategy.logit_scale 0.0 must be > 0"),
    ],
)
def test_the_reported_values_are_refused_naming_key_and_value(override, words):
    with pytest.raises(ConfigError) as e:
        load_config("tiny", None, ["model.boundary=learned", override])
    assert words in str(e.value)


def test_a_huge_integer_for_a_float_field_in_a_file(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"optim": {"lr": 10**400}}))
    with pytest.raises(ConfigError, match="optim.lr: an integer of 401 digits is too large"):
        load_config(file=path)


# ---------------------------------------------------------------- numeric command-line options

MINIMAL = {
    "train": [],
    "segment": ["R", "t"],
    "eval": ["R"],
    "eval-tasks": ["R", "--task", "t.jsonl"],
    "diagnose": ["R"],
    "plot": ["R"],
    "sample": ["R", "--prompt", "p"],
    "compare": ["--strategies", "uniform"],
    "prepare": ["s.txt", "--out", "o"],
    "config": [],
    "export": ["R", "--out", "o"],
}  # the required arguments of each command, so that one option can be tried


def numeric_options() -> list[tuple[str, str, Range, type]]:
    """(command, option, declared range, int or float) for every numeric option of every command."""
    parser = cli.build_parser()
    found = []
    for command, sub in parser._subparsers._group_actions[0].choices.items():
        for action in sub._actions:
            if action.option_strings and hasattr(action.type, "range"):
                found.append((command, action.option_strings[-1], action.type.range, action.type.kind))
    return found


def test_every_numeric_option_is_a_ranged_type_and_every_command_can_be_tried():
    parser = cli.build_parser()
    commands = parser._subparsers._group_actions[0].choices
    assert set(commands) == set(MINIMAL), "add the new command's required arguments to MINIMAL"
    plain = [
        f"{c} {a.option_strings[-1]}" for c, sub in commands.items() for a in sub._actions if a.type in (int, float)
    ]
    assert not plain, "give these options a ranged type (learntok.cli.values.number): " + ", ".join(plain)
    assert len(numeric_options()) >= 30


def parse_result(argv: list[str], capsys) -> tuple[int | None, list[str]]:
    try:
        cli.parse_args(argv)
        code = None
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr().err.splitlines()


OPTION_TEXT = st.one_of(
    st.sampled_from(
        ["nan", "inf", "-inf", "1e400", "-1", "0", "1", "0.5", "1.0", "2", str(2**63), str(2**64), "-9" * 30, "abc", ""]
    ),
    st.integers(-(2**70), 2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(numeric_options()), OPTION_TEXT)
def test_any_number_for_any_option_is_parsed_or_one_usage_line(capsys, option, text):
    command, flag, rng, kind = option
    if flag == "--device":
        return
    code, err = parse_result([command, *MINIMAL[command], f"{flag}={text}"], capsys)
    try:
        value = kind(text)
        ok = rng.problem(value) is None
    except ValueError:
        ok = False
    if ok:
        assert code is None, err
    else:
        assert code == 2 and len(err) == 1 and err[0].startswith(f"learntok: error: {command}: argument {flag}"), err
        if kind is float and text in ("nan", "inf"):
            assert "finite" in err[0]


@pytest.mark.parametrize(
    "argv, words",
    [
        (["sample", "R", "--prompt", "p", "--temperature", "nan"], "--temperature: nan must be a finite number"),
        (["sample", "R", "--prompt", "p", "--top-p", "nan"], "--top-p: nan must be a finite number"),
        (
            ["sample", "R", "--prompt", "p", "--seed", "18446744073709551616"],
            "--seed: 18446744073709551616 does not fit",
        ),
        (["sample", "R", "--prompt", "p", "--max-bytes", "0"], "--max-bytes: 0 must be in [1, 16777216]"),
        (["eval", "R", "--rate", "1"], "--rate: 1 must be in (0, 1)"),
        (["eval", "R", "--seq-len", "1"], "--seq-len: 1 must be >= 2"),
        (["compare", "--strategies", "uniform", "--jobs", "0"], "--jobs: 0 must be >= 1"),
        (["prepare", "s", "--out", "o", "--val-fraction", "nan"], "--val-fraction: nan must be a finite number"),
        (["train", "--threads", "100000"], "--threads: 100000 must be in [0, 1024]"),
    ],
)
def test_the_reported_options_are_refused(capsys, argv, words):
    code, err = parse_result(argv, capsys)
    assert code == 2 and len(err) == 1 and words in err[0], err


def test_usage_lines_say_learntok_once(capsys):
    for argv in (["nosuch"], [], ["train", "--bogus"], ["segment", "R", "a", "b"]):
        code, err = parse_result(argv, capsys)
        assert code == 2 and len(err) == 1 and err[0].startswith("learntok: error: ")
        assert not err[0].startswith("learntok: error: learntok"), err[0]


def test_a_failed_variant_of_compare_jobs_says_learntok_once(tmp_path):
    """compare --jobs relays a child's last line (learntok.compare.jobs.last_line): without its own
    prefix, which the parent adds."""
    log = tmp_path / "train.log"
    log.write_text("step 1\nlearntok: error: train.steps 0 must be >= 1\n\n")
    assert last_line(log) == "train.steps 0 must be >= 1"


# ---------------------------------------------------------------- nested JSON and TOML at every reader

DEPTH = 200_000


def deep_json() -> str:
    return "[" * DEPTH + "]" * DEPTH


def checkpoint_config(t: Path):
    (t / "config.json").write_text(deep_json())
    return lambda: read_config(t)


def index(t: Path):
    (t / "index.json").write_text('{"format": ' + deep_json() + "}")
    return lambda: read_index(t)


def jsonl(t: Path):
    return lambda: list(json_records([b'{"text": "a"}', deep_json().encode()], "data.jsonl"))


def metrics(t: Path):
    (t / "metrics.jsonl").write_text('{"step": 1}\n' + deep_json() + "\n")
    return lambda: metrics_log.read(t)


def metrics_on_resume(t: Path):
    """A run's own reader of its logs on resume (learntok.run.metrics_log, the one reader): a deep
    row before the last line is an error naming it, as for `plot`; the file is left as it was."""
    (t / "metrics.jsonl").write_text('{"step": 1}\n' + deep_json() + "\n")
    return lambda: trim_logs(t, 1)


def config_file(suffix: str):
    def setup(t: Path):
        text = deep_json() if suffix == ".json" else "[train]\nsteps = " + deep_json()
        (t / f"c{suffix}").write_text(text)
        return lambda: read_file(t / f"c{suffix}")

    return setup


@pytest.mark.parametrize(
    "setup, error",
    [
        (config_file(".json"), ConfigError),
        (config_file(".toml"), ConfigError),
        (checkpoint_config, CheckpointError),
        (index, DataError),
        (jsonl, DataError),
        (metrics, DataError),
        (metrics_on_resume, DataError),
    ],
    ids=[
        "config.json",
        "config.toml",
        "checkpoint-config.json",
        "index.json",
        "jsonl-data",
        "metrics.jsonl",
        "metrics-on-resume",
    ],
)
def test_a_file_nested_200000_deep_is_one_line_at_every_reader(tmp_path, setup, error):
    read = setup(tmp_path)
    with pytest.raises(error) as e:
        read()
    assert "nested too deeply" in str(e.value) and "\n" not in str(e.value)
