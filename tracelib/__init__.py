"""Traces, ingestion, synthetic generation, workload derivation and the cluster simulator.

Nothing in tracelib imports torch: the simulator must run (and be tested) without it.
"""
