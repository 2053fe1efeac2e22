"""Gymnasium environments over the simulator and the observation/mask encodings they share.

from tracelib.envs import AllocationEnv, PlacementEnv
env = AllocationEnv(workloads)           # workloads: sequences of tracelib.sim.JobSpec
obs, info = env.reset(seed=0); info["action_mask"]
"""

from tracelib.envs.environments import (
    AllocationEnv,
    AllocationEnvConfig,
    ExternalPolicy,
    PlacementEnv,
    PlacementEnvConfig,
)
from tracelib.envs.gpu import GpuAssignmentEnv, GpuEnvConfig, GpuObsConfig
from tracelib.envs.observation import AllocationObsConfig, PlacementObsConfig

__all__ = [
    "AllocationEnv",
    "AllocationEnvConfig",
    "AllocationObsConfig",
    "ExternalPolicy",
    "GpuAssignmentEnv",
    "GpuEnvConfig",
    "GpuObsConfig",
    "PlacementEnv",
    "PlacementEnvConfig",
    "PlacementObsConfig",
]
