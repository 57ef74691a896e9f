"""Scoring: bits per byte, metrics and statistics over seeds, boundary quality, zero-shot tasks, the lm-eval adapter, estimator diagnostics."""
