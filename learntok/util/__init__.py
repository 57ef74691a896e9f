"""Foundations every layer uses: errors, files, the process's runtime, ranges and checks of values, progress."""
