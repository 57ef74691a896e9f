"""Data-parallel training under `torchrun`: process group, model wrapping, micro-batch plan,
reductions and full-state checkpoints (docs/scaling.md).

One entry point: `learntok train` under plain `python` is world size 1 and touches none of
this; under `torchrun --nproc-per-node N` it reads RANK / WORLD_SIZE / LOCAL_RANK, joins a
process group (nccl on CUDA, gloo on CPU) and wraps the model in DDP, or FSDP2
(`fully_shard`) with `system.fsdp=true`.

The global batch is cut into micro-batches of `train.micro_batch_size` rows, numbered
k = 0 .. n_micro - 1 across all ranks; rank r owns k in [r * A, (r + 1) * A), A = n_micro / world
micro-batches per rank (gradient accumulation). Micro-batch k's rows and its boundary draws are a
pure function of (seed, step, k): a run gives the same batches, and the same samples, whatever
the world size, as long as micro_batch_size is the same.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn

from learntok.util.errors import ConfigError
from learntok.util.environment import launch_vars, rendezvous
from learntok.data.dataset import FIT_BYTES
from learntok.util.runtime import resolve_device, resolve_dtype, seed_everything, set_threads


@dataclass(frozen=True)
class DistEnv:
    rank: int  # this process's rank in [0, world)
    world: int  # number of processes
    local_rank: int  # rank on this node (selects the GPU)
    device: torch.device  # this rank's device
    is_main: bool = field(init=False, repr=False, compare=False)  # rank 0: the one that writes

    def __post_init__(self) -> None:
        object.__setattr__(self, "is_main", self.rank == 0)


def init_distributed(device_name: str = "auto") -> DistEnv:
    """World size 1 without torchrun's env vars; otherwise init the process group once
    (nccl for CUDA, gloo for CPU) and pin this rank to cuda:LOCAL_RANK when on CUDA."""
    rank, world, local = launch_vars()  # checked: one line for a bad value
    if world == 1:
        return DistEnv(0, 1, 0, resolve_device(device_name))
    device = resolve_device(device_name)
    if device.type == "cuda":
        if local >= torch.cuda.device_count():
            raise ConfigError(f"LOCAL_RANK={local}: this machine has {torch.cuda.device_count()} GPU(s)")
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        rendezvous()  # checked: given, and the address resolves
        try:
            dist.init_process_group(
                "nccl" if device.type == "cuda" else "gloo", device_id=device if device.type == "cuda" else None
            )
        except (ValueError, RuntimeError) as e:  # DistStoreError, DistNetworkError are RuntimeErrors
            raise ConfigError(
                f"cannot join the process group of WORLD_SIZE={world}: {' '.join(str(e).split())}"
            ) from None
    return DistEnv(rank, world, local, device)


def shutdown(env: DistEnv) -> None:
    if env.world > 1 and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def barrier(env: DistEnv) -> None:
    if env.world > 1:
        dist.barrier()


def micro_plan(batch_size: int, micro_batch_size: int | None, world: int) -> tuple[int, int]:
    """(micro-batch rows, micro-batches per rank) for a global batch; invariants checked with values."""
    micro = micro_batch_size or batch_size // world
    if batch_size % world:
        raise ConfigError(f"train.batch_size {batch_size} is not a multiple of world size {world}")
    if micro < 1 or (batch_size // world) % micro:
        raise ConfigError(
            f"train.micro_batch_size {micro} does not divide the per-rank batch "
            f"{batch_size // world} (train.batch_size {batch_size} / world size {world})"
        )
    return micro, batch_size // world // micro


def slot_seed(seed: int, step: int, slot: int) -> int:
    """Seed of micro-batch `slot`'s boundary draws at `step` (a 63-bit mix of the three)."""
    x = (seed * 0x9E3779B97F4A7C15 + step * 0xBF58476D1CE4E5B9 + slot * 0x94D049BB133111EB + 1) % (1 << 63)
    return x ^ (x >> 29)


def wrap_model(model: nn.Module, env: DistEnv, fsdp: bool) -> nn.Module:
    """DDP, or FSDP2 (every transformer block a unit, then the whole model) for world > 1;
    the model itself otherwise. FSDP shards in place: the returned module is `model`."""
    if env.world == 1:
        return model
    if fsdp:
        from torch.distributed.fsdp import fully_shard

        for stack in (model.encoder, model.mid, model.decoder):
            for block in stack.blocks:
                fully_shard(block)
        return fully_shard(model)
    ids = [env.device.index] if env.device.type == "cuda" else None
    # Buffers (the rate controller's bias, the entropy strategy's running threshold) are
    # broadcast from rank 0 at each forward, so every rank decides with the same values.
    return nn.parallel.DistributedDataParallel(model, device_ids=ids)


