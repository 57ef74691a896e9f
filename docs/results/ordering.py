"""The paper's ordering on learntok's backbone: the learned policy against every baseline at an
equal rate, paired by seed, in the shape of the paper's Table 1 (test bits per byte, boundary
rate on the test split, zero-shot bits per byte of the gold continuation). One command trains what
is missing (`learntok compare`, resumable: rerun it after a stop), scores what is not scored yet,
and writes the table, its data and its plot:

    python docs/results/ordering.py --domain code --seeds 5 --tasks EVALS \\
        --out runs/ordering-code --json docs/results/ordering-code.json

EVALS is a folder with llm-foundry's `piqa.jsonl.gz`, `arc_easy.jsonl.gz` and
`lambada_openai.jsonl.gz` (docs/evaluation.md); without `--tasks` the zero-shot columns are left
out. `--domain prose` is built-in Shakespeare, `code` the interpreter's standard library
(`python-stdlib`). Every arm trains with the `tiny` recipe at rho* = 0.2 from the same initial
backbone at a seed (tests/test_identical_init.py) on the same batches.

Equal rate: an arm whose rate on the scored test bytes is more than 0.01 from rho* (the rule of
every table, `learntok.run.labels.at_rate`) is scored again at rho* by online control (`learntok eval
--rate`, docs/rate.md) on the same windows; an arm with no rate knob (`whitespace`) stays as
trained and its rows say so. Each difference is learned minus the arm, paired by seed, with its
standard error over seeds and the paired t-test's p-value. learned - uniform is the primary
comparison (tested alone); the others are Holm-corrected among themselves; a row reads "lower" /
"higher" when its (corrected) p is below 0.05, else "tie". Holm over every arm is recorded too.

Seed spread: `--ema DECAY` trains every arm with a moving average of its weights beside the last
iterate (`optim.ema`); `--weights ema` scores the average instead, from the same runs, so that the
spread of two arms that learn nothing (`frozen` - `uniform`, in "spread") can be read both ways.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from learntok.evaluation.statistics import holm, mean_and_se, paired_t_pvalue
from learntok.evaluation.statistics import t95
from provenance import git_commit

ARMS = ("learned", "uniform", "hnet", "nawrot", "entropy", "whitespace", "bpe-causal")
NO_RATE_KNOB = {"whitespace"}  # a rule with no threshold: its rate is what the text gives
SOURCES = {"code": "python-stdlib", "prose": "shakespeare"}
TASKS = {"piqa": "piqa.jsonl.gz", "arc_easy": "arc_easy.jsonl.gz", "lambada": "lambada_openai.jsonl.gz"}
RATE, TOLERANCE = 0.2, 0.01
# The primary comparison: learned - uniform, tested alone at 5%; the others are secondary,
# Holm-corrected among themselves (and, for the record, over all of them). This rule came in while
# the code runs trained (their commit had Holm over all arms): ordering-code.md gives both readings.
PRIMARY = "uniform"


def learntok(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "learntok", *args], check=True)


def seeds_of(a: argparse.Namespace, arm: str) -> range:
    return range(a.few_seeds if arm in a.few else a.seeds)


def train(a: argparse.Namespace) -> None:
    """The runs, one `compare` per number of seeds (it skips finished runs and resumes a stopped one)."""
    groups = {}
    for arm in a.arms:
        groups.setdefault(len(seeds_of(a, arm)), []).append(arm)
    for n, arms in groups.items():
        learntok(
            "compare", "--preset", "tiny", "--steps", str(a.steps), "--seeds", str(n), "--jobs", str(a.jobs),
            "--eval-bytes", str(a.eval_bytes), "--out", str(a.out), "--strategies", ",".join(arms),
            f"data.source={SOURCES[a.domain]}", *([f"optim.ema={a.ema}"] if a.ema else []),
        )  # fmt: skip


def run_dir(out: Path, arm: str, seed: int) -> Path:
    return out / arm / f"seed{seed}"


def scored_model(a: argparse.Namespace, arm: str, seed: int) -> Path:
    """What is scored: the run (its last weights) or its last checkpoint's weight average."""
    run = run_dir(a.out, arm, seed)
    if a.weights == "last":
        return run
    return run / "checkpoints" / (run / "checkpoints" / "latest").read_text().strip() / "ema"


