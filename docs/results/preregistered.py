"""The pre-registered study on prose (docs/results/preregistration-prose.md): does the learned
policy beat each boundary *rule* at rate 0.2? Trains what is missing, a block of seeds at a time
(every arm at a seed before the next block, so a stop leaves whole seeds), scores every finished
seed, and writes the result JSON, its table and its plot after each block. Rerun the same command
to resume: finished runs are skipped, a stopped one continues from its last checkpoint.

    python docs/results/preregistered.py --out runs/prereg-prose --json docs/results/preregistered-prose.json

Every rule below is fixed by the registration page, committed before the first run; the JSON
records that commit (the page's first commit) beside the commit the runs trained on.

- Arms: learned, entropy, whitespace, hnet (its ratio loss weighted so that it trains to 0.2,
  chosen on a pilot at seed 0), uniform (secondary, trained last in each block).
- Seeds 100-129: no recipe was tuned on them. `tiny`, 1,500 steps, built-in Shakespeare, the same
  initial weights and batches for every arm at a seed.
- Equal rate: an arm whose rate on the scored test bytes is more than 0.01 from 0.2 is scored at
  0.2 by online control on the same windows (the registered fallback; whitespace has no knob).
- Primary: learned below *each* rule, the intersection-union test of the three one-sided paired
  t-tests, at 5% (no correction needed). One interim look at 15 seeds: the study stops early only
  if that test's p is below 0.001 (Haybittle-Peto), else it runs to 30 seeds at 5%.
- Each rule's reading: lower / higher by the two-sided paired t-test, Holm over the three rules;
  equivalent within +-0.01 by two one-sided tests (TOST), Holm over the three rules; otherwise
  not resolved.
- Learned's score: sampled cuts (as it trained, and as uniform is scored), primary; greedy cuts
  (p > 0.5, at 0.2 by online control when off by more than 0.01) a pre-named secondary, paired
  with sampled cuts on the same windows. Which place each learned run settled on (the word
  reference of best F1) and the test bpb by place.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

from learntok.evaluation.boundary_quality import WORD_REFERENCES, settled_on
from learntok.evaluation.statistics import holm, intersection_union_pvalue, mean_and_se, one_sided_pvalue
from learntok.evaluation.statistics import paired_t_pvalue, t95, t_quantile, tost_pvalue
from provenance import git_commit

RULES = ("entropy", "whitespace", "hnet")
ARMS = ("learned", *RULES, "uniform")
SPEC = {"hnet": "hnet+strategy.ratio_weight=1.0"}  # the variant each arm trains as (hnet: the pilot's weight)
NO_RATE_KNOB = {"whitespace"}
SOURCE, PRESET, STEPS, EVAL_BYTES = "shakespeare", "tiny", 1500, 524288
RATE, TOLERANCE, MARGIN, ALPHA = 0.2, 0.01, 0.01, 0.05
FIRST_SEED, SEEDS, INTERIM, INTERIM_ALPHA = 100, 30, 15, 0.001
REGISTRATION = "docs/results/preregistration-prose.md"
ROOT = Path(__file__).resolve().parents[2]


def learntok(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "learntok", *args], check=True)


def registration_commit() -> str:
    """The commit that first added the registration page (the runs must come after it)."""
    out = subprocess.run(
        ["git", "log", "--diff-filter=A", "--format=%h", "--", REGISTRATION], cwd=ROOT, capture_output=True, text=True
    )
    return out.stdout.split()[-1] if out.stdout.split() else "not recorded: the page is not committed"


def run_dir(out: Path, arm: str, seed: int) -> Path:
    return out / SPEC.get(arm, arm) / f"seed{seed}"


def finished(out: Path, arm: str, seed: int) -> bool:
    return (run_dir(out, arm, seed) / "done.json").exists()


def train_block(a: argparse.Namespace, seeds: list[int]) -> None:
    learntok(
        "compare", "--preset", PRESET, "--steps", str(STEPS), "--seeds", ",".join(map(str, seeds)) + ("," if len(seeds) == 1 else ""),
        "--jobs", str(a.jobs), "--eval-bytes", str(EVAL_BYTES), "--out", str(a.out),
        "--strategies", ",".join(SPEC.get(arm, arm) for arm in ARMS), f"data.source={SOURCE}",
    )  # fmt: skip


def cached(path: Path, *command: str) -> dict:
    """The JSON a `learntok eval` writes to `path`, run once (a later call reads it back)."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        learntok(
            "eval", *command, "--split", "test", "--max-bytes", str(EVAL_BYTES), "--json", str(path), "--threads", "1"
        )
    return json.loads(path.read_text())


