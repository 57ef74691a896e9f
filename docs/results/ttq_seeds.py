"""Time to quality at three seeds: learntok (1-4-1, learned, rate 0.2), learntok with narrow bytes
(`@narrow`: bytes 144 wide, tokens 272, 1-3-1, learned, rate 0.2), MEGABYTE and H-Net, each at its
best learning rate from the sweep, ten CPU-minutes each at 1 thread, side by side; and, at seed 0
in the same window of time, an exploration of learntok's recipe (a lighter early-exit weight, a
1-5-1 layout at equal parameters, a cosine schedule for learntok and MEGABYTE).

    M=learntok-learned-0.2,megabyte,hnet
    PYTHONPATH=. python benchmarks/peers.py --minutes 10 --clock cpu --parallel --shapes 512x8 --threads 1 \\
      --models $M --lr-of learntok-learned-0.2=2e-3,megabyte=2e-3,hnet=4e-3 --seeds 0,1,2 \\
      --curve-every 1 --json ttq-seeds.json
    N='learntok-learned-0.2@1-3-1+model.d_model=272+model.n_heads=8+model.d_bytes=144'   # = @narrow
    PYTHONPATH=. python benchmarks/peers.py --minutes 10 --clock cpu --parallel --shapes 512x8 --threads 1 \\
      --models "$N" --lrs 2e-3 --seeds 0,1,2 --curve-every 1 --json ttq-narrow.json
    E1='learntok-learned-0.2+objective.lambda_early=0.03'
    E2='learntok-learned-0.2@1-5-1+model.d_model=204+model.n_heads=6'
    PYTHONPATH=. python benchmarks/peers.py --minutes 10 --clock cpu --parallel --shapes 512x8 --threads 1 \\
      --models "learntok-learned-0.2,megabyte,$E1,$E2" --lrs 2e-3 \\
      --schedule-of learntok-learned-0.2=cosine,megabyte=cosine --seeds 0 --curve-every 1 --json ttq-explore.json
    python docs/results/ttq_seeds.py ttq-seeds.json ttq-narrow.json ttq-explore.json --commit COMMIT \\
      --out docs/results/peers-ttq-seeds.json --plot docs/results/peers-ttq-seeds.png

The three peers.py runs went at once (19 processes on 2 cores: each stops at the same CPU budget,
so the load is shared alike). Prints the table over seeds, each arm paired by seed with MEGABYTE at
the same schedule (the exploration's constant-schedule arms pair with the main run's seed-0 MEGABYTE).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
_spec = importlib.util.spec_from_file_location("peers", ROOT / "benchmarks" / "peers.py")
peers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(peers)


def merged_rows(main: dict, extras: list[dict]) -> list[dict]:
    """The main run's rows, and each further run's rows that are not an earlier run's arms again."""
    rows = list(main["rows"])
    seen = {(peers.group_key(r), r.get("seed", 0)) for r in rows}
    for i, extra in enumerate(extras, 1):
        for r in extra.get("rows", []):
            if (peers.group_key(r), r.get("seed", 0)) not in seen:
                seen.add((peers.group_key(r), r.get("seed", 0)))
                rows.append({**r, "run": f"run {i + 1}"})
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("main", help="the three-seed run's --json")
    p.add_argument("extra", nargs="*", help="further runs' --json (the narrow arm, the exploration)")
    p.add_argument("--commit", required=True, help="the commit both runs were at")
    p.add_argument("--out", required=True)
    p.add_argument("--plot", default=None)
    args = p.parse_args()
    main_run = json.loads(Path(args.main).read_text())
    extras = [json.loads(Path(f).read_text()) for f in args.extra]
    rows = merged_rows(main_run, extras)
    table = peers.ttq_seed_table(rows, "megabyte")
    print(table)
    seeds = sorted({r.get("seed", 0) for r in rows})
    out = {
        "command": " ".join(["python", *sys.argv]),
        "commit": args.commit,
        "seeds": seeds,
        "table": table,
        "run_commits": [r.get("commit", "not recorded") for r in (main_run, *extras)],  # each run's own
        "args": {"main": main_run["args"], "extra": [e["args"] for e in extras]},
        "load": {"main": main_run["load"], "extra": [e["load"] for e in extras]},
        "rows": rows,
    }
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    if args.plot:
        peers.plot_curves(rows, args.plot)


if __name__ == "__main__":
    main()
