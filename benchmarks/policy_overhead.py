"""What the learned policy adds to a training step, measured side by side in one run.

1. Training step (forward + loss + backward + AdamW) with the learned policy sampling its
   boundaries, against the same model given prescribed boundaries at the same rate
   (goal: at most 1.05x), for w = 1 and w = 8.
2. The learned policy against `uniform` boundaries (goal: at most 1.02x), with the token level
   on packed rows (the model's path) and on rows padded to the batch's largest token count
   (the reference it replaced): sampled boundaries vary in count by row, uniform ones do not,
   so padding charged the learned policy for the longest row.
3. The boundary sampler (sample_scan) against a naive Python loop over bytes and rows.

    python benchmarks/policy_overhead.py [--preset tiny] [--batch 16] [--seq 256] [--reps 20]

Steps are interleaved (learned, prescribed, learned, ...) and the median is reported, so
background load hits both sides alike. Results go to stdout as a Markdown table (and --json).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from unittest import mock

import torch

from learntok import AUNet, ModelConfig, ObjectiveConfig
from learntok.boundaries.learned import sample_reference, sample_scan
from learntok.boundaries.options import kept_options
from learntok.model.aunet import token_level_padded
from learntok.model.objective import loss


def make_model(w: int, d: int, heads: int, layers: tuple[int, int, int], boundary: str = "learned") -> AUNet:
    torch.manual_seed(0)
    return AUNet(
        ModelConfig(
            d_model=d,
            n_heads=heads,
            n_down=layers[0],
            n_mid=layers[1],
            n_up=layers[2],
            boundary=boundary,
            strategy=kept_options({"window": w}, boundary),
        )
    )


def step_fn(model, opt, x, boundaries):
    def run():
        out = model(x, boundaries=boundaries)
        total, _ = loss(out, x, ObjectiveConfig())
        opt.zero_grad(set_to_none=True)
        total.backward()
        opt.step()

    return run


CLOCK = {"wall": time.perf_counter, "cpu": time.process_time}
clock = CLOCK["wall"]  # set once from --clock in main()


def timed(fn) -> float:
    t0 = clock()
    fn()
    return clock() - t0


def step_ratio(w, args) -> dict:
    model = make_model(w, args.d_model, args.heads, (1, 2, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randint(0, 256, (args.batch, args.seq))
    x[:, 0] = 256
    with torch.no_grad():
        fixed = model(x).boundaries  # same shapes and rate as sampling
    learned, prescribed = step_fn(model, opt, x, None), step_fn(model, opt, x, fixed)
    for _ in range(3):
        learned(), prescribed()
    tl, tp = [], []
    for _ in range(args.reps):
        tl.append(timed(learned))
        tp.append(timed(prescribed))
    ml, mp = statistics.median(tl), statistics.median(tp)
    return {"w": w, "learned_ms": 1e3 * ml, "prescribed_ms": 1e3 * mp, "ratio": ml / mp}


def padded(fn):
    """The same step with the token level on padded rows (the reference `token_level_padded`)."""

    def run():
        with mock.patch.object(AUNet, "token_level", token_level_padded):
            fn()

    return run


def versus_uniform(w, args) -> dict:
    """Learned (sampling) against uniform boundaries, token level packed and padded, interleaved."""
    x = torch.randint(0, 256, (args.batch, args.seq))
    x[:, 0] = 256
    fns = []
    for boundary in ("learned", "uniform"):
        model = make_model(w, args.d_model, args.heads, (1, 2, 1), boundary)
        fns.append(step_fn(model, torch.optim.AdamW(model.parameters(), lr=1e-4), x, None))
    fns += [padded(f) for f in fns]
    for f in fns:
        f()
    times = [[] for _ in fns]
    for _ in range(args.reps):
        for t, f in zip(times, fns):
            t.append(timed(f))
    lp, up, ld, ud = (statistics.median(t) for t in times)
    return {
        "w": w,
        "learned_ms": 1e3 * lp,
        "uniform_ms": 1e3 * up,
        "ratio": lp / up,
        "padded_learned_ms": 1e3 * ld,
        "padded_uniform_ms": 1e3 * ud,
        "padded_ratio": ld / ud,
    }


def sampler_ratio(w, args) -> dict:
    g = torch.Generator().manual_seed(0)
    v = torch.randn(args.batch, args.seq, w, generator=g) * 20
    u = torch.rand(args.batch, args.seq, generator=g).clamp(1e-6, 1 - 1e-6)
    fast = statistics.median(timed(lambda: sample_scan(v, u, 1 / 16, -1.386, 6.0)) for _ in range(5))
    slow = timed(lambda: sample_reference(v, u, 1 / 16, -1.386, 6.0))
    return {"w": w, "scan_ms": 1e3 * fast, "python_loop_ms": 1e3 * slow, "speedup": slow / fast}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", default=None)
    p.add_argument(
        "--clock",
        choices=sorted(CLOCK),
        default="wall",
        help="cpu: the process's CPU time (use with --threads 1 on a machine shared with other jobs)",
    )
    args = p.parse_args()
    global clock
    clock = CLOCK[args.clock]
    torch.set_num_threads(args.threads)
    steps = [step_ratio(w, args) for w in (1, 8)]
    uniform = [versus_uniform(w, args) for w in (1, 8)]
    samplers = [sampler_ratio(w, args) for w in (1, 4, 8)]
    print(
        f"B={args.batch} T={args.seq} D={args.d_model}, torch {torch.__version__}, {args.threads} threads, "
        f"{args.clock} clock\n"
    )
    print("| w | learned step (ms) | prescribed step (ms) | ratio |\n|---|---|---|---|")
    for r in steps:
        print(f"| {r['w']} | {r['learned_ms']:.1f} | {r['prescribed_ms']:.1f} | {r['ratio']:.3f}x |")
    print(
        "\n| w | learned step (ms) | uniform step (ms) | learned / uniform | padded: learned (ms) | "
        "padded: uniform (ms) | padded: learned / uniform |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in uniform:
        print(
            f"| {r['w']} | {r['learned_ms']:.1f} | {r['uniform_ms']:.1f} | {r['ratio']:.3f}x | "
            f"{r['padded_learned_ms']:.1f} | {r['padded_uniform_ms']:.1f} | {r['padded_ratio']:.3f}x |"
        )
    print("\n| w | sample_scan (ms) | Python loop (ms) | speed-up |\n|---|---|---|---|")
    for r in samplers:
        print(f"| {r['w']} | {r['scan_ms']:.2f} | {r['python_loop_ms']:.0f} | {r['speedup']:.0f}x |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"step": steps, "versus_uniform": uniform, "sampler": samplers, "args": vars(args)}, f, indent=2)


if __name__ == "__main__":
    main()
