"""What a command gives once its work is done: the `--json` file of its figures, and the hint on
a run trained too briefly."""

from __future__ import annotations

import json
import sys


def write_json(path: str | None, record: dict) -> None:
    """`--json PATH` for commands that report figures, written whole (learntok.util.files.write_output)."""
    from learntok.util.files import write_output

    if path:
        write_output(path, json.dumps(record, indent=2) + "\n")


def short_run_hint(path: str) -> None:
    """`segment` and `eval`, once they are done: one stderr line when a learned policy has trained
    too few steps to settle (after the output, so that an error stays the only line)."""
    from learntok.run.checkpoint import short_run_hint as hint

    line = hint(path)
    if line:
        print(line, file=sys.stderr)
