"""The benchmarks' own correctness (``bench/peers.py``); skipped without the
bench extra."""
