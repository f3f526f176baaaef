"""Benchmarks: each module prints a table (run as ``python -m bench.<name>``)."""
