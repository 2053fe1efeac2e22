"""Harmony (Bao et al.): reward predictor, placement DRL and its ablations."""

from pipelines.systems.harmony.plugin import HARMONY

__all__ = ["HARMONY"]
