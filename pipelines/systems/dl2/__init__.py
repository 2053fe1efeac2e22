"""DL2 (Peng et al.): decision logs, supervised warm-up, actor-critic fine-tuning."""

from pipelines.systems.dl2.plugin import DL2

__all__ = ["DL2"]
