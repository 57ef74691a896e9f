"""The rate dial is one module (learntok/boundaries/rate.py): outside learntok/boundaries/ no
module reads or assigns a strategy's rate state (online control, a rate-conditioned policy's
condition, the knob's buffers) directly; they call the strategy's methods (`set_rate_control`,
`set_condition`, `condition_offset`, `condition_range`, `rate_knob`, `set_rate_knob`). Read with
`ast`, so docstrings and comments may name the attributes."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "learntok"
RATE_STATE = {"rate_control", "condition", "rate_offset", "rate_bias", "rule_rate"}


def rate_state_uses(source: str) -> list[tuple[int, str]]:
    """(line, attribute) of every access to a name in RATE_STATE: `obj.name` read or assigned,
    or getattr / setattr / hasattr / delattr with it as a literal."""
    uses = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in RATE_STATE:
            uses.append((node.lineno, node.attr))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in RATE_STATE
        ):
            uses.append((node.lineno, node.args[1].value))
    return uses


def test_the_checker_finds_reads_and_assignments():
    snippet = (
        '"""strategy.rate_control in a docstring is fine"""\n'
        "strategy.rate_control = control\n"
        "strategy.condition.rate.fill_(0.3)\n"
        "lo = model.strategy.condition.lo\n"
        "x = s.rate_offset + 1\n"
        "c = getattr(strategy, 'condition', None)\n"
        "strategy.set_rate_control(control)  # a method, and rate_offset_range, are fine\n"
        "low, high = strategy.rate_offset_range\n"
    )
    assert sorted(rate_state_uses(snippet)) == [
        (2, "rate_control"),
        (3, "condition"),
        (4, "condition"),
        (5, "rate_offset"),
        (6, "condition"),
    ]


def test_no_module_outside_boundaries_touches_a_strategys_rate_state():
    boundaries = PACKAGE / "boundaries"
    found = {
        str(path.relative_to(PACKAGE.parent)): uses
        for path in sorted(PACKAGE.rglob("*.py"))
        if boundaries not in path.parents and (uses := rate_state_uses(path.read_text()))
    }
    assert found == {}, f"rate state used outside learntok/boundaries/ (use the strategy's methods): {found}"
