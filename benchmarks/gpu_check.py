"""The measuring half of scripts/gpu_check.sh: a throughput table and the final report.

    python benchmarks/gpu_check.py throughput --device cuda --presets 40M,147M --out DIR
    python benchmarks/gpu_check.py pair --device cuda --preset 40M --seconds 135 --out DIR
    python benchmarks/gpu_check.py report --out DIR

`throughput`: for each preset and boundary strategy (learned, uniform), a training step
(forward + loss + backward + AdamW; bf16 autocast on CUDA, fp32 weights) timed as the median
of `--steps` steps after warm-up: bytes/s, MFU against the dense bf16 peak (`--peak-tflops`,
989 for an H200 SXM; FLOPs counted analytically by benchmarks/throughput.flops_per_byte) and
peak memory (CUDA: max_memory_allocated; CPU: the process's peak resident set). Presets in
`--compile-presets` are also timed under torch.compile (learntok.run.distributed.compile_model),
whose warm-up includes the compilation and one recompile for the token count.
`--toy` shrinks every preset to a toy width and depth (CI on CPU). Writes DIR/throughput.json.

`pair`: learned against uniform boundaries at the preset's recipe, one seed (identical initial
backbones, checked by digest), each arm trained for the steps its measured step time fits in
`--seconds`, then evaluated on val. Writes DIR/pair.json and the runs under DIR/pair/.

`report`: merges DIR/*.json parts (meta, tests, pair, throughput, torchrun) into
DIR/gpu_check.json and DIR/gpu_check.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import shutil
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from throughput import flops_per_byte, timed  # the sibling benchmark script

from learntok import AUNet, ModelConfig, ObjectiveConfig
from learntok.run.checkpoint import load_checkpoint
from learntok.run.config import RunConfig, load_config
from learntok.data import ByteData
from learntok.run.distributed import compile_model, init_distributed
from learntok.util.errors import CheckpointError, ConfigError, DataError, TrainingDiverged
from learntok.model.objective import loss, objective_for
from learntok.run import metrics_log
from learntok.util.runtime import resolve_dtype, seed_everything
from learntok.run.distributed import fit_strategy
from learntok.train.loop import train
from learntok.train.step import Engine, build_optimizer, lr_at, rank_batches, train_step

SHAPES = {"40M": (16, 4096), "147M": (8, 4096)}  # (B, T) per step on one GPU
TOY = dict(d_model=32, n_heads=2, n_down=1, n_mid=1, n_up=1, attn_window=16)


def model_config(preset: str, strategy: str, toy: bool) -> ModelConfig:
    cfg = load_config(preset, overrides=[f"model.boundary={strategy}"]).model  # the strategy's own options
    return ModelConfig(**{**cfg.__dict__, **(TOY if toy else {})})


def peak_memory(device: torch.device) -> float:
    """Bytes: CUDA's peak allocation since the last reset; on CPU the process's peak RSS."""
    if device.type == "cuda":
        return float(torch.cuda.max_memory_allocated(device))
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024.0


def time_steps(model, x: torch.Tensor, device: torch.device, warmup: int, steps: int) -> float:
    """Median seconds of a training step."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ocfg = ObjectiveConfig()

    def step():
        with torch.autocast(device.type, torch.bfloat16, enabled=device.type == "cuda"):
            out = model(x)
        total, _ = loss(out, x, ocfg)
        opt.zero_grad(set_to_none=True)
        total.backward()
        opt.step()

    for _ in range(warmup):
        step()
    return statistics.median(timed(step, device) for _ in range(steps))


def measure(preset: str, strategy: str, compiled: bool, args, device: torch.device) -> dict:
    cfg = model_config(preset, strategy, args.toy)
    B, T = (args.batch, args.seq) if args.toy else SHAPES.get(preset, (args.batch, args.seq))
    torch.manual_seed(0)
    model = AUNet(cfg).to(device)
    n_params = model.num_params()
    runner = compile_model(model) if compiled else model
    x = torch.randint(0, 256, (B, T), device=device)
    x[:, 0] = 256
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    t0 = time.perf_counter()
    step = time_steps(runner, x, device, args.warmup + (3 if compiled else 0), args.steps)
    bps = B * (T - 1) / step
    return {
        "preset": preset,
        "strategy": strategy,
        "compile": compiled,
        "params": n_params,
        "B": B,
        "T": T,
        "step_s": step,
        "bytes_per_s": bps,
        "mfu": flops_per_byte(cfg, T) * bps / (args.peak_tflops * 1e12),
        "peak_mem_gib": peak_memory(device) / 2**30,
        "wall_s": time.perf_counter() - t0,
    }


