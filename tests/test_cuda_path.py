"""The CUDA code paths, run on CPU at the paper's shapes (tests/fake_cuda.py; docs/reliability.md,
"The CUDA path, checked on CPU"): for every boundary strategy, one training step (forward in bf16
autocast, loss, gradients, clipping, fused AdamW, the rate controller), one evaluation batch and
a few bytes of cached generation, with the model on device `cuda` at the 40M preset's shapes
(micro-batch 8 x 4096 bytes), and a representative set at the 147M preset's. Every operation's
devices, dtypes and shapes are checked by PyTorch; the flash varlen call is checked against the
kernel's input contract; and every host read the step makes is counted (a host sync on a GPU).
A tensor made on the CPU inside the forward fails the check (the mutation tests at the end)."""

from __future__ import annotations

import contextlib
from collections import Counter
from dataclasses import dataclass

import pytest
import torch

import learntok.model.generate as generate_module
from learntok.boundaries import strategy_class, strategy_names
from learntok.run.config import RunConfig, load_config
from learntok.data import ByteData
from learntok.run.distributed import DistEnv, init_distributed, wrap_model
from learntok.util.errors import ConfigError
from learntok.evaluation.evaluate import EvalOptions, evaluate_bpb
from learntok.model.aunet import AUNet
from learntok.util.runtime import resolve_device, resolve_dtype
from learntok.run.distributed import fit_strategy
from learntok.train.step import Engine, build_optimizer, lr_at, rank_batches, train_step
from learntok.train.report import MetricWindow

from conftest import shakespeare
from fake_cuda import DEVICE, HostValues, fake_cuda

varlen = pytest.importorskip("torch.nn.attention.varlen", reason="flash varlen attention needs torch >= 2.9")

MICRO_BATCH = 8
# 147M: the paper's policy, and the strategies that replace the token level's pooling (nawrot)
# and its de-chunking and confidence hooks (hnet); every strategy runs at 40M.
CASES = [("40M", name) for name in strategy_names()] + [("147M", name) for name in ("learned", "nawrot", "hnet")]
# Host reads a strategy makes by design, beside the forward's one (token_counts), by function:
# the BPE strategies tokenize the batch's bytes on the host (and parse their tokenizer once);
# whitespace reads its fitted knob theta (strategy.rate_offset) each forward.
HOST_READS = {
    "bpe": {"bpe_boundaries", "tokenizer"},
    "bpe-causal": {"boundaries", "tokenizer"},
    "whitespace": {"forward"},
}


@pytest.fixture(scope="module")
def data() -> ByteData:
    return ByteData({"train": [shakespeare(20_000, skip=0)], "val": [shakespeare(40_000, skip=100_000)]})


@dataclass
class Machine:
    """What the check runs on: the run's config, the (fake) GPU and the model on it."""

    cfg: RunConfig
    env: DistEnv
    amp: torch.dtype | None
    model: AUNet
    host: HostValues
    varlen_calls: list


def check_varlen_inputs(q, k, v, cu_q, cu_k, max_q, max_k, **kwargs) -> None:
    """The flash varlen kernel's input contract (its fake implementation checks none of it)."""
    assert q.dtype in (torch.float16, torch.bfloat16) and k.dtype == v.dtype == q.dtype, (q.dtype, k.dtype, v.dtype)
    assert q.device == k.device == v.device == cu_q.device == cu_k.device and q.is_cuda
    assert cu_q.dtype == cu_k.dtype == torch.int32 and cu_q.dim() == 1, (cu_q.dtype, cu_q.shape)
    assert q.dim() == 3 and q.size(-1) % 8 == 0 and q.size(-1) <= 256 and q.stride(-1) == 1, (q.shape, q.stride())
    assert isinstance(max_q, int) and isinstance(max_k, int) and max_q >= 1


