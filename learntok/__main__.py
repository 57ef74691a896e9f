"""`python -m learntok` and the `learntok` script: the command line. A Ctrl-C while the command
line itself is still being imported (its first tenth of a second) is the same one line and exit
code as one during a command (learntok.cli)."""

import sys


def run() -> int:
    try:
        from learntok.cli import main
    except KeyboardInterrupt:
        if sys.stderr is not None:
            print("learntok: interrupted", file=sys.stderr)
        return 130
    return main()


if __name__ == "__main__":
    raise SystemExit(run())
