#!/usr/bin/env bash
# One prepared check of a GPU machine, in under 8 minutes on one H200:
#   1. the test suite (CUDA-only tests, e.g. varlen attention, run where CUDA is);
#   2. a bf16 throughput table for the 40M and 147M presets, learned and uniform boundaries
#      (bytes/s, MFU against the dense bf16 peak, peak memory), torch.compile on against off (40M);
#   3. a short one-GPU run under torchrun (python -m torch.distributed.run).
# Everything lands in OUT/gpu_check.json and OUT/gpu_check.md (plus each part's own JSON).
#
#   scripts/gpu_check.sh [--device cuda|cpu] [--out DIR] [--toy]
#
# --toy shrinks every size (tiny model, B = 2, T = 64, 2 steps, a few tests, no compile) so that
# `--device cpu --toy` runs end to end in seconds: tests/test_gpu_check.py does that in CI.
# Each part has its own time limit; a part that fails or times out is reported, and the rest runs.
set -uo pipefail

die() { echo "learntok: error: $*" >&2; exit 2; }

DEVICE=cuda
OUT=gpu_check_out
TOY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --device) [ $# -ge 2 ] || die "--device needs a value (cuda or cpu)"; DEVICE=$2; shift 2 ;;
    --out) [ $# -ge 2 ] || die "--out needs a folder"; OUT=$2; shift 2 ;;
    --toy) TOY=1; shift ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) die "unknown argument '$1' (known: --device cuda|cpu, --out DIR, --toy)" ;;
  esac
done
case "$DEVICE" in cuda|cuda:*|cpu) ;; *) die "--device '$DEVICE' is not cuda, cuda:N or cpu" ;; esac

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

# 1. tests
if [ "$TOY" = 1 ]; then
  TESTS=(tests/test_packing.py -k "maps or packed_attention")
  LIMIT_TESTS=120
else
  TESTS=(-x)
  LIMIT_TESTS=240
fi
t0=$(date +%s)
timeout "$LIMIT_TESTS" "$PY" -m pytest -q -p no:cacheprovider "${TESTS[@]}" > "$OUT/tests.log" 2>&1
rc=$?
summary=$(grep -E "passed|failed|error" "$OUT/tests.log" | tail -1)
write_json "$OUT/tests.json" rc=$rc "summary=${summary:-no summary (rc $rc)}" seconds=$(( $(date +%s) - t0 ))
echo "tests: ${summary:-rc $rc}"

# 2. throughput table
if [ "$TOY" = 1 ]; then
  TP=(--toy --presets tiny --compile-presets none --steps 2 --warmup 1)
  LIMIT_TP=120
else
  TP=(--presets 40M,147M --compile-presets 40M --steps 10 --warmup 3)
  LIMIT_TP=270
fi
timeout "$LIMIT_TP" "$PY" benchmarks/gpu_check.py throughput --device "$DEVICE" --out "$OUT" "${TP[@]}" \
  > "$OUT/throughput.log" 2>&1 || echo "throughput: exit $? (see $OUT/throughput.log)"

# 3. a short run under torchrun, one process
if [ "$TOY" = 1 ]; then
  RUN=(--preset tiny model.d_model=32 model.n_heads=2 model.n_mid=1 train.steps=2 train.batch_size=2
       train.seq_len=64 log.eval_bytes=512 log.log_every=1)
  LIMIT_RUN=120
else
  RUN=(--preset 40M train.steps=30 train.batch_size=8 train.seq_len=4096 optim.warmup_steps=5
       log.eval_bytes=65536 log.log_every=5)
  LIMIT_RUN=120
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

# 4. one JSON, one markdown table
"$PY" benchmarks/gpu_check.py report --out "$OUT" > /dev/null || die "report failed"
echo "wrote $OUT/gpu_check.json and $OUT/gpu_check.md"
