#!/usr/bin/env bash
# Set everything up and run the default (fast) test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
# The lm-evaluation-harness adapter's test needs the optional `eval` extra; without it the test is skipped.
python -c "import lm_eval" 2>/dev/null || python -m pip install -q -e ".[eval]" \
  || echo "note: could not install the eval extra (lm-eval); its adapter test will be skipped"
python -m pytest -q "$@"
