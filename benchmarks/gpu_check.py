"""The measuring half of scripts/gpu_check.sh: a throughput table and the final report.

    python benchmarks/gpu_check.py throughput --device cuda --presets 40M,147M --out DIR
    python benchmarks/gpu_check.py report --out DIR

`throughput`: for each preset and boundary strategy (learned, uniform), a training step
(forward + loss + backward + AdamW; bf16 autocast on CUDA, fp32 weights) timed as the median
of `--steps` steps after warm-up: bytes/s, MFU against the dense bf16 peak (`--peak-tflops`,
989 for an H200 SXM; FLOPs counted analytically by benchmarks/throughput.flops_per_byte) and
peak memory (CUDA: max_memory_allocated; CPU: the process's peak resident set). Presets in
`--compile-presets` are also timed under torch.compile (learntok.distributed.compile_model),
whose warm-up includes the compilation and one recompile for the token count.
`--toy` shrinks every preset to a toy width and depth (CI on CPU). Writes DIR/throughput.json.

`report`: merges DIR/*.json parts (tests, throughput, torchrun) into DIR/gpu_check.json and
DIR/gpu_check.md.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from throughput import flops_per_byte, timed  # the sibling benchmark script

from learntok import AUNet, ModelConfig, ObjectiveConfig
from learntok.config import load_config
from learntok.distributed import compile_model
from learntok.objective import loss

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


def markdown(parts: dict) -> str:
    lines = ["# GPU check", ""]
    tests = parts.get("tests", {})
    lines += [
        f"Tests: {tests.get('summary', 'not run')} (exit {tests.get('rc', '-')}, {tests.get('seconds', 0):.0f} s)",
        "",
    ]
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
    p.add_argument("command", choices=("throughput", "report"))
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
    args = p.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    throughput(args) if args.command == "throughput" else report(args)


if __name__ == "__main__":
    main()
