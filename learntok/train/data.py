"""The run's data (step 3 of training): its source read, its training windows checked against the
batch each rank takes and against memory before any file is written, its identity (recorded
in every checkpoint, checked on resume), and the warnings about the run (said once the run
folder is written: learntok.run.tracking.open_run)."""

from __future__ import annotations

from learntok.data.dataset import ByteData, small_split_warnings
from learntok.data.identity import source_identity
from learntok.model.config import position_bytes
from learntok.run.config import RunConfig, check_memory, config_warnings
from learntok.run.distributed import DistEnv, micro_plan


def training_data(run_cfg: RunConfig, env: DistEnv) -> tuple[ByteData, dict[str, str], list[str]]:
    """The run's ByteData, its source's identity, and the data's and the config's warnings."""
    tc = run_cfg.train
    micro, _ = micro_plan(tc.batch_size, tc.micro_batch_size, env.world)
    row_bytes = position_bytes(run_cfg.model)
    data = ByteData.from_config(run_cfg.data)
    data.check_window("train", tc.seq_len, micro, row_bytes, training=True)
    warnings = small_split_warnings(data)
    check_memory(run_cfg, env.device.type)
    warnings += config_warnings(run_cfg)
    return data, source_identity(run_cfg.data.source), warnings
