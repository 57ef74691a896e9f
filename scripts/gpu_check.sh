#!/usr/bin/env bash
# One prepared check of a GPU machine, in about 9 minutes on one H200 (under 10 by its limits):
#   1. the CUDA tests: the varlen attention kernel and the CUDA path at the 40M shapes;
#   2. the paper's question at 40M: learned against uniform boundaries at the paper's recipe
#      (learntok/configs/40M.toml), from identical initial weights, each trained for the same
#      seconds (--pair-seconds, 135 by default): val bpb and boundary rate at equal wall-clock;
#   3. a bf16 throughput table for the 40M and 147M presets, learned and uniform boundaries
#      (bytes/s, MFU against the dense bf16 peak, peak memory), torch.compile on against off (40M);
#   4. a short one-GPU run under torchrun (python -m torch.distributed.run).
# Everything lands in OUT/gpu_check.json and OUT/gpu_check.md (plus each part's own JSON), with
# the commit (git, else $COMMIT), the command line and the seeds.
#
#   scripts/gpu_check.sh [--device cuda|cpu] [--out DIR] [--seed N] [--pair-seconds S] [--toy]
#
# --toy shrinks every size (toy model, B = 2, T = 64, a few steps, a few tests, no compile) so
# that `--device cpu --toy` runs end to end in seconds: tests/test_gpu_check.py does that in CI.
# Each part has its own time limit; a part that fails or times out is reported, and the rest runs.
set -uo pipefail

die() { echo "learntok: error: $*" >&2; exit 2; }

DEVICE=cuda
OUT=gpu_check_out
TOY=0
SEED=0
PAIR_SECONDS=135
COMMAND="scripts/gpu_check.sh $*"
while [ $# -gt 0 ]; do
  case "$1" in
    --device) [ $# -ge 2 ] || die "--device needs a value (cuda or cpu)"; DEVICE=$2; shift 2 ;;
    --out) [ $# -ge 2 ] || die "--out needs a folder"; OUT=$2; shift 2 ;;
    --seed) [ $# -ge 2 ] || die "--seed needs a number"; SEED=$2; shift 2 ;;
    --pair-seconds) [ $# -ge 2 ] || die "--pair-seconds needs a number"; PAIR_SECONDS=$2; shift 2 ;;
    --toy) TOY=1; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) die "unknown argument '$1' (known: --device cuda|cpu, --out DIR, --seed N, --pair-seconds S, --toy)" ;;
  esac
done
case "$DEVICE" in cuda|cuda:*|cpu) ;; *) die "--device '$DEVICE' is not cuda, cuda:N or cpu" ;; esac
[[ "$SEED" =~ ^[0-9]+$ ]] || die "--seed '$SEED' is not a whole number"
[[ "$PAIR_SECONDS" =~ ^[0-9]+$ && "$PAIR_SECONDS" -ge 1 && "$PAIR_SECONDS" -le 240 ]] \
  || die "--pair-seconds '$PAIR_SECONDS' is not a whole number of seconds from 1 to 240 (the check must fit its device time)"

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || die "cannot enter $ROOT"
PY=${PYTHON:-python}
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT" || die "cannot create --out folder '$OUT'"
OUT=$(cd "$OUT" && pwd)

# write_json FILE KEY=VALUE...: a small JSON object (values that parse as JSON stay typed)
write_json() {
  "$PY" - "$@" <<'PYEOF'
import json, sys
out = {}
for kv in sys.argv[2:]:
    k, v = kv.split("=", 1)
    try:
        out[k] = json.loads(v)
    except ValueError:
        out[k] = v
open(sys.argv[1], "w").write(json.dumps(out, indent=2))
PYEOF
}

# 0. what ran: the commit, the command line, the seeds
rm -f "$OUT"/{meta,tests,pair,throughput,torchrun,gpu_check}.json  # this script's own parts: none stale
if commit=$(git -C "$ROOT" rev-parse HEAD 2>/dev/null); then
  dirty=$(git -C "$ROOT" status --porcelain --untracked-files=no | wc -l)  # tracked files changed since it
else  # a copy of the tree without its .git: the caller says which commit it is
  commit=${COMMIT:-unknown}
  dirty=null
fi
write_json "$OUT/meta.json" "commit=$commit" "modified_files=$dirty" "command=$COMMAND" "device=$DEVICE" \
  "toy=$([ "$TOY" = 1 ] && echo true || echo false)" "started=$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
  "seeds={\"pair\": $SEED, \"throughput\": 0, \"torchrun\": 0}"