def throughput(args) -> None:
    """Measure every configuration, rewriting DIR/throughput.json after each (a time limit keeps what was done)."""
    device = torch.device(args.device)
    head = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "peak_tflops": args.peak_tflops,
        "toy": args.toy,
        "rows": [],
    }
    for preset in args.presets.split(","):
        for compiled in (False, True) if preset in args.compile_presets.split(",") else (False,):
            for strategy in ("learned", "uniform"):
                head["rows"].append(measure(preset, strategy, compiled, args, device))
                print(json.dumps(head["rows"][-1]), flush=True)
                Path(args.out, "throughput.json").write_text(json.dumps(head, indent=2))


# ---------------------------------------------------------------- the learned-against-uniform pair

ARMS = ("learned", "uniform")  # the paper's question: does the learned policy beat fixed-size chunks?


def arm_config(args, arm: str, steps: int = 0, warmup: int = 0) -> RunConfig:
    """The preset's recipe (the paper's at 40M: learntok/configs/40M.toml) for one arm; with `steps`,
    a run of that many steps whose warm-up is `warmup` steps. Only the boundary strategy differs
    between the arms: the seed, data, batch order and optimizer are the same."""
    over = [
        f"model.boundary={arm}",
        f"train.seed={args.seed}",
        f"data.source={args.source}",
        f"system.device={args.device}",
        f"log.eval_bytes={args.eval_bytes}",
        f"log.log_every={args.log_every}",
        "log.eval_every=0",
        "log.segment_every=0",
        "checkpoint.every=0",  # checkpoints at step 0 (the initial weights) and the end only
    ]
    if args.toy:
        over += [f"model.{k}={v}" for k, v in TOY.items()]
        over += [f"train.batch_size={args.batch}", f"train.seq_len={args.seq}", "train.micro_batch_size=0"]
    if steps:
        over += [f"train.steps={steps}", f"optim.warmup_steps={warmup}", "optim.warmup_bytes=0"]
    return load_config(args.preset, overrides=over)


def step_seconds(cfg: RunConfig, data: ByteData, warmup: int, steps: int) -> float:
    """Median seconds of one training step of `cfg` as `learntok train` runs it (its batches,
    micro-batches, optimizer and autocast), from the run's initial weights."""
    env = init_distributed(cfg.system.device)
    seed_everything(cfg.train.seed)
    model = AUNet(cfg.model).to(env.device)
    fit_strategy(model, data, env)
    optimizer = build_optimizer(model, cfg.optim, env.device)
    eng = Engine(model, model, model, optimizer, env, resolve_dtype(cfg.system.dtype, env.device))
    objective = objective_for(cfg.objective, model.strategy.has_policy)

    def step(i: int) -> None:
        xs, seeds = rank_batches(data, i, cfg, env)
        train_step(eng, xs, objective, cfg.optim, lr_at(i, cfg.optim, cfg.train.steps), seeds)

    for i in range(warmup):
        step(i)
    return statistics.median(timed(lambda i=i: step(warmup + i), env.device) for i in range(steps))


def budget_steps(budget_s: float, step_s: float, max_steps: int) -> int:
    """Steps that fit `budget_s` seconds of training at `step_s` a step (at least 1, at most max_steps; 0: no cap)."""
    steps = max(1, int(budget_s / step_s))
    return min(steps, max_steps) if max_steps > 0 else steps


def backbone_digest(state: dict[str, torch.Tensor]) -> str:
    """sha256 of every tensor outside the strategy's own module (names, dtypes, shapes, values):
    equal digests mean two arms start from bit-identical backbones (tests/test_identical_init.py)."""
    h = hashlib.sha256()
    for name in sorted(k for k in state if not k.startswith("strategy.")):
        t = state[name].detach().cpu().contiguous()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)};".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def training_seconds(run_dir: Path) -> float:
    """Seconds the run spent in training steps, from its metrics: each log window's bytes over its
    bytes/s (windows exclude validation and checkpoints, so this is the wall-clock the arms share)."""
    rows, _ = metrics_log.split(metrics_log.read(run_dir))
    seconds, seen = 0.0, 0
    for r in rows:
        if r.get("bytes_per_s"):
            seconds += (r["bytes_seen"] - seen) / r["bytes_per_s"]
            seen = r["bytes_seen"]
    return seconds