def cached(path: Path, *command: str) -> dict:
    """The JSON a `learntok` command writes to `path`, run once (a later call reads it back)."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        learntok(*command, "--json", str(path), "--threads", "1")
    return json.loads(path.read_text())


def score(a: argparse.Namespace, arm: str, seed: int) -> dict:
    """Test bpb and rate of one run at rho*: compare's own figures when its rate is within the
    tolerance, else the same windows scored at rho* by online control."""
    done = json.loads((run_dir(a.out, arm, seed) / "done.json").read_text())
    key = "" if a.weights == "last" else "ema_"
    row = {"bpb": done[f"{key}test_bpb"], "rate": done[f"{key}test_boundary_rate"]}
    row.update(trained_rate=row["rate"], scored="as trained")
    model, tag = scored_model(a, arm, seed), "" if a.weights == "last" else "-ema"
    if abs(row["rate"] - RATE) > TOLERANCE and arm not in NO_RATE_KNOB:
        r = cached(
            a.out / "at-rate" / f"{arm}-seed{seed}{tag}.json",
            "eval", str(model), "--split", "test", "--max-bytes", str(a.eval_bytes),
            "--seed", str(seed), "--rate", str(RATE), "--rate-mode", "online",
        )  # fmt: skip
        row.update(bpb=r["bpb"], rate=r["boundary_rate"], scored="online control")
    if a.tasks:
        r = cached(
            a.out / "tasks" / f"{arm}-seed{seed}{tag}.json",
            "eval-tasks", str(model), "--seed", str(seed), "--limit", str(a.limit),
            *[x for name in TASKS for x in ("--task", str(a.tasks / TASKS[name]))],
        )  # fmt: skip
        row["tasks"] = {name: task_bpb(r, name) for name in TASKS}
    return row


def run_minutes(a: argparse.Namespace, arm: str, seed: int) -> float:
    """Minutes of wall clock one run trained and evaluated: the time between its metrics.jsonl
    rows, leaving out any gap over 5 minutes (a run stopped and resumed in a later session)."""
    times = [json.loads(row)["time"] for row in (run_dir(a.out, arm, seed) / "metrics.jsonl").read_text().splitlines()]
    return sum(d for d in (b - t for t, b in zip(times, times[1:])) if d < 300) / 60


def task_bpb(result: dict, name: str) -> float:
    """Bits per byte of the gold continuation on one task of an `eval-tasks` JSON (tasks by file name)."""
    return result["tasks"][TASKS[name].removesuffix(".jsonl.gz")]["gold_bpb"]


def table(a: argparse.Namespace, scores: dict[tuple[str, int], dict]) -> dict:
    arms = {}
    for arm in a.arms:
        rows = [scores[arm, s] for s in seeds_of(a, arm)]
        bpb, se = mean_and_se([r["bpb"] for r in rows])
        arms[arm] = {
            "test_bpb": bpb,
            "se": se,
            "rate": sum(r["rate"] for r in rows) / len(rows),
            "trained_rate": sum(r["trained_rate"] for r in rows) / len(rows),
            "scored": sorted({r["scored"] for r in rows}),
            "per_seed": rows,
        }
        if a.tasks:
            arms[arm]["tasks"] = {t: mean_and_se([r["tasks"][t] for r in rows])[0] for t in TASKS}
    others = [arm for arm in a.arms if arm != "learned"]
    diffs = {arm: [scores["learned", s]["bpb"] - scores[arm, s]["bpb"] for s in seeds_of(a, arm)] for arm in others}
    pvalues = [paired_t_pvalue(diffs[arm]) for arm in others]
    secondary = [arm for arm in others if arm != PRIMARY]
    adjusted = dict(zip(secondary, holm([pvalues[others.index(arm)] for arm in secondary])))
    adjusted[PRIMARY] = pvalues[others.index(PRIMARY)] if PRIMARY in others else None
    over_all = dict(zip(others, holm(pvalues)))
    for arm, p in zip(others, pvalues):
        p_holm = adjusted[arm]
        d, se = mean_and_se(diffs[arm])
        half = t95(len(diffs[arm]) - 1) * se
        reads = "tie" if p_holm >= 0.05 else ("lower" if d < 0 else "higher")
        arms[arm]["learned_minus"] = {
            "diff": d, "se": se, "ci95": [d - half, d + half], "p": p, "p_holm": p_holm, "reads": reads,
            "p_holm_over_all": over_all[arm],
            "per_seed": diffs[arm],
        }  # fmt: skip
    minutes = sum(run_minutes(a, arm, s) for arm in a.arms for s in seeds_of(a, arm))
    spread = {}  # two arms paired by seed: arm - uniform, and its standard deviation over seeds
    for arm in others if PRIMARY in a.arms else []:
        if arm != PRIMARY:
            both = [s for s in seeds_of(a, arm) if s in seeds_of(a, PRIMARY)]
            d = [scores[arm, s]["bpb"] - scores[PRIMARY, s]["bpb"] for s in both]
            spread[f"{arm} - {PRIMARY}"] = {"per_seed": d, "sd": statistics.stdev(d) if len(d) > 1 else None}
    return {"domain": a.domain, "source": SOURCES[a.domain], "weights": a.weights, "ema": a.ema, "spread": spread,
            "run_minutes": minutes, "wall_minutes_at_jobs": minutes / a.jobs,
            "seeds": list(range(a.seeds)),
        "seeds_by_arm": {arm: list(seeds_of(a, arm)) for arm in a.arms}, "steps": a.steps,
            "eval_bytes": a.eval_bytes, "rate": RATE, "task_limit": a.limit if a.tasks else None, "arms": arms}  # fmt: skip


def markdown(result: dict) -> str:
    tasks = list(TASKS) if any("tasks" in v for v in result["arms"].values()) else []
    head = [
        "arm",
        "seeds",
        "test bpb (s.e.)",
        "test rate",
        "scored",
        "learned - arm (s.e.)",
        "95% CI",
        "p (corrected)",
        "reads",
    ]
    lines = ["| " + " | ".join(head + [f"{t} bpb" for t in tasks]) + " |", "|" + "---|" * (len(head) + len(tasks))]
    for arm, v in result["arms"].items():
        d = v.get("learned_minus")
        cells = [
            arm, str(len(v["per_seed"])), f"{v['test_bpb']:.4f} ({v['se']:.4f})", f"{v['rate']:.3f}", ", ".join(v["scored"]),
            f"{d['diff']:+.4f} ({d['se']:.4f})" if d else "-",
            f"[{d['ci95'][0]:+.4f}, {d['ci95'][1]:+.4f}]" if d else "-",
            f"{d['p']:.4f} ({d['p_holm']:.4f})" if d else "-", f"**{d['reads']}**" if d and d["reads"] != "tie" else (d["reads"] if d else "-"),
        ]  # fmt: skip
        cells += [f"{v['tasks'][t]:.3f}" for t in tasks]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = [arm for arm, v in result["arms"].items() if "learned_minus" in v]
    fig, ax = plt.subplots(figsize=(6.4, 0.5 + 0.45 * len(arms)))
    for i, arm in enumerate(arms):
        d = result["arms"][arm]["learned_minus"]
        ax.scatter(d["per_seed"], [i] * len(d["per_seed"]), s=12, color="0.6", zorder=2)
        ax.errorbar(d["diff"], i, xerr=d["ci95"][1] - d["diff"], fmt="o", color="C0", capsize=3, zorder=3)
    ax.axvline(0, color="k", lw=0.8)
    ax.set_yticks(range(len(arms)), [f"learned - {arm}" for arm in arms])
    ax.invert_yaxis()
    ax.set_xlabel(f"test bpb at rate {RATE}, paired by seed (grey: seeds; bar: 95% CI)")
    n = sorted({len(s) for s in result["seeds_by_arm"].values()})
    ax.set_title(f"{result['source']}, tiny recipe, {result['steps']} steps, {'/'.join(map(str, n))} seeds")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


ROOT = Path(__file__).resolve().parents[2]


def recorded(arg: str, a: argparse.Namespace) -> str:
    """A command-line word as the results record it: the tasks' folder as EVALS (it is the
    user's), a path inside the repository relative to its root (run from anywhere)."""
    if a.tasks and arg == str(a.tasks):
        return "EVALS"
    path = Path(arg)
    return str(path.relative_to(ROOT)) if path.is_absolute() and path.is_relative_to(ROOT) else arg


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--domain", choices=sorted(SOURCES), required=True)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--arms", default=",".join(ARMS), help="comma-separated; learned first")
    p.add_argument("--few", default="", help="comma-separated arms trained at --few-seeds only")
    p.add_argument("--few-seeds", type=int, default=3)
    p.add_argument("--eval-bytes", type=int, default=524288)
    p.add_argument("--tasks", type=Path, help="folder of the llm-foundry task files (zero-shot columns)")
    p.add_argument("--limit", type=int, default=500, help="first N examples of each task")
    p.add_argument("--no-train", action="store_true", help="score the finished runs only")
    p.add_argument(
        "--ema", type=float, default=0.0, help="train with optim.ema=DECAY (a weight average beside the last weights)"
    )
    p.add_argument("--weights", choices=("last", "ema"), default="last", help="score the last weights or their average")
    p.add_argument("--commit", default=git_commit(), help="the commit the runs trained on (default: this checkout's)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--json", type=Path, required=True)
    a = p.parse_args()
    a.arms, a.few = a.arms.split(","), set(filter(None, a.few.split(",")))
    if "learned" in a.few or a.few_seeds > a.seeds:
        p.error("--few: the learned arm has every seed of every other arm")
    if a.arms[0] != "learned":
        p.error("--arms: learned comes first")
    if not a.no_train:
        train(a)
    units = [(arm, s) for arm in a.arms for s in seeds_of(a, arm)]
    with ThreadPoolExecutor(a.jobs) as pool:  # each scoring is its own one-thread process
        scores = dict(zip(units, pool.map(lambda u: score(a, *u), units)))
    argv = [recorded(arg, a) for arg in sys.argv]
    result = {"command": " ".join(["python", *argv]), "commit": a.commit, **table(a, scores)}
    a.json.write_text(json.dumps(result, indent=2) + "\n")
    seeds = ", ".join(f"{arm} {len(v['per_seed'])}" for arm, v in result["arms"].items())
    made_by = f"Made by: `{result['command']}`; commit {result['commit']}; seeds 0-{a.seeds - 1} (by arm: {seeds})\n\n"
    page = a.json.with_name(a.json.stem + "-table.md")  # the page around the table is written by hand
    page.write_text(made_by + markdown(result))
    plot(result, a.json.with_suffix(".png"))
    print(markdown(result))


if __name__ == "__main__":
    main()
