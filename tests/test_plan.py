"""`learntok config --plan`: the step measured on fake tensors against the CPU allocator's own
peak of the same step on real tensors, the counted FLOPs against the analytic count, and the
plan printed for every preset."""

import json
import resource

import pytest
import torch

from learntok.cli import main
from learntok.run.config import load_config, preset_names
from learntok.run.distributed import micro_plan
from learntok.util.errors import ConfigError
from learntok.model.flops import meta_model, model_flops
from learntok.train.fake_step import MemoryTally, StepFigures, measure_step, prepared_step, run_step
from learntok.train.plan import WORLDS, GiB, per_gpu_peak, runs_at


def allocator_peak(cfg, micro: int, accum: int, tmp_path) -> int:
    """Peak bytes held by torch's CPU allocator over building and running one training step on
    real tensors (the profiler's memory events: every allocation and free, with the running total)."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=activities, profile_memory=True) as prof:
        eng, xs = prepared_step(cfg, micro, accum)
        run_step(cfg, eng, xs)
        del eng, xs
    prof.export_chrome_trace(str(tmp_path / "trace.json"))
    events = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    return max(e["args"]["Total Allocated"] for e in events if e.get("name") == "[memory]")


@pytest.mark.parametrize(
    "overrides",
    [
        [],  # bf16 autocast, as on a GPU
        ["system.dtype=fp32"],
        ["train.micro_batch_size=4"],  # 4 micro-batches a step: the earlier ones' gradients are held
        ["model.boundary=hnet"],  # a strategy with weights of its own
    ],
    ids=["bf16", "fp32", "accumulating", "hnet"],
)
def test_planned_peak_is_the_cpu_allocators_within_10_percent(tmp_path, overrides):
    cfg = load_config("tiny", overrides=overrides)
    micro, accum = micro_plan(cfg.train.batch_size, cfg.train.micro_batch_size, 1)
    planned = per_gpu_peak(measure_step(cfg, micro), micro, accum, 1, False)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # no per-thread scratch in the count
    try:
        real = allocator_peak(cfg, micro, accum, tmp_path)
    finally:
        torch.set_num_threads(threads)
    assert abs(planned / real - 1) < 0.10, (planned / 2**20, real / 2**20)


def test_the_peak_grows_with_the_rows_as_planned():
    cfg = load_config("tiny")
    line = measure_step(cfg, 2).rows_apart(measure_step(cfg, 4))
    assert 0 < line.fixed < line.activations
    for rows in (1, 8):
        assert abs(per_gpu_peak(line, rows, 1, 1, False) / measure_step(cfg, rows).peak - 1) < 0.02


def test_fake_tensors_allocate_nothing():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    f = measure_step(load_config("147M"), 8)
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    assert f.peak > 10 * GiB and grown < 2 * GiB, (f.peak, grown)


@pytest.mark.parametrize("preset", ["tiny", "147M"])  # the smallest and the largest
def test_counted_flops_match_the_analytic_count(preset):
    cfg = load_config(preset)
    f = measure_step(cfg, 8)  # 8 rows: packed tokens need no padding
    analytic = {k: v * 8 * cfg.train.seq_len for k, v in model_flops(cfg.model, cfg.train.seq_len).items()}
    # the boundaries are prescribed at the target rate (BOS on top): within 1%
    assert abs(f.matmul_flops / (analytic["byte level"] + analytic["token level"]) - 1) < 0.01
    # the kernels score whole blocks (masked parts too) and backward recomputes the scores: more,
    # but not many times more, than the causal pairs the analytic count takes
    assert 1.0 < f.attention_flops / analytic["attention"] < 3.0
    assert f.flops == f.matmul_flops + f.attention_flops
    assert f.params == sum(p.numel() for p in meta_model(cfg.model).parameters())


def test_memory_tally_counts_live_storages():
    tally = MemoryTally()
    with tally:
        a = torch.empty(1 << 18)  # 1 MiB
        b = torch.empty(1 << 19)  # 2 MiB
        view = a[1:]  # no new storage
        del a
        assert tally.live[""] == 3 << 20  # the view keeps a's storage
        del view
        c = torch.empty(1 << 17)  # 0.5 MiB
    assert (tally.peak, tally.live[""]) == (3 << 20, (2 << 20) + (1 << 19))
    tally.hold(b, "grads")  # b became a gradient
    assert tally.live == {"": 1 << 19, "grads": 2 << 20}
    del b, c


def test_per_gpu_rule():
    """One step's figures in round numbers: weights 4, gradients 4, optimizer 8, activations 8
    at 8 rows (2 of them fixed) at the peak, where 1 of the 4 gradients is live; the root 1 and
    each block 0.5 of the 4 weights."""
    f = StepFigures(
        micro=8,
        params=4,
        peak=21,
        at_peak={"params": 4, "grads": 1, "optimizer": 8, "": 8},
        state={"params": 4, "grads": 4, "optimizer": 8},
        flops=0,
        attention_flops=0,
        matmul_flops=0,
        root_params=1,
        block_params=0.5,
        fixed=2,
    )
    assert f.activations == 8
    assert per_gpu_peak(f, 8, 1, 1, False) == 21
    assert per_gpu_peak(f, 4, 1, 1, False) == 18  # half the rows: 2 + half of the other 6
    assert per_gpu_peak(f, 8, 2, 1, False) == 24  # accumulating: every gradient held
    assert per_gpu_peak(f, 8, 1, 2, False) == 25  # DDP: + the gradient buckets
    assert per_gpu_peak(f, 8, 1, 4, True) == 12 / 4 + 1 / 4 + 2 + 8  # FSDP: shards + gathered root and 2 blocks
    assert per_gpu_peak(f, 8, 2, 4, True) == 12 / 4 + 4 + 2 + 8  # accumulating under FSDP: gradients whole


@pytest.mark.parametrize("preset", preset_names())
def test_plan_prints_for_every_preset(capsys, preset):
    assert main(["config", "--preset", preset, "--plan", "--mfu", "0.3"]) == 0
    out = capsys.readouterr().out
    cfg = load_config(preset)
    params = sum(p.numel() for p in meta_model(cfg.model).parameters())
    assert f"parameters     {params / 1e6:.2f}M" in out and f"{cfg.train.steps} steps" in out
    assert "at 30% MFU of 989 TFLOP/s" in out
    rows = [line.split(" | ") for line in out.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [r[0] for r in rows][:1] == ["| 1"] and {"one GPU", "DDP", "FSDP"} == {r[1] for r in rows}
    peaks = {(int(r[0][2:]), r[1]): float(r[4]) for r in rows}
    for (n, kind), peak in peaks.items():
        if kind == "FSDP":
            assert peak < peaks[(n, "DDP")]  # sharding saves memory
    missing = [w for w in WORLDS if w not in {n for n, _ in peaks}]  # a GPU count the config cannot run at says so
    assert not missing or f"not on {', '.join(map(str, missing))} GPUs" in out


@pytest.mark.parametrize(
    "batch,micro,world",
    [(64, 32, 1), (64, 32, 2), (64, 32, 4), (64, 0, 8), (12, 0, 8), (24, 3, 8), (24, 2, 8), (16, 16, 1)],
)
def test_runs_at_is_what_micro_plan_accepts(batch, micro, world):
    try:
        micro_plan(batch, micro, world)
        accepted = True
    except ConfigError:
        accepted = False
    assert runs_at(batch, micro, world) == accepted