def run_arm(args, arm: str, run_dir: Path) -> dict:
    """Calibrate the arm's step time, train it for the steps that fit the budget (the recipe's
    schedule, its warm-up the recipe's fraction of the run), evaluate on val; its figures."""
    recipe = arm_config(args, arm)
    data = ByteData.from_config(recipe.data)
    step_s = step_seconds(recipe, data, args.calib_warmup, args.calib_steps)
    if torch.cuda.is_available():
        torch.cuda.empty_cache()  # the calibration's model and optimizer are gone: their memory is the run's
    steps = budget_steps(args.seconds, step_s, args.max_steps)
    warmup = round(steps * recipe.optim.warmup_steps / recipe.train.steps)
    cfg = arm_config(args, arm, steps, warmup)
    t0 = time.perf_counter()
    summary = train(cfg, run_dir, progress=False)
    wall = time.perf_counter() - t0
    initial = backbone_digest(load_checkpoint(run_dir / "checkpoints" / "step_0000000").model_state)
    if not args.keep_checkpoints:  # hundreds of MB at 40M: the figures and metrics are what is kept
        shutil.rmtree(run_dir / "checkpoints")
    bytes_seen = steps * cfg.train.bytes_per_step
    return {
        "boundary": arm,
        "params": summary["params"],
        "calibrated_step_s": step_s,
        "steps": steps,
        "warmup_steps": warmup,
        "train_seconds": training_seconds(run_dir),
        "wall_s": wall,
        "bytes_seen": bytes_seen,
        "epochs": bytes_seen / data.n_bytes("train"),
        "val_bpb": summary["val_bpb"],
        "val_boundary_rate": summary["val_boundary_rate"],
        "val_whitespace_rate": summary["val_whitespace_rate"],
        "val_bytes": summary["val_bytes"],
        "initial_backbone_sha256": initial,
    }


def pair(args) -> None:
    """Both arms at one time budget each, rewriting DIR/pair.json after each (a time limit keeps what was done)."""
    out = Path(args.out)
    base = arm_config(args, ARMS[0])
    head = {
        "preset": args.preset,
        "toy": args.toy,
        "source": args.source,
        "seed": args.seed,
        "budget_s": args.seconds,
        "device": torch.cuda.get_device_name() if base.system.device.startswith("cuda") else "cpu",
        "recipe": {
            "batch_size": base.train.batch_size,
            "seq_len": base.train.seq_len,
            "micro_batch_size": base.train.micro_batch_size,
            "lr": base.optim.lr,
            "warmup_fraction": base.optim.warmup_steps / base.train.steps,
            "target_rate": base.model.target_rate,
        },
        "arms": {},
    }
    for arm in ARMS:
        shutil.rmtree(out / "pair" / arm, ignore_errors=True)  # this command's own folder: a rerun starts afresh
        head["arms"][arm] = run_arm(args, arm, out / "pair" / arm)
        print(json.dumps(head["arms"][arm]), flush=True)
        digests = {a["initial_backbone_sha256"] for a in head["arms"].values()}
        head["identical_init"] = len(digests) == 1 if len(head["arms"]) == len(ARMS) else None  # None: one arm so far
        if head["identical_init"]:
            head["delta_val_bpb"] = head["arms"]["learned"]["val_bpb"] - head["arms"]["uniform"]["val_bpb"]
        (out / "pair.json").write_text(json.dumps(head, indent=2))


