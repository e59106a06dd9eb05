"""Benchmarks of agenttape against the client's own floor and its nearest peers.

Run ``python -m bench`` from the repository root; see bench/RESULTS.md for the last run.
"""