def score(a: argparse.Namespace, arm: str, seed: int) -> dict:
    """Test bpb and rate at rho* (as trained within the tolerance, else by online control); for
    the learned arm also greedy cuts and sampled cuts re-scored on the same windows, and its place."""
    run = run_dir(a.out, arm, seed)
    done = json.loads((run / "done.json").read_text())
    row = {"bpb": done["test_bpb"], "rate": done["test_boundary_rate"], "scored": "as trained"}
    row["trained_rate"] = row["rate"]
    at_rate = ["--rate", str(RATE), "--rate-mode", "online"]
    if abs(row["rate"] - RATE) > TOLERANCE and arm not in NO_RATE_KNOB:
        r = cached(a.out / "scores" / f"{arm}-seed{seed}-at-rate.json", str(run), "--seed", str(seed), *at_rate)
        row.update(bpb=r["bpb"], rate=r["boundary_rate"], scored="online control")
    if arm == "learned":
        sampled = cached(a.out / "scores" / f"learned-seed{seed}-sampled.json", str(run), "--seed", str(seed))
        greedy = cached(a.out / "scores" / f"learned-seed{seed}-greedy.json", str(run), "--seed", str(seed), "--greedy")
        greedy_scored = "as decided"
        if abs(greedy["boundary_rate"] - RATE) > TOLERANCE:
            path = a.out / "scores" / f"learned-seed{seed}-greedy-at-rate.json"
            greedy = cached(path, str(run), "--seed", str(seed), "--greedy", *at_rate)
            greedy_scored = "online control"
        row["sampled_same_windows"] = {"bpb": sampled["bpb"], "rate": sampled["boundary_rate"]}
        row["greedy"] = {"bpb": greedy["bpb"], "rate": greedy["boundary_rate"], "scored": greedy_scored}
        row["settled_on"] = settled_on(sampled)
        if row["settled_on"]:
            row["settled_f1"] = sampled[row["settled_on"]]["f1"]
        known = [k for k in WORD_REFERENCES if k in sampled]
        if known and sampled["boundary_rate"] > 0:  # settled_on's candidate, before its test of lift
            nearest = max(known, key=lambda k: sampled[k]["f1"])
            row["nearest"] = {
                "place": nearest, "f1": sampled[nearest]["f1"],
                "recall_over_rate": sampled[nearest]["recall"] / sampled["boundary_rate"],
            }  # fmt: skip
    return row