@contextlib.contextmanager
def on_fake_gpu(monkeypatch, preset: str, name: str, data: ByteData):
    """A run of `preset` with strategy `name` set up as `train` sets it up, on the fake GPU."""
    cfg = load_config(
        preset=preset,
        overrides=[
            f"model.boundary={name}",
            f"train.batch_size={MICRO_BATCH}",
            f"train.micro_batch_size={MICRO_BATCH}",
            "system.device=cuda",
            f"log.eval_bytes={MICRO_BATCH * 4095}",
            # entropy cuts on the early head, which the paper presets leave untrained for baselines
            # (config.check_early_head refuses that): it trains the head here
            *(["objective.early_for=all"] if name == "entropy" else []),
        ],
    )
    calls = []
    true_varlen = varlen.varlen_attn

    def varlen_attn(*args, **kwargs):
        check_varlen_inputs(*args, **kwargs)
        calls.append((args[0].shape, kwargs.get("window_size")))
        return true_varlen(*args, **kwargs)

    monkeypatch.setattr(varlen, "varlen_attn", varlen_attn)
    model = AUNet(cfg.model)  # built on the CPU, then moved: as train does
    with fake_cuda(monkeypatch, cfg.model.target_rate) as host:
        env = init_distributed(cfg.system.device)
        model = model.to(env.device)
        fit_strategy(model, data, env)  # e.g. the BPE tokenizer, whitespace's knob
        yield Machine(cfg, env, resolve_dtype(cfg.system.dtype, env.device), model, host, calls)


def training_step(m: Machine, data: ByteData) -> dict[str, torch.Tensor]:
    """Step 0 as `train` runs it, then the log step's read of the metrics."""
    optimizer = build_optimizer(m.model, m.cfg.optim, m.env.device)
    engine = Engine(m.model, wrap_model(m.model, m.env, m.cfg.system.fsdp), m.model, optimizer, m.env, m.amp)
    xs, seeds = rank_batches(data, 0, m.cfg, m.env)
    metrics = train_step(engine, xs, m.cfg.objective, m.cfg.optim, lr_at(0, m.cfg.optim, m.cfg.train.steps), seeds)
    state = [s for group in optimizer.state.values() for s in group.values() if isinstance(s, torch.Tensor)]
    assert state and all(s.device == DEVICE for s in state)  # AdamW stepped, its state on the GPU
    window = MetricWindow(m.env.device)
    window.add(1, metrics)
    window.read(m.env)
    return metrics


def evaluation(m: Machine, data: ByteData) -> dict:
    """An evaluation batch as `learntok eval` scores it: per document, with boundary quality."""
    tc = m.cfg.train
    reference = m.model.strategy.reference_starts if m.model.strategy.has_reference else None
    opts = EvalOptions(
        MICRO_BATCH,
        tc.seq_len,
        m.cfg.log.eval_bytes,
        seed=tc.seed,
        amp=m.amp,
        per_document=True,
        quality=True,
        reference_starts=reference,
    )
    return evaluate_bpb(m.model, data, "val", opts, m.env)


def generation(m: Machine, data: ByteData):
    """Two prompts of different lengths (the longer one's last byte is fed as a forced input),
    then one sampled byte each."""
    text = next(data.documents("val"))
    return m.model.generate([text[:12], text[100:113]], max_bytes=1, seed=0)


def reads_by_function(host: HostValues) -> Counter:
    return Counter(where.rsplit(".", 1)[-1] for where, _ in host.reads)


def token_and_byte_calls(m: Machine) -> tuple[list, list]:
    """The flash varlen calls so far: the token level's (causal, no window: their q shapes) and
    the byte levels' (the window of model.attn_window: their packed lengths)."""
    tokens = [shape for shape, window in m.varlen_calls if window == (-1, 0)]
    rows = [shape[:1] for shape, window in m.varlen_calls if window == (m.cfg.model.attn_window - 1, 0)]
    assert len(tokens) + len(rows) == len(m.varlen_calls), m.varlen_calls
    return tokens, rows


