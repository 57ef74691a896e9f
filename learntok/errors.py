"""The mistakes learntok expects from its users, one class each; the command line prints their
one-line message and exits 2 (anything else is a bug and keeps its traceback)."""


class ConfigError(ValueError):
    """A configuration mistake: unknown name, wrong type or an invalid value (one-line message)."""


class DataError(Exception):
    """A data source or split that cannot be used; the message says which and why, in one line."""


class CheckpointError(RuntimeError):
    """A missing or unreadable model file or checkpoint (one-line message)."""


class OutputError(Exception):
    """An output file that cannot be written (one-line message naming it and why)."""