def run_minutes(run: Path) -> float:
    """Minutes between a run's metrics rows, leaving out gaps over 5 minutes (a stop and resume)."""
    times = [json.loads(line)["time"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    return sum(d for d in (b - t for t, b in zip(times, times[1:])) if d < 300) / 60


def difference(diffs: list[float]) -> dict:
    d, se = mean_and_se(diffs)
    n = len(diffs)
    half95, half90 = t95(n - 1) * se, t_quantile(0.10, n - 1) * se
    return {
        "diff": d, "se": se, "sd": se * math.sqrt(n), "n": n,
        "ci95": [d - half95, d + half95], "ci90": [d - half90, d + half90],
        "p": paired_t_pvalue(diffs), "p_lower": one_sided_pvalue(diffs, below=True),
        "p_higher": one_sided_pvalue(diffs, below=False), "p_tost": tost_pvalue(diffs, MARGIN),
        "per_seed": diffs,
    }  # fmt: skip


def readings(diffs_by_rule: dict[str, list[float]], alpha: float) -> dict:
    """The registered tests on learned - each rule: the intersection-union test (primary) and
    each rule's reading (Holm over the rules for direction, and again for equivalence)."""
    rules = list(diffs_by_rule)
    out = {rule: difference(diffs_by_rule[rule]) for rule in rules}
    p_direction = holm([out[r]["p"] for r in rules])
    p_equivalent = holm([out[r]["p_tost"] for r in rules])
    for rule, p_dir, p_eq in zip(rules, p_direction, p_equivalent):
        row = out[rule]
        row.update(p_holm=p_dir, p_tost_holm=p_eq)
        direction = ("lower" if row["diff"] < 0 else "higher") if p_dir < alpha else None
        equivalent = p_eq < alpha
        if direction and equivalent:
            row["reads"] = f"{direction}, and equivalent within +-{MARGIN}"
        elif direction:
            row["reads"] = direction
        else:
            row["reads"] = f"equivalent within +-{MARGIN}" if equivalent else "not resolved"
    p_iut = intersection_union_pvalue([out[r]["p_lower"] for r in rules])
    primary = {"p": p_iut, "alpha": alpha, "learned_below_every_rule": p_iut < alpha}
    return {"primary": primary, "rules": out}


def analyse(scores: dict, seeds: list[int], alpha: float) -> dict:
    """Every registered figure over `seeds` (each with every primary arm scored), tested at `alpha`."""
    learned = [scores["learned", s] for s in seeds]
    result = {"seeds": seeds, "alpha": alpha}
    result["sampled"] = readings(
        {r: [scores["learned", s]["bpb"] - scores[r, s]["bpb"] for s in seeds] for r in RULES}, alpha
    )
    result["greedy"] = readings(
        {r: [scores["learned", s]["greedy"]["bpb"] - scores[r, s]["bpb"] for s in seeds] for r in RULES}, alpha
    )
    with_uniform = [s for s in seeds if ("uniform", s) in scores]
    if len(with_uniform) >= 2:
        result["learned_minus_uniform"] = difference(
            [scores["learned", s]["bpb"] - scores["uniform", s]["bpb"] for s in with_uniform]
        ) | {"seeds": with_uniform}
    result["sampled_minus_greedy"] = difference(
        [r["sampled_same_windows"]["bpb"] - r["greedy"]["bpb"] for r in learned]
    ) | {"greedy_rate": mean_and_se([r["greedy"]["rate"] for r in learned])[0]}
    places = {k: [scores["learned", s]["bpb"] for s in v] for k, v in settled_places(scores, seeds).items()}
    result["places"] = {
        k: {"seeds": len(v), "bpb": mean_and_se(v)[0], "se": mean_and_se(v)[1]} for k, v in places.items()
    }
    settled = sorted((k, v) for k, v in places.items() if len(v) >= 2)
    result["places_differences"] = [
        {"between": f"{ka} - {kb}", "diff": result["places"][ka]["bpb"] - result["places"][kb]["bpb"],
         "se": math.hypot(result["places"][ka]["se"], result["places"][kb]["se"])}
        for i, (ka, _) in enumerate(settled) for kb, _ in settled[i + 1 :]
    ]  # fmt: skip
    return result


def settled_places(scores: dict, seeds: list[int]) -> dict[str, list[int]]:
    """The seeds at which the learned run settled on each place."""
    places: dict[str, list[int]] = {}
    for s in seeds:
        places.setdefault(str(scores["learned", s]["settled_on"]), []).append(s)
    return places


def looks(scores: dict, seeds: list[int], first: list[int]) -> dict:
    """The registered looks that the finished seeds allow: the interim look at the first INTERIM
    seeds (tested at INTERIM_ALPHA), the final one at all SEEDS (at ALPHA); and, until the final
    look, the seeds so far, read at ALPHA but named as what it is: not a registered look."""
    out = {}
    if set(first[:INTERIM]) <= set(seeds):
        out["interim"] = analyse(scores, first[:INTERIM], INTERIM_ALPHA)
    if set(first[:SEEDS]) <= set(seeds):
        out["final"] = analyse(scores, first[:SEEDS], ALPHA)
    else:
        out["so_far"] = analyse(scores, seeds, ALPHA) | {"note": "not a registered look: descriptive only"}
    return out


def stopped_early(result: dict) -> bool:
    """The registered stopping rule: the interim look's primary test below INTERIM_ALPHA."""
    interim = result["looks"].get("interim")
    return bool(interim and interim["sampled"]["primary"]["learned_below_every_rule"])


def arm_table(scores: dict, seeds: list[int]) -> dict:
    arms = {}
    for arm in ARMS:
        rows = {s: scores[arm, s] for s in seeds if (arm, s) in scores}
        if rows:
            bpb, se = mean_and_se([r["bpb"] for r in rows.values()])
            arms[arm] = {
                "seeds": list(rows), "test_bpb": bpb, "se": se,
                "rate": sum(r["rate"] for r in rows.values()) / len(rows),
                "trained_rate": sum(r["trained_rate"] for r in rows.values()) / len(rows),
                "scored": sorted({r["scored"] for r in rows.values()}), "per_seed": list(rows.values()),
            }  # fmt: skip
    return arms


def markdown(result: dict) -> str:
    lines = [
        f"Made by: `{result['command']}`; commit {result['commit']}; seeds {', '.join(map(str, result['seeds']))} "
        f"(registration {result['registration_commit']}; {len(result['seeds'])} seeds finished)",
        "",
        "| arm | seeds | test bpb (s.e.) | test rate | scored |",
        "|---|---|---|---|---|",
    ]
    for arm, v in result["arms"].items():
        lines.append(
            f"| {arm} | {len(v['seeds'])} | {v['test_bpb']:.4f} ({v['se']:.4f}) | {v['rate']:.3f} | {', '.join(v['scored'])} |"
        )
    lines += design_checks(result)
    for look, analysis in result["looks"].items():
        lines += ["", f"### {look.replace('_', ' ')}: {len(analysis['seeds'])} seeds, tested at {analysis['alpha']}"]
        lines += [f"({analysis['note']})"] if "note" in analysis else []
        lines += table_of(analysis) + secondary_of(analysis)
    return "\n".join(lines) + "\n"


def design_checks(result: dict) -> list[str]:
    """What the runs show of the design, not of the answer: each arm's test rate and how it was
    scored, where each learned run settled (seeds and F1 with sampled cuts), and learned's
    sampled - greedy range."""
    lines = ["", "Design checks, every finished seed:", ""]
    for arm, v in result["arms"].items():
        rates = [r["rate"] for r in v["per_seed"]]
        lines.append(f"- {arm}: test rate {min(rates):.3f}-{max(rates):.3f}, scored {', '.join(v['scored'])}")
    learned = dict(zip(result["arms"]["learned"]["seeds"], result["arms"]["learned"]["per_seed"]))
    places = settled_places({("learned", s): r for s, r in learned.items()}, list(learned))
    for place, seeds in sorted(places.items(), key=lambda kv: -len(kv[1])):
        f1 = [learned[s]["settled_f1"] for s in seeds if "settled_f1" in learned[s]]
        span = (f", F1 {min(f1):.2f}" + (f"-{max(f1):.2f}" if len(f1) > 1 else "")) if f1 else ""
        count = f"{len(seeds)} seed" + "s" * (len(seeds) > 1)
        if place == "None":  # no word place recalled twice what random cuts would (settled_on)
            near = "; ".join(
                f"{s}: nearest {n['place']}, F1 {n['f1']:.2f}, recall {n['recall_over_rate']:.2f}x chance"
                if (n := learned[s].get("nearest"))
                else str(s)
                for s in seeds
            )
            lines.append(f"- learned settled on {place_name(place)} (recall under 2x chance): {count} ({near})")
            continue
        lines.append(f"- learned settled on {place}: {count} ({', '.join(map(str, seeds))}){span}")
    gap = [r["sampled_same_windows"]["bpb"] - r["greedy"]["bpb"] for r in learned.values()]
    lines.append(f"- learned, sampled - greedy cuts per seed: {min(gap):+.4f} to {max(gap):+.4f}")
    return lines


def place_name(place: str) -> str:
    """A settled place as the pages name it: the JSON's key, "None" written out."""
    return "no word place" if place == "None" else place


def secondary_of(analysis: dict) -> list[str]:
    """The registered secondary figures of one look, uncorrected and named so."""
    lines = ["", "Secondary, uncorrected:", ""]
    u = analysis.get("learned_minus_uniform")
    if u:
        lines.append(
            f"- learned - uniform: {u['diff']:+.4f} ({u['se']:.4f}), 95% CI [{u['ci95'][0]:+.4f}, {u['ci95'][1]:+.4f}], "
            f"p {u['p']:.4f}, {u['n']} seeds"
        )
    g = analysis["sampled_minus_greedy"]
    lines.append(
        f"- learned, sampled - greedy cuts on the same windows: {g['diff']:+.4f} ({g['se']:.4f}), "
        f"95% CI [{g['ci95'][0]:+.4f}, {g['ci95'][1]:+.4f}], {g['n']} seeds (greedy rate {g['greedy_rate']:.3f})"
    )
    lines += ["", "| where learned settled | seeds | test bpb (s.e.) |", "|---|---|---|"]
    for place, v in sorted(analysis["places"].items(), key=lambda kv: -kv[1]["seeds"]):
        se = f"{v['se']:.4f}" if v["seeds"] > 1 else "-"
        lines.append(f"| {place_name(place)} | {v['seeds']} | {v['bpb']:.4f} ({se}) |")
    for d in analysis["places_differences"]:
        lines.append(
            f"\nBy place, {' - '.join(map(place_name, d['between'].split(' - ')))}: {d['diff']:+.4f} ({d['se']:.4f}), a difference of means, not a test."
        )
    return lines


def table_of(analysis: dict) -> list[str]:
    lines = []
    for scoring in ("sampled", "greedy"):
        r = analysis[scoring]
        lines += [
            "",
            f"Learned scored with {scoring} cuts: the test that learned is below every rule "
            f"(intersection-union) gives p {r['primary']['p']:.4f}, "
            f"{'accepted' if r['primary']['learned_below_every_rule'] else 'not accepted'} at {r['primary']['alpha']}.",
            "",
            "| learned - rule | diff (s.e.) | 95% CI | 90% CI | p (Holm) | TOST p (Holm) | reads |",
            "|---|---|---|---|---|---|---|",
        ]
        for rule, d in r["rules"].items():
            lines.append(
                f"| {rule} | {d['diff']:+.4f} ({d['se']:.4f}) | [{d['ci95'][0]:+.4f}, {d['ci95'][1]:+.4f}] "
                f"| [{d['ci90'][0]:+.4f}, {d['ci90'][1]:+.4f}] | {d['p']:.4f} ({d['p_holm']:.4f}) "
                f"| {d['p_tost']:.4f} ({d['p_tost_holm']:.4f}) | {d['reads']} |"
            )
    return lines


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    look = next(iter(reversed(result["looks"].values())))
    rules = look["sampled"]["rules"]
    fig, ax = plt.subplots(figsize=(6.4, 0.6 + 0.5 * len(rules)))
    for i, (rule, d) in enumerate(rules.items()):
        ax.scatter(d["per_seed"], [i] * len(d["per_seed"]), s=10, color="0.6", zorder=2)
        ax.errorbar(d["diff"], i, xerr=d["ci95"][1] - d["diff"], fmt="o", color="C0", capsize=3, zorder=3)
    ax.axvspan(-MARGIN, MARGIN, color="C2", alpha=0.12, label=f"equivalence margin +-{MARGIN}")
    ax.axvline(0, color="k", lw=0.8)
    ax.set_yticks(range(len(rules)), [f"learned - {rule}" for rule in rules])
    ax.invert_yaxis()
    ax.set_xlabel(f"test bpb at rate {RATE}, paired by seed (grey: seeds; bar: 95% CI)")
    name = next(iter(reversed(result["looks"])))
    ax.set_title(f"{SOURCE}, {PRESET}, {STEPS} steps, {len(look['seeds'])} seeds ({name.replace('_', ' ')})")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write(a: argparse.Namespace) -> dict | None:
    """Score every seed whose primary arms have all finished; write the JSON, table and plot."""
    seeds = [s for s in a.seeds if all(finished(a.out, arm, s) for arm in ("learned", *RULES))]
    if len(seeds) < 2:
        return None
    units = [(arm, s) for s in seeds for arm in ARMS if finished(a.out, arm, s)]
    scores = {u: score(a, *u) for u in units}
    command = ["python", "docs/results/preregistered.py", *(str(x) for x in sys.argv[1:])]
    result = {
        "command": " ".join(command), "registration": REGISTRATION, "registration_commit": registration_commit(),
        "commit": a.commit, "source": SOURCE, "preset": PRESET, "steps": STEPS, "eval_bytes": EVAL_BYTES,
        "rate": RATE, "tolerance": TOLERANCE, "margin": MARGIN, "seeds": seeds, "variants": {arm: SPEC.get(arm, arm) for arm in ARMS},
        "run_minutes": sum(run_minutes(run_dir(a.out, arm, s)) for arm, s in units),
        "arms": arm_table(scores, seeds), "looks": looks(scores, seeds, a.seeds),
    }  # fmt: skip
    a.json.write_text(json.dumps(result, indent=2) + "\n")
    a.json.with_name(a.json.stem + "-table.md").write_text(markdown(result))
    plot(result, a.json.with_suffix(".png"))
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--first-seed", type=int, default=FIRST_SEED)
    p.add_argument("--seeds", type=int, default=SEEDS, help="how many seeds from --first-seed")
    p.add_argument("--block", type=int, default=2, help="seeds trained together (every arm), before the next block")
    p.add_argument("--jobs", type=int, default=2, help="runs at once, one CPU thread each")
    p.add_argument("--no-train", action="store_true", help="score the finished runs only")
    p.add_argument("--commit", default=git_commit(), help="the commit the runs trained on (default: this checkout's)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--json", type=Path, required=True)
    a = p.parse_args()
    a.seeds = list(range(a.first_seed, a.first_seed + a.seeds))
    blocks = [a.seeds[i : i + a.block] for i in range(0, len(a.seeds), a.block)]
    for block in [] if a.no_train else blocks:
        if not all(finished(a.out, arm, s) for arm in ARMS for s in block):
            train_block(a, block)
        result = write(a)
        if result:
            print(f"{len(result['seeds'])} seeds scored: {a.json}", flush=True)
        if result and stopped_early(result):
            print("the interim look's primary test is below the stopping level: the study stops (registered)")
            break
    result = write(a)
    print(markdown(result) if result else "fewer than two seeds with every primary arm finished")


if __name__ == "__main__":
    main()
