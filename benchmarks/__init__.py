"""Benchmarks: speed and quality figures, printed. Run all with `make bench`."""
