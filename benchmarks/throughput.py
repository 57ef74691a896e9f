"""Training throughput: bytes/s and model FLOPs utilisation, the learned policy against uniform
boundaries, the U-Net against a plain byte-level transformer, and step time against T.

    python benchmarks/throughput.py [--threads 2] [--reps 4] [--json out.json]

A step is forward + loss + backward + AdamW, in fp32 on the CPU (bf16 autocast on CUDA).
Variants that are compared are timed interleaved (a, b, a, b, ...) and the median is
reported, so background load hits both alike. Model FLOPs are counted analytically
(`learntok.train.plan.flops_per_byte`): 6 x (matmul parameters) per position at each level (bytes for the
encoder, decoder and heads; tokens, at rate rho*, for the mid blocks) plus attention,
12 x D x (keys attended) per position and layer (forward 4 D per key, backward twice that).
MFU is against the peak of this machine measured as the FLOP/s of a large fp32 matmul.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

from learntok import AUNet, ModelConfig, ObjectiveConfig
from learntok.run.config import load_config
from learntok.nn.layers import RMSNorm, Stack
from learntok.model.objective import loss
from learntok.model.flops import attended, flops_per_byte


def block_params(d: int, ratio: float) -> int:
    """Matmul parameters of one block: qkv + proj (4 D^2) and the gated MLP (3 D h)."""
    return 4 * d * d + 3 * d * max(8, int(round(ratio * d)))


class PlainTransformer(nn.Module):
    """The baseline: byte-level transformer, full causal attention at every layer."""

    def __init__(self, d: int, n_heads: int, n_layers: int, mlp_ratio: float, vocab: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = Stack(n_layers, d, n_heads, mlp_ratio, None, 10000.0)
        self.norm, self.head = RMSNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(x.size(1), device=x.device)
        return self.head(self.norm(self.blocks(self.embed(x), pos)))


def plain_like(cfg: ModelConfig) -> tuple[PlainTransformer, float]:
    """A plain transformer with the AUNet's width and layer count, its MLP ratio (a multiple of
    1/4) chosen so that the parameter counts match best; returns it and the ratio."""
    n_layers = cfg.n_down + cfg.n_mid + cfg.n_up
    target = AUNet(cfg).num_params()
    ratio = min((r / 4 for r in range(4, 64)), key=lambda r: abs(_plain_params(cfg, n_layers, r) - target))
    return PlainTransformer(cfg.d_model, cfg.n_heads, n_layers, ratio, cfg.vocab_size), ratio


def _plain_params(cfg: ModelConfig, n_layers: int, ratio: float) -> int:
    d, V = cfg.d_model, cfg.vocab_size
    return n_layers * (block_params(d, ratio) + 2 * d) + 2 * d * V + d


def plain_flops_per_byte(d: int, n_layers: int, ratio: float, V: int, T: int) -> float:
    return 6 * (n_layers * block_params(d, ratio) + d * V) + 12 * d * n_layers * attended(T, None)


def batch(B: int, T: int, seed: int = 0) -> torch.Tensor:
    """Random bytes of an English-like alphabet (spaces included), BOS first."""
    g = torch.Generator().manual_seed(seed)
    alphabet = torch.tensor(list(b"etaoinshrdlu         cmfwypvbgkjqxz.,"))
    x = alphabet[torch.randint(0, len(alphabet), (B, T), generator=g)]
    x[:, 0] = 256
    return x


def aunet_step(cfg: ModelConfig, x: torch.Tensor, device: torch.device):
    torch.manual_seed(0)
    model = AUNet(cfg).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = x.to(device)

    def run():
        with torch.autocast(device.type, torch.bfloat16, enabled=device.type == "cuda"):
            out = model(x)
        total, _ = loss(out, x, ObjectiveConfig())
        opt.zero_grad(set_to_none=True)
        total.backward()
        opt.step()

    return run, model.num_params()


def plain_step(model: PlainTransformer, x: torch.Tensor, device: torch.device):
    model = model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = x.to(device)

    def run():
        with torch.autocast(device.type, torch.bfloat16, enabled=device.type == "cuda"):
            logits = model(x)
        ce = F.cross_entropy(logits[:, :-1].float().reshape(-1, logits.size(-1)), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        ce.backward()
        opt.step()

    return run


def timed(fn, device, clock: str = "wall") -> float:
    """Seconds of one call of fn: wall clock (CUDA synchronised), or this process's CPU time
    (`cpu`: barely moved by other processes on a shared machine)."""
    now = time.process_time if clock == "cpu" else time.perf_counter
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = now()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return now() - t0


def interleaved(fns: list, reps: int, device, warmup: int = 1, clock: str = "wall") -> list[float]:
    """Median seconds per call of each fn (`timed` by `clock`), calls interleaved."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    times = [[] for _ in fns]
    for _ in range(reps):
        for t, fn in zip(times, fns):
            t.append(timed(fn, device, clock))
    return [statistics.median(t) for t in times]


