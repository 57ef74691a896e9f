"""`learntok compare`: several boundary strategies (and ablations of the learned policy) on
one backbone, preset, data source, step budget and seed; one folder of results.

A variant is `STRATEGY[+OVERRIDE...]`, e.g. `learned`, `uniform`, `learned+gamma=1.0`,
`learned+model.policy_window=1`. An override is `section.key=value` or one of the short names
in ALIASES. Each variant trains in OUT/<variant>/ through `learntok.train.train`, then is
evaluated on the validation and test splits (bits per byte, with the standard error of the
mean over documents); a `done.json` marker holds its figures, so a rerun skips finished
variants and resumes unfinished ones from their latest checkpoint. OUT/ gets results.md,
results.json and curves.png (validation bpb against bytes seen, one curve a variant).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import torch

from learntok.boundaries import strategy_names
from learntok.checkpoint import latest_checkpoint, load_run
from learntok.config import ConfigError, RunConfig, load_config
from learntok.data import ByteData
from learntok.evaluate import EvalOptions, evaluate_bpb
from learntok.model.aunet import AUNet
from learntok.objective import LN2, boundary_counts, boundary_rates, token_ce
from learntok.plots import pyplot, read_metrics, series
from learntok.rate import held_out_batches, set_rate
from learntok.runtime import autocast, inference, resolve_device, resolve_dtype
from learntok.train import train

ALIASES = {  # short override names for variants
    "gamma": "objective.gamma",
    "baseline": "objective.batch_baseline",
    "early": "objective.early_baseline",
    "w": "model.policy_window",
    "lambda_rate": "objective.lambda_rate",
    "lambda_pi": "objective.lambda_pi",
    "rate": "model.target_rate",
}

# The paper's ablations of the learned policy (§4's tricks, the window, the rate loss).
ABLATIONS = ["learned+gamma=1.0", "learned+baseline=none", "learned+early=false", "learned+w=1",
             "learned+lambda_rate=0"]

DONE = "done.json"


def parse_variant(spec: str) -> tuple[str, list[str]]:
    """`learned+gamma=1.0` -> ("learned", ["model.boundary=learned", "objective.gamma=1.0"]);
    a rate suffix `@0.2` (`learned@0.2`, `learned+w=1@0.2`) sets model.target_rate last."""
    body, at, rate = spec.strip().partition("@")
    strategy, *parts = body.split("+")
    overrides = [f"model.boundary={strategy}"]
    for part in parts:
        key, eq, value = part.partition("=")
        if not eq:
            raise ConfigError(f"variant {spec!r}: {part!r} is not key=value")
        overrides.append(f"{ALIASES.get(key, key)}={value}")
    if at:
        overrides.append(f"model.target_rate={parse_rate(rate, spec)}")
    return strategy, overrides


def parse_rate(text: str, where: str) -> float:
    """A target rate rho* in (0, 1) from `text`, or a ConfigError naming `where`."""
    try:
        rate = float(text)
    except ValueError:
        raise ConfigError(f"{where}: rate {text!r} is not a number") from None
    if not 0.0 < rate < 1.0:
        raise ConfigError(f"{where}: rate {rate} must be in (0, 1)")
    return rate


def variant_config(spec: str, preset: str | None, overrides: list[str]) -> RunConfig:
    """The run config of one variant: preset <- the shared overrides <- the variant's own."""
    strategy, own = parse_variant(spec)
    if strategy not in strategy_names():
        raise ConfigError(f"variant {spec!r}: unknown boundary strategy {strategy!r}; known: {', '.join(strategy_names())}")
    return load_config(preset, None, [*overrides, *own])


def evaluate_run(run_dir: Path, cfg: RunConfig, max_bytes: int | None) -> dict:
    """Validation and test bits per byte of a run's latest checkpoint, with the per-document
    standard error; boundary and whitespace rates on the test split."""
    device = resolve_device(cfg.system.device)
    model, _ = load_run(run_dir, device)
    data = ByteData.from_config(cfg.data)
    tc, out = cfg.train, {}
    opts = EvalOptions(tc.batch_size, tc.seq_len, max_bytes, seed=tc.seed, amp=resolve_dtype(cfg.system.dtype, device),
                       per_document=True)
    for split in ("val", "test"):
        r = evaluate_bpb(model, data, split, opts)
        out.update({f"{split}_bpb": r["bpb"], f"{split}_doc_bpb": r["doc_bpb_mean"], f"{split}_doc_se": r["doc_bpb_se"],
                    f"{split}_docs": r["n_docs"], f"{split}_bytes": r["n_bytes"],
                    f"{split}_boundary_rate": r["boundary_rate"], f"{split}_whitespace_rate": r["whitespace_rate"]})
    return out