def markdown_pair(pair: dict) -> list[str]:
    """The pair's table: each arm at the same seconds of training, then the verdict line."""
    if not pair:
        return ["Learned against uniform: not run", ""]
    rec = pair["recipe"]
    lines = [
        f"## {pair['preset']}: learned against uniform, {pair['budget_s']:g} s of training each"
        + (" (toy sizes)" if pair["toy"] else ""),
        "",
        f"On {pair['device']}, data `{pair['source']}`, seed {pair['seed']}; the recipe's batch "
        f"{rec['batch_size']} x {rec['seq_len']} (micro-batch {rec['micro_batch_size'] or rec['batch_size']}), "
        f"lr {rec['lr']:g}, warm-up {100 * rec['warmup_fraction']:.1f}% of the steps, target rate {rec['target_rate']:g}.",
        "",
        "| boundaries | params | steps | train s | bytes seen | epochs | val bpb | val boundary rate | val whitespace rate |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for a in pair["arms"].values():
        lines.append(
            f"| {a['boundary']} | {a['params'] / 1e6:.1f}M | {a['steps']} | {a['train_seconds']:.1f} | "
            f"{a['bytes_seen']:,} | {a['epochs']:.2f} | {a['val_bpb']:.4f} | {a['val_boundary_rate']:.3f} | "
            f"{a['val_whitespace_rate']:.3f} |"
        )
    digest = next(iter(pair["arms"].values()))["initial_backbone_sha256"][:12]
    same = {True: "yes", False: "NO", None: "not known (one arm ran)"}[pair.get("identical_init")]
    lines += ["", f"Identical initial weights: {same} (backbone sha256 {digest}...)."]
    if "delta_val_bpb" in pair:
        lines.append(f"Learned minus uniform: {pair['delta_val_bpb']:+.4f} val bpb at equal wall-clock.")
    return [*lines, ""]


def markdown(parts: dict) -> str:
    meta = parts.get("meta", {})
    lines = [
        "# GPU check",
        "",
        f"Commit {meta.get('commit', 'unknown')}; command `{meta.get('command', '-')}`; "
        f"seeds {json.dumps(meta.get('seeds'))}; started {meta.get('started', '-')}.",
        "",
    ]
    tests = parts.get("tests", {})
    lines += [
        f"Tests: {tests.get('summary', 'not run')} (exit {tests.get('rc', '-')}, {tests.get('seconds', 0):.0f} s)",
        "",
    ]
    lines += markdown_pair(parts.get("pair", {}))
    tp = parts.get("throughput")
    if tp:
        lines += [
            f"Throughput on {tp['device']}, torch {tp['torch']}, bf16 autocast on CUDA; "
            f"MFU against {tp['peak_tflops']:g} TFLOP/s" + (" (toy sizes)" if tp["toy"] else ""),
            "",
            "| preset | params | boundaries | compile | B x T | step (s) | bytes/s | MFU | peak memory (GiB) |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in tp["rows"]:
            lines.append(
                f"| {r['preset']} | {r['params'] / 1e6:.1f}M | {r['strategy']} | "
                f"{'on' if r['compile'] else 'off'} | "
                f"{r['B']} x {r['T']} | {r['step_s']:.3f} | {r['bytes_per_s']:,.0f} | {100 * r['mfu']:.1f}% | "
                f"{r['peak_mem_gib']:.2f} |"
            )
        lines.append("")
    run = parts.get("torchrun", {})
    lines += [
        f"torchrun (1 process): exit {run.get('rc', '-')}, {run.get('seconds', 0):.0f} s, "
        f"last metrics: {json.dumps(run.get('last_metrics'))}",
        "",
    ]
    return "\n".join(lines)


def report(args) -> None:
    out = Path(args.out)
    parts = {p.stem: json.loads(p.read_text()) for p in sorted(out.glob("*.json")) if p.stem != "gpu_check"}
    (out / "gpu_check.json").write_text(json.dumps(parts, indent=2))
    (out / "gpu_check.md").write_text(markdown(parts))
    print(markdown(parts))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=("throughput", "pair", "report"))
    p.add_argument("--out", required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--presets", default="40M,147M")
    p.add_argument("--compile-presets", default="40M")
    p.add_argument("--toy", action="store_true", help="toy widths and depths (CPU CI)")
    p.add_argument("--batch", type=int, default=2, help="B for toy runs and presets without a shape")
    p.add_argument("--seq", type=int, default=64, help="T for toy runs and presets without a shape")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--peak-tflops", type=float, default=989.0, help="dense bf16 peak of the GPU (H200 SXM: 989)")
    p.add_argument("--preset", default="40M", help="pair: the preset both arms train at")
    p.add_argument("--source", default="python-stdlib", help="pair: the data source (a built-in corpus or a path)")
    p.add_argument("--seed", type=int, default=0, help="pair: the seed of both arms (init, batches, boundaries)")
    p.add_argument("--seconds", type=float, default=150.0, help="pair: seconds of training per arm")
    p.add_argument("--max-steps", type=int, default=0, help="pair: cap on each arm's steps (0: none)")
    p.add_argument("--calib-steps", type=int, default=5, help="pair: timed steps that measure an arm's step time")
    p.add_argument("--calib-warmup", type=int, default=3, help="pair: steps before those")
    p.add_argument("--eval-bytes", type=int, default=4_000_000, help="pair: validation bytes per arm")
    p.add_argument("--log-every", type=int, default=25, help="pair: steps between metrics rows")
    p.add_argument("--keep-checkpoints", action="store_true", help="pair: keep each arm's checkpoints")
    args = p.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    try:
        {"throughput": throughput, "pair": pair, "report": report}[args.command](args)
    except (ConfigError, DataError, CheckpointError, TrainingDiverged) as e:
        print(f"learntok: error: {' '.join(str(e).split())}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
