"""Comparisons: strategies and seeds trained and scored on one backbone, their report, runs read back, the frontier, parallel jobs."""
