"""Benchmarks: speed and quality figures, printed. Run all with `make bench`.

Every benchmark is a module `bench_<name>.py` with `main(argv) -> int` over its options
dataclass (`benchmarks.options`); `python -m benchmarks` runs them.
"""