def no_grad_sync(wrapped: nn.Module, last: bool):
    """Skip the gradient all-reduce on all but the last micro-batch of a step."""
    if isinstance(wrapped, nn.parallel.DistributedDataParallel) and not last:
        return wrapped.no_sync()
    if hasattr(wrapped, "set_requires_gradient_sync"):  # FSDP2
        wrapped.set_requires_gradient_sync(last)
    return contextlib.nullcontext()


def all_reduce(t: torch.Tensor, env: DistEnv, op: str = "sum") -> torch.Tensor:
    """Sum (or mean, max) over ranks, in place on a copy; identity for world 1."""
    if env.world == 1:
        return t
    t = t.clone()
    dist.all_reduce(t, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
    return t / env.world if op == "mean" else t


class FullState:
    """A stand-in for a model or optimizer whose state_dict() is a gathered full state (FSDP):
    what save_checkpoint writes, so an FSDP checkpoint loads on one process like any other."""

    def __init__(self, state: dict, cfg=None):
        self._state, self.cfg = state, cfg

    def state_dict(self) -> dict:
        return self._state


def checkpoint_views(model: nn.Module, optimizer: torch.optim.Optimizer, fsdp: bool):
    """(model, optimizer) to hand to save_checkpoint: themselves, or FullState views gathered on
    every rank (a collective: all ranks must call it) for FSDP. The FSDP optimizer state is
    keyed by parameter name (`torch.distributed.checkpoint.state_dict` format)."""
    if not fsdp:
        return model, optimizer
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, get_state_dict

    opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
    if not optimizer.state:
        # get_state_dict would initialise the state with a zero-gradient step (bumping Adam's
        # step count, which shifts every later update): gather the weights only
        return FullState(get_model_state_dict(model, options=opts), model.cfg), optimizer
    model_sd, optim_sd = get_state_dict(model, optimizer, options=opts)
    return FullState(model_sd, model.cfg), FullState({**optim_sd, "format": "fqn"})


def load_state(
    model: nn.Module, optimizer: torch.optim.Optimizer, weights: dict, optim_state: dict, fsdp: bool
) -> None:
    """Weights and optimizer state from a checkpoint into a plain, DDP or FSDP model. The
    optimizer state is the plain format, or the name-keyed one an FSDP run writes."""
    if not fsdp and optim_state.get("format") != "fqn":
        model.load_state_dict(weights)
        optimizer.load_state_dict(optim_state)
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

    if optim_state.get("format") != "fqn":  # a plain checkpoint resumed under FSDP
        raise ConfigError(
            "resuming a non-FSDP checkpoint with system.fsdp=true is not supported; resume it without FSDP"
        )
    optim_state = {k: v for k, v in optim_state.items() if k != "format"}
    set_state_dict(
        model,
        optimizer,
        model_state_dict=weights,
        optim_state_dict=optim_state,
        options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=False),
    )


def compile_model(model: nn.Module, backend: str = "inductor") -> nn.Module:
    """torch.compile with automatic dynamic shapes. The token count S varies with the sampled
    boundaries (rounded up to model.token_pad_multiple): the first call specialises on its S,
    the first different S recompiles once with S symbolic, and later values reuse that graph
    (tests/test_distributed.py counts the compiles). B and T are fixed in training. The one
    host sync per forward (token_counts) is a graph break between the two compiled halves."""
    return torch.compile(model, backend=backend, dynamic=None)


def broadcast_module_state(module: nn.Module, info: dict, env: DistEnv) -> dict:
    """Give every rank rank 0's state of `module` (buffers of any size, e.g. a fitted tokenizer)
    and its `info` dict; returns the info. A no-op in one process."""
    if env.world == 1:
        return info
    payload = [{k: v.cpu() for k, v in module.state_dict().items()}, info] if env.is_main else [None, None]
    dist.broadcast_object_list(payload, src=0)
    if not env.is_main:
        module.load_state_dict({k: v.to(env.device) for k, v in payload[0].items()})
    return payload[1]


def start_process(run_cfg) -> tuple[DistEnv, bool, torch.dtype | None]:
    """This process ready to train: its rank in the group (and whether it made the group, to end
    it), its threads set, its random generators seeded by train.seed (nothing draws from them
    before the model's initial weights), and the autocast dtype system.dtype resolves to."""
    owns_group = not dist.is_initialized()  # compare under torchrun holds the group itself
    env = init_distributed(run_cfg.system.device)
    set_threads(run_cfg.system.threads)
    seed_everything(run_cfg.train.seed)
    return env, owns_group, resolve_dtype(run_cfg.system.dtype, env.device)


def fit_strategy(model: nn.Module, data, env: DistEnv) -> dict:
    """Fit the model's strategy once, on rank 0, to a bounded sample of the train split (never
    the whole split: it may be many GB), and give every other rank the fitted state."""
    fitted = model.strategy.fit(data.sample_documents("train", FIT_BYTES)) if env.is_main else {}
    return broadcast_module_state(model.strategy, fitted, env)
