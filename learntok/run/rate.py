"""Compression as a dial (docs/rate.md): run a trained model at another boundary rate
with no retraining. This module is the run-level service: the mode `--rate` runs in
(`rate_mode`), a calibration on held-out text, the setting reported (`RateSetting`) and put
back (`apply_setting`). The dial itself, the knobs, the online controller and a
rate-conditioned policy's condition, is learntok.boundaries.rate's, reached through the
strategy's methods only: a rule's rate is set exactly (`exact_knob`); an offset is calibrated
(`calibrate`) by bisection on held-out text, the rate measured with the same seeded draws at
every offset (common random numbers), so that it is nondecreasing in the offset (exactly so
for w = 1 and the thresholds; for w > 1 a rise can in principle cut a later boundary, and the
bisection still converges to a crossing); a rate-conditioned policy is told the rate
(`set_condition`). A strategy with none of these (bpe: its rate is its vocabulary) says so.

Two modes (`RATE_MODES`). "calibrated": the offset found on held-out text, fixed. "online": the
same start, then the offset moves byte by byte with the decisions made (`set_rate_control`
with the controller `online_control` picks), so the rate holds on text unlike the calibration
text; the default where the strategy has it (`online_rate`: learned, frozen, entropy, hnet).

Shapes: B batch, T bytes (BOS at t = 0).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch

from learntok.boundaries.rate import no_rate_knob, online_control
from learntok.data.dataset import ByteData
from learntok.data.vocab import bos_rows, row_pieces
from learntok.util.errors import ConfigError, wrong_type, wrong_value
from learntok.run.labels import at_rate
from learntok.model.metrics import boundary_counts, boundary_rates
from learntok.util.runtime import MODEL_STATE, inference

CALIBRATION_BYTES = 1 << 16  # held-out bytes a calibration reads by default
TOLERANCE = 0.005  # |reached - target| beyond which `set_rate` reports the target missed
RATE_MODES = ("online", "calibrated")  # `--rate-mode`: move the knob with the decisions made, or fix it
KNOB_NAMES = {
    "rule": "rule",
    "offset": "offset",
    "online": "online control from offset",
    "condition": "conditioned on the rate, offset",
}


@dataclass
class RateSetting:
    strategy: str  # model.cfg.boundary
    target: float  # the requested rate
    knob: str  # "rule", "offset" (calibrated), "condition" (a rate-conditioned model) or "online" (online control)
    value: float  # the rule's rate, the offset set, or the offset online control starts from
    reached: float  # the rate measured on the calibration text (the target itself for a rule without text)
    n_bytes: int  # real bytes of calibration text (0 when none was read)
    note: str = ""  # why the target is out of reach, when it is
    greedy: bool = False  # the decision rule calibrated for: greedy (p > 0.5) or sampled cuts

    def describe(self) -> str:
        rule = "greedy" if self.greedy else "sampled"
        if self.n_bytes:
            where = f"reached {self.reached:.4f} by {rule} cuts on {self.n_bytes:,} held-out bytes"
        else:
            where = f"{rule} cuts, " + ("an exact rule" if self.knob == "rule" else "no held-out text read")
        line = f"rate: target {self.target:.3f}, {where}; {self.strategy} {KNOB_NAMES[self.knob]} {self.value:+.4f}"
        return line + (f"; {self.note}" if self.note else "")

    def held_on(self, rate: float) -> str:
        """A note when the boundary rate reached on a text is off the target (figures.at_rate, the
        one rule tables mark by; calibrated on other text, an offset can miss it on this one); ""
        when it held."""
        if at_rate(rate, self.target):
            return ""
        how = {
            "offset": "an offset calibrated on other text; online mode, where the strategy has it, holds the rate",
            "condition": "a condition calibrated on other text; online mode holds the rate",
            "online": "online control did not hold it on this text (a text too short to settle?)",
            "rule": "the rule places boundaries per window",
        }[self.knob]
        return f"rate not held: {rate:.3f} on this text against the target {self.target:.3f}; {how}"


def text_batches(text: str | bytes, seq_len: int, batch_size: int = 8) -> list[torch.Tensor]:
    """Calibration rows from one text: pieces of seq_len - 1 bytes, each after its own BOS."""
    data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    return list(bos_rows(row_pieces(data, seq_len)).split(batch_size))


def held_out_batches(
    data: ByteData, seq_len: int, batch_size: int = 8, split: str = "val", max_bytes: int = CALIBRATION_BYTES
) -> list[torch.Tensor]:
    """The first max_bytes of a held-out split as (B, T) rows, as evaluation reads them."""
    return [x for x, _ in data.eval_batches(split, batch_size, seq_len, max_bytes=max_bytes)]


@torch.no_grad()
def measured_rate(model, batches: Iterable[torch.Tensor], greedy: bool = False, seed: int = 0) -> tuple[float, int]:
    """(boundaries per real byte, real bytes) of the model's decisions on the batches, batch i
    drawn under seed + i as in evaluate_bpb. The caller's RNG is left alone."""
    device = next(model.parameters()).device
    counts = torch.zeros(4, dtype=torch.float64, device=device)
    with inference(model, seed, device):
        for i, x in enumerate(batches):
            torch.manual_seed(seed + i)
            x = x.to(device)
            counts += boundary_counts(x, model(x, greedy=greedy).boundaries).double()
    return float(boundary_rates(counts)["boundary_rate"]), int(counts[1])


