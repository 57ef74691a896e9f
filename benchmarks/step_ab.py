"""A/B of the training step against the code of another commit, interleaved in one process:
the functions and methods of the named modules are swapped for that commit's, step by step.

    python benchmarks/step_ab.py --base HEAD~1 [--modules learntok.nn.layers] [--size 4M]
                                 [--batch 8 --seq 1024] [--rate 0.2] [--reps 20] [--json out.json]

The model and the step are benchmarks/peers.py's learntok (its `tiny` recipe at the size's width
and layout, learntok.train.step.train_step). Each arm has its own copy of the model, built alike, and
its own optimizer; after one warm-up step each, the arms alternate (base, new, base, new, ...)
and the median CPU time (time.process_time) of each is reported with their ratio, so load
changes on a shared machine hit both alike. The base commit's module text is read with
`git show` and loaded beside the current one; every function defined at its top level, and
every method of a class it defines, that the current module also has, is swapped in while the
base arm runs (names only the current code has are left as they are).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import statistics
import subprocess
import sys
import types
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from profile_levels import CPU, recipe  # the sibling benchmark scripts
from throughput import batch, timed

from learntok import AUNet
from learntok.run.distributed import DistEnv
from learntok.train.step import Engine, build_optimizer, train_step

ROOT = Path(__file__).resolve().parents[1]


def base_module(name: str, rev: str) -> types.ModuleType:
    """Module `name` as it was at commit `rev`, loaded under a name of its own."""
    path = name.replace(".", "/") + ".py"
    text = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT, capture_output=True, text=True, check=True)
    mod = types.ModuleType(f"base_{name.replace('.', '_')}")
    mod.__file__ = str(ROOT / path)
    exec(compile(text.stdout, mod.__file__, "exec"), mod.__dict__)
    return mod


def swaps(current: types.ModuleType, base: types.ModuleType) -> list[tuple[object, str, object]]:
    """(owner, attribute, base value) for every top-level function and class method in both."""
    out = []
    for key, old in vars(base).items():
        new = getattr(current, key, None)
        if not getattr(old, "__module__", None) == base.__name__:
            continue  # imported, not defined there
        if isinstance(old, types.FunctionType) and isinstance(new, types.FunctionType):
            out.append((current, key, old))
        elif isinstance(old, type) and isinstance(new, type):
            for attr, fn in vars(old).items():
                if isinstance(fn, types.FunctionType) and isinstance(vars(new).get(attr), types.FunctionType):
                    out.append((new, attr, fn))
    return out


@contextlib.contextmanager
def swapped(pairs: list[tuple[object, str, object]]):
    saved = [(owner, attr, getattr(owner, attr)) for owner, attr, _ in pairs]
    for owner, attr, value in pairs:
        setattr(owner, attr, value)
    try:
        yield
    finally:
        for owner, attr, value in saved:
            setattr(owner, attr, value)


def arm(cfg, x: torch.Tensor):
    torch.manual_seed(0)
    model = AUNet(cfg.model)
    eng = Engine(model, model, model, build_optimizer(model, cfg.optim, CPU), DistEnv(0, 1, 0, CPU), None)
    return lambda: train_step(eng, [x], cfg.objective, cfg.optim, 1e-4)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", required=True, help="the commit to compare against")
    p.add_argument("--modules", default="learntok.nn.layers", help="modules to swap, comma-separated")
    p.add_argument("--size", default="4M")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--strategy", default="learned")
    p.add_argument("--rate", type=float, default=0.2)
    p.add_argument("--window", type=int, default=None)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    pairs = []
    for name in args.modules.split(","):
        pairs += swaps(importlib.import_module(name), base_module(name, args.base))
    cfg = recipe(args.size, args.strategy, args.rate, args.window)
    x = batch(args.batch, args.seq)
    base, new = arm(cfg, x), arm(cfg, x)
    times = {"base": [], "new": []}
    for rep in range(args.reps + 1):  # rep 0 warms up
        with swapped(pairs):
            tb = timed(base, CPU, "cpu")
        tn = timed(new, CPU, "cpu")
        if rep:
            times["base"].append(tb)
            times["new"].append(tn)
    med = {k: statistics.median(v) for k, v in times.items()}
    r = {**vars(args), "swapped": [f"{getattr(o, '__name__', o)}.{a}" for o, a, _ in pairs], "median_s": med}
    r["speedup"] = med["base"] / med["new"]
    print(f"swapped from {args.base}: {len(pairs)} functions and methods of {args.modules}")
    print(
        f"base {1e3 * med['base']:.1f} ms, new {1e3 * med['new']:.1f} ms (CPU, median of {args.reps}): "
        f"new is {r['speedup']:.3f}x faster"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=2))


if __name__ == "__main__":
    main()