def peak_flops(device: torch.device, n: int = 2048) -> float:
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    a @ b
    return 2 * n**3 / min(timed(lambda: a @ b, device) for _ in range(5))


def preset_model(name: str, boundary: str | None = None, **kw) -> ModelConfig:
    cfg = load_config(name, overrides=[f"model.boundary={boundary}"] if boundary else []).model
    return ModelConfig(**{**cfg.__dict__, **kw})


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=4)
    p.add_argument("--device", default="cpu")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    peak = peak_flops(device)
    out = {"peak_matmul_flops": peak, "torch": torch.__version__, "threads": args.threads, "device": str(device)}
    print(f"torch {torch.__version__}, {device}, {args.threads} threads; matmul peak {peak / 1e9:.1f} GFLOP/s\n")

    # 1. bytes/s and MFU; learned policy vs uniform boundaries at the same shapes (interleaved)
    rows = []
    for name, B, T in (("tiny", 16, 256), ("20M", 2, 512)):
        steps = {}
        for strategy in ("learned", "uniform"):
            steps[strategy], n_params = aunet_step(preset_model(name, boundary=strategy), batch(B, T), device)
        t_learned, t_uniform = interleaved([steps["learned"], steps["uniform"]], args.reps, device)
        fpb = flops_per_byte(preset_model(name), T)
        bps = B * (T - 1) / t_learned
        rows.append(
            {
                "preset": name,
                "params": n_params,
                "B": B,
                "T": T,
                "step_ms": 1e3 * t_learned,
                "bytes_per_s": bps,
                "gflop_per_step": fpb * B * T / 1e9,
                "mfu": fpb * bps / peak,
                "uniform_ms": 1e3 * t_uniform,
                "learned_over_uniform": t_learned / t_uniform,
            }
        )
    out["presets"] = rows
    print(
        "| preset | params | B x T | step (ms) | bytes/s | GFLOP/step | MFU | uniform step (ms) | learned / uniform |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['preset']} | {r['params'] / 1e6:.2f}M | {r['B']} x {r['T']} | {r['step_ms']:.0f} | "
            f"{r['bytes_per_s']:.0f} | {r['gflop_per_step']:.2f} | {100 * r['mfu']:.1f}% | {r['uniform_ms']:.0f} | "
            f"{r['learned_over_uniform']:.3f}x |"
        )

    # 2. U-Net vs a plain byte-level transformer with the same parameter count
    cfg = preset_model("tiny")
    plain, ratio = plain_like(cfg)
    n_layers = cfg.n_down + cfg.n_mid + cfg.n_up
    rows = []
    for T in (1024, 4096):
        x = batch(1, T)
        unet, n_params = aunet_step(cfg, x, device)
        t_unet, t_plain = interleaved([unet, plain_step(plain, x, device)], max(2, args.reps // 2), device)
        rows.append(
            {
                "T": T,
                "unet_params": n_params,
                "plain_params": sum(p.numel() for p in plain.parameters()),
                "plain_mlp_ratio": ratio,
                "unet_bytes_per_s": (T - 1) / t_unet,
                "plain_bytes_per_s": (T - 1) / t_plain,
                "speedup": t_plain / t_unet,
                "unet_gflop_per_byte": flops_per_byte(cfg, T) / 1e9,
                "plain_gflop_per_byte": plain_flops_per_byte(cfg.d_model, n_layers, ratio, cfg.vocab_size, T) / 1e9,
            }
        )
    out["unet_vs_plain"] = rows
    print(f"\nU-Net (tiny) vs plain byte transformer ({n_layers} layers, D {cfg.d_model}, MLP ratio {ratio}), B = 1")
    print(
        "| T | params U-Net / plain | U-Net bytes/s | plain bytes/s | U-Net / plain bytes/s | FLOP/byte U-Net / plain |"
    )
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['T']} | {r['unet_params'] / 1e6:.3f}M / {r['plain_params'] / 1e6:.3f}M | "
            f"{r['unet_bytes_per_s']:.0f} | {r['plain_bytes_per_s']:.0f} | {r['speedup']:.2f}x | "
            f"{r['unet_gflop_per_byte'] / r['plain_gflop_per_byte']:.2f} |"
        )

    # 3. step time against T at a fixed 8192 bytes per step (tiny)
    rows = []
    Ts = (256, 512, 1024, 2048, 4096)
    fns = [aunet_step(cfg, batch(8192 // T, T), device)[0] for T in Ts]
    for T, t in zip(Ts, interleaved(fns, max(2, args.reps // 2), device)):
        rows.append({"T": T, "B": 8192 // T, "step_ms": 1e3 * t, "bytes_per_s": 8192 // T * (T - 1) / t})
    out["scaling_T"] = rows
    print("\nStep time against T, tiny, 8192 bytes per step")
    print("| T | B | step (ms) | bytes/s |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['T']} | {r['B']} | {r['step_ms']:.0f} | {r['bytes_per_s']:.0f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