@torch.no_grad()
def strategy_inputs(model, batches: Iterable[torch.Tensor]) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(h, x, early_logits) that the model's forward hands its strategy, per batch: the encoder
    does not depend on the boundaries, so a calibration re-decides from these alone."""
    device = next(model.parameters()).device
    captured = []
    hook = model.strategy.register_forward_hook(
        lambda mod, args, kwargs, out: captured.append((args[0], args[1], kwargs["early_logits"])), with_kwargs=True
    )
    try:
        with inference(model, 0, device):
            for x in batches:
                model(x.to(device))
    finally:
        hook.remove()
    return captured


@torch.no_grad()
def decided_rate(strategy, inputs, greedy: bool = False, seed: int = 0) -> tuple[float, int]:
    """`measured_rate` from `strategy_inputs`: the strategy alone, batch i under seed + i (the
    forward draws nothing before its strategy, so the decisions are the full model's; tested)."""
    counts = torch.zeros(4, dtype=torch.float64, device=inputs[0][0].device)
    with inference(strategy, seed, counts.device):
        for i, (h, x, early) in enumerate(inputs):
            torch.manual_seed(seed + i)
            counts += boundary_counts(x, strategy(h, x, early_logits=early, greedy=greedy).decisions).double()
    return float(boundary_rates(counts)["boundary_rate"]), int(counts[1])


def calibrate(
    model, batches: list[torch.Tensor], target: float, greedy: bool = False, seed: int = 0, iters: int = 30
) -> tuple[float, float, int]:
    """The offset of the model's strategy (an OffsetKnob) that hits `target` on the batches, by
    bisection in its bracket; the knob is left at it. Returns (offset, rate reached, bytes)."""
    return calibrate_inputs(model.strategy, strategy_inputs(model, batches), target, greedy, seed, iters)


def calibrate_inputs(
    strategy, inputs, target: float, greedy: bool = False, seed: int = 0, iters: int = 30
) -> tuple[float, float, int]:
    """`calibrate` from `strategy_inputs` (the strategy's `calibrate_knob`)."""
    n_bytes = 0

    def rate_now() -> float:
        nonlocal n_bytes
        rate, n_bytes = decided_rate(strategy, inputs, greedy, seed)
        return rate

    offset, reached = strategy.calibrate_knob(rate_now, target, iters)
    return offset, reached, n_bytes


def rate_mode(model, target: float, mode: str | None = None) -> str:
    """The rate mode `set_rate` runs `model` at `target` in, checked once for every caller (the
    commands, the Python API, compare): `target` in (0, 1), `mode` one of RATE_MODES (None: online
    where the strategy has it, the one place the default is decided), a mode the strategy has,
    and a knob to turn (or a rate-conditioned policy's condition)."""
    if not 0.0 < target < 1.0:
        raise ConfigError(f"rate {target} must be in (0, 1)")
    strategy, name = model.strategy, model.cfg.boundary
    mode = ("online" if strategy.online_rate else "calibrated") if mode is None else mode
    if mode not in RATE_MODES:
        raise ConfigError(f"rate mode {mode!r} is not one of {', '.join(RATE_MODES)}")
    if mode == "online" and not strategy.online_rate:
        raise ConfigError(
            f"strategy {name!r} has no online rate control (its knob is "
            f"{strategy.knob_name or 'fixed at training'}): use --rate-mode calibrated"
        )
    if strategy.condition_range() is None and strategy.rate_knob() is None:
        raise no_rate_knob(name)
    return mode


def held_out_argument(batches, seq_len: int) -> list[torch.Tensor] | None:
    """set_rate's `batches`, checked: held-out text (a str or bytes, not empty; cut into rows of
    seq_len), a list of (B, T) id tensors, or None; anything else is a TypeError or ValueError
    naming it."""
    what = "held-out text (a str or bytes), a list of (B, T) id tensors, or None"
    if (
        batches is None
        or isinstance(batches, list)
        and all(isinstance(b, torch.Tensor) and b.dim() == 2 for b in batches)
    ):
        return batches
    if isinstance(batches, (str, bytes, bytearray)):
        if not batches:
            raise wrong_value("set_rate", "batches", "held-out text that is not empty, or None", batches)
        return text_batches(batches, seq_len)
    raise wrong_type("set_rate", "batches", what, batches)


def set_rate(
    model,
    target: float,
    batches: list[torch.Tensor] | str | bytes | None = None,
    greedy: bool = False,
    seed: int = 0,
    seq_len: int = 256,
    mode: str | None = None,
) -> RateSetting:
    """Run `model` at boundary rate `target` from now on: the Python API of `--rate`. `batches`
    is held-out text (a list of (B, T) rows, or a str / bytes cut into rows of seq_len), needed by
    strategies with an offset. The offset is calibrated for one decision rule, `greedy` (p > 0.5)
    or sampled: give the rule the model will then be run with (at one offset a policy's greedy
    and sampled cuts run at different rates: how far apart depends on how its probabilities
    spread around 0.5). `mode` (RATE_MODES; default: `rate_mode`'s): "online" starts online
    control from that offset (without held-out text, from the offset the model has) and reports
    the rate reached under control on the held-out text; "calibrated" keeps the offset fixed."""
    mode = rate_mode(model, target, mode)
    return set_checked_rate(model, target, held_out_argument(batches, seq_len), greedy, seed, mode)


def set_checked_rate(
    model, target: float, batches: list[torch.Tensor] | None, greedy: bool, seed: int, mode: str
) -> RateSetting:
    """`set_rate` once its arguments are checked (`rate_mode`): the condition of a
    rate-conditioned policy, a rule's exact rate, or an offset calibrated on `batches`. The knob
    is set whole under runtime.MODEL_STATE, never seen half set by another thread."""
    with MODEL_STATE:
        return _set_checked_rate(model, target, batches, greedy, seed, mode)


def _set_checked_rate(
    model, target: float, batches: list[torch.Tensor] | None, greedy: bool, seed: int, mode: str
) -> RateSetting:
    strategy, name = model.strategy, model.cfg.boundary
    strategy.set_rate_control(None)  # calibration decides without the controller
    if strategy.condition_range() is not None:
        return condition_rate(model, target, batches, greedy, seed, mode)
    exact = strategy.exact_knob(target)
    if exact is not None:
        strategy.set_rate_knob(exact)
        reached, n = measured_rate(model, batches, greedy, seed) if batches else (target, 0)
        return RateSetting(name, target, strategy.knob_name, exact, reached, n, greedy=greedy)
    if not batches and mode == "calibrated":
        raise ConfigError(f"strategy {name!r} calibrates its rate on held-out text: give some")
    if not batches:
        strategy.set_rate_control(online_control(strategy, target, greedy))
        return RateSetting(name, target, "online", strategy.rate_knob(), 0.0, 0, greedy=greedy)
    inputs = strategy_inputs(model, batches)
    offset, reached, n = calibrate_inputs(strategy, inputs, target, greedy, seed)
    if mode == "online":
        strategy.set_rate_control(online_control(strategy, target, greedy, fitted=True))
        reached, n = decided_rate(strategy, inputs, greedy, seed)
    note = ""
    if abs(reached - target) > TOLERANCE:
        low, high = strategy.rate_offset_range
        note = (
            f"target out of reach: the rate spans only what offsets {low:g}..{high:g} give on this text"
            if offset in (low, high) and mode == "calibrated"
            else "the rate moves in steps larger than the tolerance on this text"
        )
    knob = strategy.knob_name if mode == "calibrated" else "online"
    return RateSetting(name, target, knob, offset, reached, n, note, greedy)


def condition_rate(
    model, target: float, batches: list[torch.Tensor] | None, greedy: bool, seed: int, mode: str
) -> RateSetting:
    """`set_rate` for a rate-conditioned model: the condition is the target, no calibration
    ("calibrated" mode: the offset the model was trained to use for it; "online": online control
    from there). The rate reached on `batches` is reported when they are given."""
    strategy, name = model.strategy, model.cfg.boundary
    strategy.set_condition(target)
    if mode == "online":
        strategy.set_rate_control(online_control(strategy, target, greedy))
    reached, n = decided_rate(strategy, strategy_inputs(model, batches), greedy, seed) if batches else (0.0, 0)
    offset = float(strategy.condition_offset(torch.tensor([target]))[0])
    lo, hi = strategy.condition_range()
    note = "" if lo <= target <= hi else f"outside the trained range {lo:g}..{hi:g}"
    return RateSetting(
        name, target, "condition" if mode == "calibrated" else "online", offset, reached, n, note, greedy
    )


def set_rate_for_run(
    model,
    run_cfg,
    target: float,
    text: str | bytes | None = None,
    greedy: bool = False,
    seed: int = 0,
    mode: str | None = None,
    data: ByteData | None = None,
) -> RateSetting:
    """`--rate` of the commands: calibrate on `text`, the text about to be cut (its first
    CALIBRATION_BYTES: the rate is then the one asked for on this text, and online control only
    follows its drift; docs/rate.md), or without text (generation) on the run's validation split
    (`data`, the run's ByteData where the caller has it already), or, for a bare model folder with
    no text, start from the model's offset (online mode only). Checked before any data is read."""
    mode = rate_mode(model, target, mode)
    seq_len = run_cfg.train.seq_len if run_cfg is not None else 256
    if text:
        batches = text_batches(text[:CALIBRATION_BYTES], seq_len)
    elif run_cfg is not None:
        batches = held_out_batches(data if data is not None else ByteData.from_config(run_cfg.data), seq_len)
    else:
        batches = None
    return set_checked_rate(model, target, batches, greedy, seed, mode)


def apply_setting(model, setting: RateSetting) -> None:
    """Put the model's knob where `setting` (an earlier `set_rate` on this model) left it: the
    rule's rate, the offset, or a rate-conditioned policy's condition; online control restarted
    from there when the setting is online."""
    strategy = model.strategy
    conditioned = strategy.condition_range() is not None
    strategy.set_rate_control(None)
    if conditioned:
        strategy.set_condition(setting.target)
    else:
        strategy.set_rate_knob(setting.value)
    if setting.knob == "online":  # gentle where the start was fitted on text (n_bytes > 0), as set_rate made it
        fitted = setting.n_bytes > 0 and not conditioned
        strategy.set_rate_control(online_control(strategy, setting.target, setting.greedy, fitted))
