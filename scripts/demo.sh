#!/usr/bin/env bash
# Set everything up, train the `tiny` preset on built-in Shakespeare (about 5 minutes on 2 CPU
# cores), then show the learned boundaries on a held-out passage. Extra arguments are
# key=value overrides for `learntok train` (e.g. train.steps=300 for a quick look).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
RUN=${RUN:-runs/demo-$(date +%Y%m%d-%H%M%S)}
learntok train --preset tiny --out "$RUN" "$@"
learntok segment "$RUN" --held-out
echo "-- where the run's boundaries sit, on the first 64 KB of the test split --"
learntok eval "$RUN" --split test --max-bytes 65536
echo "Which of the three places a word boundary can sit a policy settles on depends on the seed: in"
echo "the README's three-seed comparison, the space (tokens \"word \") at seeds 0 and 2, a word's first"
echo "letter (tokens that close on it) at seed 1. A chunk is what one token reads: it ends at its boundary."
