"""RL-TAPS (Ryu et al.): topology-aware, preemptive GPU assignment by REINFORCE."""

from pipelines.systems.rltaps.plugin import RLTAPS

__all__ = ["RLTAPS"]