# 1. the CUDA tests: the varlen kernel with and without a window (skipped without CUDA), the CUDA path at the 40M shapes
if [ "$TOY" = 1 ]; then
  TESTS=(tests/test_packing.py -k "maps or packed_attention")
  LIMIT_TESTS=120
else
  # the CUDA path at 40M for the pair's two strategies (every strategy takes minutes on the CPU
  # that checks it: tests/fake_cuda.py), its checks and mutations, the kernels, identical init
  # and the byte levels' windowed attention through the flash window (tests/test_window_kernel.py)
  TESTS=(tests/test_packing.py tests/test_identical_init.py tests/test_cuda_path.py tests/test_window_kernel.py
         -k "not paper_shapes or 40M-learned or 40M-uniform")
  LIMIT_TESTS=90
fi
t0=$(date +%s)
timeout "$LIMIT_TESTS" "$PY" -m pytest -q -p no:cacheprovider "${TESTS[@]}" > "$OUT/tests.log" 2>&1
rc=$?
summary=$(grep -E "passed|failed|error" "$OUT/tests.log" | tail -1)
write_json "$OUT/tests.json" rc=$rc "summary=${summary:-no summary (rc $rc)}" seconds=$(( $(date +%s) - t0 ))
echo "tests: ${summary:-rc $rc}"

# 2. learned against uniform at the 40M recipe, the same seconds of training each
if [ "$TOY" = 1 ]; then
  PAIR=(--toy --source shakespeare --seconds 1 --max-steps 3 --calib-steps 2 --calib-warmup 1
        --eval-bytes 512 --log-every 1)
  LIMIT_PAIR=120
else
  PAIR=(--seconds "$PAIR_SECONDS")
  LIMIT_PAIR=$(( 2 * PAIR_SECONDS + 60 ))  # each arm: start-up, calibration and evaluation besides
fi
timeout "$LIMIT_PAIR" "$PY" benchmarks/gpu_check.py pair --device "$DEVICE" --out "$OUT" --preset 40M \
  --seed "$SEED" "${PAIR[@]}" > "$OUT/pair.log" 2>&1 || echo "pair: exit $? (see $OUT/pair.log)"

# 3. throughput table
if [ "$TOY" = 1 ]; then
  TP=(--toy --presets tiny --compile-presets none --steps 2 --warmup 1)
  LIMIT_TP=120
else
  TP=(--presets 40M,147M --compile-presets 40M --steps 10 --warmup 3)
  LIMIT_TP=90
fi
timeout "$LIMIT_TP" "$PY" benchmarks/gpu_check.py throughput --device "$DEVICE" --out "$OUT" "${TP[@]}" \
  > "$OUT/throughput.log" 2>&1 || echo "throughput: exit $? (see $OUT/throughput.log)"

# 4. a short run under torchrun, one process
if [ "$TOY" = 1 ]; then
  RUN=(--preset tiny model.d_model=32 model.n_heads=2 model.n_mid=1 train.steps=2 train.batch_size=2
       train.seq_len=64 log.eval_bytes=512 log.log_every=1)
  LIMIT_RUN=120
else
  RUN=(--preset 40M train.steps=20 train.batch_size=8 train.micro_batch_size=0 train.seq_len=4096
       optim.warmup_steps=5 log.eval_bytes=65536 log.log_every=5)
  LIMIT_RUN=45
fi
rm -rf "$OUT/torchrun_run"
t0=$(date +%s)
timeout "$LIMIT_RUN" "$PY" -m torch.distributed.run --standalone --nproc_per_node 1 -m learntok train \
  "${RUN[@]}" system.device="$DEVICE" log.eval_every=0 checkpoint.every=0 log.segment_every=0 \
  --out "$OUT/torchrun_run" > "$OUT/torchrun.log" 2>&1
rc=$?
last=$(tail -n 1 "$OUT/torchrun_run/metrics.jsonl" 2>/dev/null)
write_json "$OUT/torchrun.json" rc=$rc seconds=$(( $(date +%s) - t0 )) "last_metrics=${last:-null}"
echo "torchrun: exit $rc"

# 5. one JSON, one page
"$PY" benchmarks/gpu_check.py report --out "$OUT" > /dev/null || die "report failed"
echo "wrote $OUT/gpu_check.json and $OUT/gpu_check.md"
