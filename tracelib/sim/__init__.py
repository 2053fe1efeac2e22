"""Cluster simulator for DL scheduling (pure Python/numpy; never imports torch).

    from tracelib.sim import SimConfig, Scheduler, LoadBalancing, jobs_from_frame, simulate
    jobs = jobs_from_frame(workload_jobs_frame)
    result = simulate(jobs, Scheduler(my_allocation_policy, LoadBalancing()), SimConfig())
    result.avg_jct_s, result.jobs, result.events_frame()

Modules: config (SimConfig, ClusterConfig, SpeedConfig), jobs (JobSpec, jobs_from_frame),
snapshot (what policies see and return), policy (the protocols, Scheduler), builder
(per-action allocation), placement (load balancing, bin packing, random), speed (speed
model), engine (the event loop), calibration (targets and checks of the coefficients).
"""

from tracelib.sim.builder import Action, AllocationBuilder
from tracelib.sim.config import ClusterConfig, ServerGroup, SimConfig, SpeedConfig
from tracelib.sim.engine import (
    EventRecord,
    InvalidDecision,
    PlacedSpeedModel,
    SimResult,
    SimulationStalled,
    Simulator,
    simulate,
)
from tracelib.sim.jobs import JobSpec, dl2_like_frame, jobs_from_frame
from tracelib.sim.placement import BinPacking, LoadBalancing, RandomPlacement
from tracelib.sim.policy import (
    AllocationPolicy,
    DecisionPolicy,
    PlacementPolicy,
    RequestedAllocation,
    Scheduler,
)
from tracelib.sim.snapshot import (
    Allocation,
    ClusterView,
    FinishedJob,
    JobPlacement,
    JobView,
    Placement,
    Snapshot,
    SpeedOracle,
    SpeedSample,
)
from tracelib.sim.speed import SpeedModel

__all__ = [
    "Action",
    "Allocation",
    "AllocationBuilder",
    "AllocationPolicy",
    "BinPacking",
    "ClusterConfig",
    "ClusterView",
    "DecisionPolicy",
    "EventRecord",
    "FinishedJob",
    "InvalidDecision",
    "JobPlacement",
    "JobSpec",
    "JobView",
    "LoadBalancing",
    "PlacedSpeedModel",
    "Placement",
    "PlacementPolicy",
    "RandomPlacement",
    "RequestedAllocation",
    "Scheduler",
    "ServerGroup",
    "SimConfig",
    "SimResult",
    "SimulationStalled",
    "Simulator",
    "Snapshot",
    "SpeedConfig",
    "SpeedModel",
    "SpeedOracle",
    "SpeedSample",
    "dl2_like_frame",
    "jobs_from_frame",
    "simulate",
]
