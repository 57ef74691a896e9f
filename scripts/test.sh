#!/usr/bin/env bash
# Set everything up and run the default (fast) test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
# The lm-evaluation-harness adapter's test needs the optional `eval` extra; without it the test is skipped.
python -c "import lm_eval" 2>/dev/null || python -m pip install -q -e ".[eval]" \
  || echo "note: could not install the eval extra (lm-eval); its adapter test will be skipped"
# The transformers integration's tests (tests/test_hf.py) need the optional `hf` extra: transformers
# alone from PyPI (it does not require torch, so the pinned CPU torch stays); without it they are skipped.
python -c "import transformers" 2>/dev/null || python -m pip install -q -e ".[hf]" \
  || echo "note: could not install the hf extra (transformers); its tests will be skipped"
python -c "import torch, sys; sys.exit(0) if torch.__version__.split('+')[0] == '${TORCH_VERSION:-2.13.0}' else sys.exit('the torch pip installed is not the pinned one')" \
  || echo "note: torch is not ${TORCH_VERSION:-2.13.0}: check pip list | grep torch"
# The HTML page's slider test drives headless Chromium (a Debian package); without it the test is skipped.
if [ "${LEARNTOK_NO_CHROMIUM:-0}" = 1 ]; then
  echo "note: LEARNTOK_NO_CHROMIUM=1: not installing chromium; the HTML slider test will be skipped"
elif ! command -v chromium >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing chromium (apt-get) for the HTML slider test; set LEARNTOK_NO_CHROMIUM=1 to skip it"
  apt-get install -y -q chromium >/dev/null 2>&1 || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium >/dev/null 2>&1; } \
    || echo "note: could not install chromium; the HTML slider test will be skipped"
fi
python -m ruff check learntok tests benchmarks scripts
python -m ruff format --check learntok tests benchmarks scripts
# One worker per core (pytest-xdist; each worker's torch runs one thread, tests/conftest.py):
# LEARNTOK_TEST_WORKERS=0 runs the suite in this process, one test after another.
python -m pytest -q -n "${LEARNTOK_TEST_WORKERS:-auto}" "$@"