@pytest.mark.parametrize("preset,name", CASES)
def test_the_cuda_path_runs_at_the_paper_shapes(monkeypatch, data, preset, name):
    with on_fake_gpu(monkeypatch, preset, name, data) as m:
        assert m.env.device == DEVICE and m.amp == torch.bfloat16
        assert all(p.device == DEVICE for p in [*m.model.parameters(), *m.model.buffers()])

        m.host.reads.clear()
        metrics = training_step(m, data)
        assert all(v.device == DEVICE for v in metrics.values())
        reads = reads_by_function(m.host)
        assert reads.pop("token_counts") == 1, reads  # the forward's one host sync
        assert reads.pop("read") == 1, reads  # and the log step's
        assert set(reads) <= HOST_READS.get(name, set()), f"host syncs in a training step: {reads}"
        n_mid = m.cfg.model.n_mid
        tokens, rows = token_and_byte_calls(m)
        assert len(tokens) == n_mid  # every token-level block: flash varlen, bf16
        S = tokens[0][0]
        assert MICRO_BATCH * m.cfg.train.seq_len * 0.1 < S < MICRO_BATCH * m.cfg.train.seq_len  # packed tokens
        # every byte-level block: the flash window over the rows, no padding
        assert rows == [(MICRO_BATCH * m.cfg.train.seq_len,)] * (m.cfg.model.n_down + m.cfg.model.n_up)

        m.host.reads.clear()
        result = evaluation(m, data)
        assert result["n_docs"] >= 0 and "first_letter" in result
        reads = reads_by_function(m.host)
        assert reads.pop("evaluate_bpb") == 1 and reads.pop("token_counts") == 1, reads  # the report's one sync
        assert set(reads) <= HOST_READS.get(name, set()), f"host syncs in an evaluation batch: {reads}"
        assert len(token_and_byte_calls(m)[0]) == 2 * n_mid

        if not strategy_class(name).causal:
            with pytest.raises(ConfigError, match="byte by byte"):
                generation(m, data)
            return
        texts, decisions = generation(m, data)
        assert len(texts) == len(decisions) == 2 and all(d.device.type == "cpu" for d in decisions)


@pytest.mark.parametrize("name,want", [("auto", "cuda:1"), ("cuda", "cuda:1"), ("cuda:0", "cuda:0"), ("cpu", "cpu")])
def test_a_cuda_device_resolves_with_its_index(monkeypatch, name, want):
    """Tensors on a GPU report cuda:N, and torch.device("cuda") != torch.device("cuda:0")."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device(name) == torch.device(want)


# ---------------------------------------------------------------- mutations: the check must fail


def cpu_tensor_in_token_level(monkeypatch):
    """The backbone's forward adds a tensor made on the CPU to the token level's output."""
    true = AUNet.token_level
    monkeypatch.setattr(AUNet, "token_level", lambda self, h, b: true(self, h, b) + torch.zeros(1, 1, h.size(-1)))


def cpu_bytes_in_the_forward(monkeypatch):
    """The model is handed byte ids copied to the CPU (a device dropped on the way)."""
    model_forward = AUNet.forward
    monkeypatch.setattr(AUNet, "forward", lambda self, x, **kw: model_forward(self, x.cpu(), **kw))


def cpu_sample_in_generation(monkeypatch):
    """Sampling returns the next bytes on the CPU."""
    true = generate_module.sample_next
    monkeypatch.setattr(generate_module, "sample_next", lambda *args, **kw: true(*args, **kw).cpu())


@pytest.mark.parametrize(
    "mutate,phase",
    [
        (cpu_tensor_in_token_level, training_step),
        (cpu_bytes_in_the_forward, evaluation),
        (cpu_sample_in_generation, generation),
    ],
)
def test_a_tensor_made_on_the_cpu_fails_the_check(monkeypatch, data, mutate, phase):
    with on_fake_gpu(monkeypatch, "40M", "learned", data) as m:
        mutate(monkeypatch)
        with pytest.raises(RuntimeError, match="devices"):
            phase(m, data)