def train_speed(run_dir: Path) -> float:
    """Mean training bytes per second over the run's logged windows (0 if none)."""
    train_lines, _ = read_metrics(run_dir)
    speeds = [r["bytes_per_s"] for r in train_lines if r.get("bytes_per_s")]
    return sum(speeds) / len(speeds) if speeds else 0.0


def run_variant(spec: str, preset: str | None, overrides: list[str], out: Path, eval_bytes: int | None,
                progress: bool = True) -> dict:
    """Train (or resume) and evaluate one variant; skip it when its done marker exists."""
    run_dir = out / spec
    if (run_dir / DONE).is_file():
        return json.loads((run_dir / DONE).read_text(encoding="utf-8"))
    cfg = variant_config(spec, preset, overrides)
    summary = train(cfg, run_dir, resume=latest_checkpoint(run_dir) is not None, progress=progress)
    record = {"variant": spec, "strategy": cfg.model.boundary, "steps": cfg.train.steps,
              "params": summary.get("params"), "bytes_per_s": train_speed(run_dir),
              **evaluate_run(run_dir, cfg, eval_bytes)}
    (run_dir / DONE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return record


def relative_step_time(records: list[dict], reference: str = "uniform") -> None:
    """Add `step_time_rel`: training seconds per byte relative to the reference strategy at the
    same rate suffix (`uniform`, or `uniform@0.2` for `learned@0.2`; same batch shape, so the
    same ratio per step). None without a reference run."""
    by_name = {r["variant"]: r for r in records}
    for r in records:
        _, at, rate = r["variant"].partition("@")
        ref = by_name.get(reference + at + rate)
        ok = ref is not None and ref["bytes_per_s"] > 0 and r["bytes_per_s"] > 0
        r["step_time_rel"] = ref["bytes_per_s"] / r["bytes_per_s"] if ok else None


def format_table(records: list[dict]) -> str:
    """The Markdown table of results.md."""
    head = ("| variant | val bpb | val doc bpb (s.e.) | test bpb | test doc bpb (s.e.) | boundary rate | "
            "whitespace rate | step time vs uniform |\n|---|---|---|---|---|---|---|---|\n")
    rows = []
    for r in records:
        rel = f"{r['step_time_rel']:.2f}x" if r.get("step_time_rel") else "n/a"
        rows.append(f"| {r['variant']} | {r['val_bpb']:.4f} | {r['val_doc_bpb']:.4f} ({r['val_doc_se']:.4f}) | "
                    f"{r['test_bpb']:.4f} | {r['test_doc_bpb']:.4f} ({r['test_doc_se']:.4f}) | "
                    f"{r['test_boundary_rate']:.3f} | {r['test_whitespace_rate']:.3f} | {rel} |")
    return head + "\n".join(rows) + "\n"


def plot_curves(out: Path, variants: list[str]) -> Path:
    """Validation bpb against bytes seen, one curve a variant."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, spec in enumerate(variants):
        _, val = read_metrics(out / spec)
        xs, ys = series(val, "val_bpb", "bytes_seen")
        if xs:
            ax.plot(xs, ys, marker="o", ms=3, color=f"C{i % 10}", ls="-" if i < 10 else "--", label=spec)
    ax.set_xlabel("bytes seen")
    ax.set_ylabel("validation bits per byte")
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=8)
    fig.tight_layout()
    path = out / "curves.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def compare(variants: list[str], out: str | Path, preset: str | None = "tiny", overrides: list[str] = (),
            eval_bytes: int | None = None, progress: bool = True, sweep: str | None = None) -> list[dict]:
    """Run every variant (skipping finished ones) and write results.md, results.json, curves.png;
    with variants at rates (`variant@rate`), also the frontier (`write_frontier`), and with
    `sweep` (a finished variant) that one model run at every rate by calibration."""
    out = Path(out)
    if len(set(variants)) != len(variants):
        raise ConfigError(f"variants repeat: {', '.join(variants)}")
    for spec in variants:                                        # fail on a bad name before any training
        variant_config(spec, preset, list(overrides))
    out.mkdir(parents=True, exist_ok=True)
    records = [run_variant(spec, preset, list(overrides), out, eval_bytes, progress) for spec in variants]
    relative_step_time(records)
    if any("@" in spec for spec in variants):
        write_frontier(out, records, [variant_config(spec, preset, list(overrides)) for spec in variants],
                       eval_bytes, sweep, progress)
    command = " ".join(["learntok compare", f"--preset {preset}" if preset else "",
                        f"--strategies {','.join(variants)}", *overrides]).replace("  ", " ")
    (out / "results.json").write_text(json.dumps({"command": command, "results": records}, indent=2) + "\n",
                                      encoding="utf-8")
    plot_curves(out, variants)
    (out / "results.md").write_text(
        f"# learntok compare\n\n`{command}`\n\n{format_table(records)}\n"
        "bpb: corpus-level bits per byte (sampled boundaries, seeded); doc bpb: mean over documents "
        "with its standard error. Rates on the test split.\n\n![validation bpb](curves.png)\n", encoding="utf-8")
    return records


def variants_from_args(strategies: str, ablations: bool, rates: str | None = None) -> list[str]:
    """`--strategies a,b+k=v` and `--ablations` -> the variant list (ablations appended once);
    with `--rates 0.1,0.2`, every variant at every rate: `a@0.1, a@0.2, b+k=v@0.1, ...`."""
    specs = [s.strip() for s in strategies.split(",") if s.strip()]
    specs += [a for a in ABLATIONS if ablations and a not in specs]
    if not rates:
        return specs
    values = [parse_rate(r.strip(), "--rates") for r in rates.split(",") if r.strip()]
    return [f"{spec}@{rate:g}" for spec in specs for rate in values]



# ---------------------------------------------------------------- frontiers (issue 13, docs/rate.md)


@torch.no_grad()
def window_nats(model, data: ByteData, split: str, opts: EvalOptions) -> dict[str, np.ndarray | float]:
    """Per window (row) of `split`: CE nats summed and scored bytes, decided as evaluate_bpb
    decides (batch i under seed + i, one sample), so their totals give its bpb (tested); and the
    boundary rate. The per-window figures pair two models on the same windows."""
    device = next(model.parameters()).device
    nats, n, counts = [], [], torch.zeros(4, dtype=torch.float64)
    with inference(model, opts.seed, device):
        for i, (x, _) in enumerate(data.eval_batches(split, opts.batch_size, opts.seq_len, max_bytes=opts.max_bytes)):
            torch.manual_seed(opts.seed + i)
            x = x.to(device)
            with autocast(device, opts.amp):
                out = model(x, greedy=opts.greedy)
            ce, mask = token_ce(out.logits, x)                   # (B, T-1)
            nats.append(ce.double().sum(1).cpu())
            n.append(mask.double().sum(1).cpu())
            counts += boundary_counts(x, out.boundaries).double().cpu()
    return {"nats": torch.cat(nats).numpy(), "bytes": torch.cat(n).numpy(),
            "rate": float(boundary_rates(counts)["boundary_rate"])}


def paired_difference(a: dict, b: dict) -> tuple[float, float]:
    """bpb of `a` minus bpb of `b` on the same windows (corpus level), and the standard error of
    the mean per-window difference (windows of one document are not independent: a lower bound)."""
    diff = (a["nats"] - b["nats"]) / (LN2 * np.maximum(a["bytes"], 1))
    mean = float((a["nats"].sum() - b["nats"].sum()) / (LN2 * a["bytes"].sum()))
    return mean, float(diff.std(ddof=1) / math.sqrt(len(diff))) if len(diff) > 1 else 0.0


def train_flops_per_byte(cfg, rate: float, seq_len: int) -> float:
    """Training FLOPs per byte, forward and backward: 6 per weight per position it acts on
    (Kaplan et al. 2020), byte-level weights (encoder, decoder, both heads) on every byte, token-level
    ones (mid) on a fraction `rate` of them; attention adds 12 D per (query, key) pair: the byte
    window at byte level, on average half the rate * seq_len tokens at token level. An estimate
    that is the same for every strategy (the boundary strategy's few weights are left out)."""
    with torch.device("meta"):
        model = AUNet(cfg)
    count = lambda *mods: sum(p.numel() for m in mods for p in m.parameters())  # noqa: E731
    byte_w = count(model.encoder, model.decoder, model.head, model.early_head)
    token_w = count(model.mid)
    attn = 12 * cfg.d_model * (cfg.attn_window * (cfg.n_down + cfg.n_up) + cfg.n_mid * rate * (rate * seq_len / 2))
    return 6.0 * (byte_w + rate * token_w) + attn


def _windows(run_dir: Path, cfg: RunConfig, data: ByteData, opts: EvalOptions, rate: float | None = None) -> dict:
    """window_nats on the test split of a run's model (at `rate` by calibration on val when
    given), cached in the run folder."""
    path = run_dir / (f"windows-test@{rate:g}.npz" if rate is not None else "windows-test.npz")
    if path.is_file():
        z = np.load(path)
        return {"nats": z["nats"], "bytes": z["bytes"], "rate": float(z["rate"]), "offset": float(z["offset"])}
    model, _ = load_run(run_dir, resolve_device(cfg.system.device))
    offset = math.nan
    if rate is not None:
        offset = set_rate(model, rate, held_out_batches(data, opts.seq_len), opts.greedy, opts.seed).value
    w = {**window_nats(model, data, "test", opts), "offset": offset}
    np.savez(path, **w)
    return w


def write_frontier(out: Path, records: list[dict], cfgs: list[RunConfig], eval_bytes: int | None,
                   sweep: str | None = None, progress: bool = True) -> list[dict]:
    """frontier.md / .json / .png and flops.png: test bpb against the rate each variant reached,
    with the paired difference from `uniform` at the same target rate (per-window s.e.), and
    against training FLOPs per byte; with `sweep`, that one model at every rate (calibrated)
    against the model trained at each rate. Returns the frontier rows."""
    cfg0 = cfgs[0]
    data = ByteData.from_config(cfg0.data)
    tc = cfg0.train
    opts = EvalOptions(tc.batch_size, tc.seq_len, eval_bytes, seed=tc.seed,
                       amp=resolve_dtype(cfg0.system.dtype, resolve_device(cfg0.system.device)))
    windows = {r["variant"]: _windows(out / r["variant"], c, data, opts) for r, c in zip(records, cfgs)}
    rows = []
    for r, c in zip(records, cfgs):
        name, _, _ = r["variant"].partition("@")
        rate = c.model.target_rate
        ref = next((v for v, cc in zip(records, cfgs) if cc.model.boundary == "uniform"
                    and cc.model.target_rate == rate and "+" not in v["variant"]), None)
        diff, se = paired_difference(windows[r["variant"]], windows[ref["variant"]]) if ref else (math.nan, math.nan)
        rows.append({"variant": r["variant"], "family": name, "target_rate": rate, "rate": r["test_boundary_rate"],
                     "test_bpb": r["test_bpb"], "vs_uniform": diff, "vs_uniform_se": se,
                     "flops_per_byte": train_flops_per_byte(c.model, rate, c.train.seq_len)})
    sweep_rows = _sweep_rows(out, sweep, records, cfgs, windows, data, opts) if sweep else []
    (out / "frontier.json").write_text(json.dumps({"frontier": rows, "sweep": sweep_rows}, indent=2) + "\n",
                                       encoding="utf-8")
    _plot_frontier(out, rows, sweep_rows, sweep)
    (out / "frontier.md").write_text(frontier_markdown(rows, sweep_rows, sweep), encoding="utf-8")
    return rows


def _sweep_rows(out: Path, sweep: str, records, cfgs, windows, data, opts) -> list[dict]:
    """The `sweep` variant's model at every target rate of the comparison, calibrated on val."""
    by_name = {r["variant"]: (r, c) for r, c in zip(records, cfgs)}
    if sweep not in by_name:
        raise ConfigError(f"--sweep {sweep!r} is not one of the variants: {', '.join(by_name)}")
    family = sweep.partition("@")[0]
    rows = []
    for rate in sorted({c.model.target_rate for c in cfgs}):
        w = _windows(out / sweep, by_name[sweep][1], data, opts, rate)
        own = next((v for v, (r, c) in by_name.items() if v.partition("@")[0] == family and c.model.target_rate == rate), None)
        uni = next((v for v, (r, c) in by_name.items() if v.partition("@")[0] == "uniform" and c.model.target_rate == rate), None)
        row = {"target_rate": rate, "rate": w["rate"], "offset": w["offset"],
               "test_bpb": float(w["nats"].sum() / (LN2 * w["bytes"].sum()))}
        if own:
            row["per_rate_bpb"] = by_name[own][0]["test_bpb"]
            row["vs_per_rate"], row["vs_per_rate_se"] = paired_difference(w, windows[own])
            if uni:
                gain = by_name[uni][0]["test_bpb"] - row["per_rate_bpb"]
                row["kept"] = (by_name[uni][0]["test_bpb"] - row["test_bpb"]) / gain if gain > 0 else math.nan
        rows.append(row)
    return rows


def frontier_markdown(rows: list[dict], sweep_rows: list[dict], sweep: str | None) -> str:
    lines = ["# bits per byte against compression\n",
             "| variant | target rate | reached rate (test) | test bpb | bpb - uniform's at this rate (paired s.e.) | "
             "train FLOPs / byte |", "|---|---|---|---|---|---|"]
    for r in rows:
        vs = "" if math.isnan(r["vs_uniform"]) else f"{r['vs_uniform']:+.4f} ({r['vs_uniform_se']:.4f})"
        lines.append(f"| {r['variant']} | {r['target_rate']:g} | {r['rate']:.4f} | {r['test_bpb']:.4f} | {vs} | "
                     f"{r['flops_per_byte']:.3g} |")
    if sweep_rows:
        lines += [f"\n## one model ({sweep}) at every rate, by calibration on val\n",
                  "| target rate | reached (test) | offset | test bpb | per-rate model's bpb | one - per-rate (paired s.e.) | "
                  "kept of the per-rate model's gain over uniform |", "|---|---|---|---|---|---|---|"]
        for r in sweep_rows:
            per = f"{r['per_rate_bpb']:.4f}" if "per_rate_bpb" in r else ""
            vs = f"{r['vs_per_rate']:+.4f} ({r['vs_per_rate_se']:.4f})" if "vs_per_rate" in r else ""
            kept = f"{r['kept']:.2f}" if not math.isnan(r.get("kept", math.nan)) else ""
            lines.append(f"| {r['target_rate']:g} | {r['rate']:.4f} | {r['offset']:+.3f} | {r['test_bpb']:.4f} | {per} | "
                         f"{vs} | {kept} |")
    lines.append("\n![bpb against rate](frontier.png)\n\n![bpb against training FLOPs per byte](flops.png)\n")
    return "\n".join(lines)


def _plot_frontier(out: Path, rows: list[dict], sweep_rows: list[dict], sweep: str | None) -> None:
    plt = pyplot()
    families = list(dict.fromkeys(r["family"] for r in rows))
    for x_key, x_label, name in (("rate", "boundary rate reached (test)", "frontier.png"),
                                 ("flops_per_byte", "training FLOPs per byte (estimate)", "flops.png")):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for i, fam in enumerate(families):
            pts = sorted((r for r in rows if r["family"] == fam), key=lambda r: r[x_key])
            err = [0.0 if math.isnan(r["vs_uniform_se"]) else r["vs_uniform_se"] for r in pts]
            ax.errorbar([r[x_key] for r in pts], [r["test_bpb"] for r in pts], yerr=err, marker="o", ms=4,
                        capsize=3, color=f"C{i % 10}", label=fam)
        if sweep_rows and x_key == "rate":
            ax.errorbar([r["rate"] for r in sweep_rows], [r["test_bpb"] for r in sweep_rows],
                        yerr=[r.get("vs_per_rate_se", 0.0) for r in sweep_rows], ls="--", marker="s", ms=4,
                        capsize=3, color="k", label=f"{sweep}, calibrated to each rate (error bars: paired against the per-rate model)")
        ax.set_xlabel(x_label)
        ax.set_ylabel("test bits per byte")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        ax.set_title("error bars: s.e. of the paired per-window difference from uniform", fontsize=9)
        fig.tight_layout()
        fig.savefig(out / name, dpi=120)
        plt.close(fig)
