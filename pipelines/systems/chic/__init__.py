"""Chic and Chic-Pair (Gong et al.): allocation by the cross-entropy method."""

from pipelines.systems.chic.plugin import CHIC

__all__ = ["CHIC"]
