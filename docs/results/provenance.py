"""What the scripts in docs/results record about where a result came from."""

import subprocess
from pathlib import Path


def git_commit() -> str:
    """The commit the measuring code is at (a result file records it)."""
    here = Path(__file__).resolve().parent
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, text=True)
    return out.stdout.strip() or "not recorded: not a git checkout"
