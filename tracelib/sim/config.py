"""Simulator configuration: one frozen dataclass per concern, every field documented.

Per-model coefficients (speed, locality, interference) live in `tracelib.catalogue`; what is
here is everything else. Nothing is read from files or the environment.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

TRIGGERS = ("interval", "events")
"""Decision triggers (`SimConfig.trigger`)."""

TRUTHS = ("measured", "analytical")
"""Where a job's isolated speed comes from (`SpeedConfig.truth`)."""

RESTART_PAUSE_S = 30.0
"""Training a job loses when it is stopped and restarted elsewhere or with other resources
(a reallocation, a preemption's resumption): checkpoint-based restart takes tens of seconds
(model saving, container relaunch, initialization; DL2 section 6, Fig. 11). Every
scheduler that moves or pauses a running job pays it, learned or not."""

RESOURCES = ("gpu", "cpu", "mem_gb")
"""Resource types, in the order of every (..., 3) array in the simulator."""


@dataclass(frozen=True)
class ServerGroup:
    """Servers of one kind in a heterogeneous cluster (`ClusterConfig.heterogeneous`)."""

    n_servers: int
    """How many servers of this kind."""
    gpus: float = 2.0
    """GPUs per server."""
    cpus: float = 16.0
    """CPU cores per server."""
    mem_gb: float = 48.0
    """Memory per server, GB."""
    gpu_type: str | None = None
    """GPU type of these servers ("V100M32"); None: untyped."""

    def __post_init__(self) -> None:
        if self.n_servers < 1:
            raise ValueError("a server group needs at least 1 server")
        if min(self.gpus, self.cpus, self.mem_gb) < 0:
            raise ValueError("server capacities must be non-negative")


@dataclass(frozen=True)
class ClusterConfig:
    """Homogeneous servers, or groups of servers (`groups`). Default: the DL2/Harmony
    testbed server (two GTX 1080Ti, one 8-core/16-thread E5-1660, 48 GB): with the
    catalogue's demands (worker 1 GPU + 4 cores + 10 GB, PS 4 cores + 10 GB) it holds 2 GPU
    workers and 4 tasks in all, the same as the DL2 authors' simulator (8 slots per
    resource; a worker takes 4 GPU and 2 CPU slots, a PS 2).

    Servers may carry a GPU type. When any does, a job whose trace names GPU types
    (`JobSpec.gpu_type`) runs its workers only on servers of those types; a cluster without
    types ignores the jobs' types (the default homogeneous cluster replays any trace)."""

    n_servers: int = 96
    """Number of servers (DL2 simulator: 96 small setting, 500 large)."""
    gpus: float = 2.0
    """GPUs per server."""
    cpus: float = 16.0
    """CPU cores (hardware threads) per server."""
    mem_gb: float = 48.0
    """Memory per server, GB."""
    gpu_type: str | None = None
    """GPU type of every server of a homogeneous cluster (None: untyped)."""
    groups: tuple[ServerGroup, ...] = ()
    """A heterogeneous cluster: these groups of servers, in order (server indices follow
    it). Then n_servers is their total and gpus/cpus/mem_gb the largest server's (what
    per-server normalizations read); build it with `heterogeneous`."""

    def __post_init__(self) -> None:
        if self.n_servers < 1:
            raise ValueError("n_servers must be at least 1")
        if min(self.gpus, self.cpus, self.mem_gb) < 0:
            raise ValueError("server capacities must be non-negative")
        if self.groups:
            if self.gpu_type is not None:
                raise ValueError("a cluster of groups takes its GPU types from the groups")
            total = sum(g.n_servers for g in self.groups)
            if total != self.n_servers:
                raise ValueError(
                    f"n_servers {self.n_servers} differs from the groups' {total} servers; "
                    "use ClusterConfig.heterogeneous"
                )

    @classmethod
    def heterogeneous(cls, *groups: ServerGroup) -> ClusterConfig:
        """A cluster of the given server groups."""
        if not groups:
            raise ValueError("a heterogeneous cluster needs at least one server group")
        return cls(
            n_servers=sum(g.n_servers for g in groups),
            gpus=max(g.gpus for g in groups),
            cpus=max(g.cpus for g in groups),
            mem_gb=max(g.mem_gb for g in groups),
            groups=tuple(groups),
        )

    def server_capacity(self) -> np.ndarray:
        """(GPU, CPU, memory GB) of every server, (n_servers, 3)."""
        if not self.groups:
            return np.tile([self.gpus, self.cpus, self.mem_gb], (self.n_servers, 1)).astype(float)
        return np.concatenate(
            [np.tile([g.gpus, g.cpus, g.mem_gb], (g.n_servers, 1)) for g in self.groups]
        ).astype(float)

    def server_gpu_types(self) -> tuple[str | None, ...] | None:
        """Every server's GPU type, or None when no server has one."""
        if not self.groups:
            return None if self.gpu_type is None else (self.gpu_type,) * self.n_servers
        types = tuple(t for g in self.groups for t in (g.gpu_type,) * g.n_servers)
        return None if all(t is None for t in types) else types


@dataclass(frozen=True)
class SpeedConfig:
    """Where a job's speed comes from and how it varies (`tracelib.sim.speed`)."""

    truth: str = "measured"
    """Isolated speed of (model, workers, PSs). "measured": the DL2 authors' measured speed
    surface, interpolated (`tracelib.sim.measured`); "analytical": the catalogue's
    Optimus-form fit, the analytical model Optimus starts from and OfflineRL trains in."""
    measurements: str | None = None
    """CSV of measured speeds replacing the shipped DL2 file (same columns; docs/simulator.md)."""
    locality: bool = True
    """Jobs whose workers and PSs share servers communicate faster (catalogue locality gain)."""
    interference_scale: float = 1.0
    """Multiplier on the contention slowdown of co-located jobs (1 = calibrated, 0 = none)."""
    speed_variation: float = 0.1
    """Per-job speed deviation: each job's speed is times (1 + x*U[-1,1]) (DL2 section 2.2,
    Fig. 4: the same model's completion time varies from run to run in production; Fig. 13
    sweeps it). Default 10%; 0 turns it off."""
    slot_noise: float = 0.05
    """Per-decision run-to-run noise: speed times (1 + x*U[-1,1]) each interval (the DL2
    authors' simulator's TRAIN_SPEED_ERROR). Default 5%; 0 turns it off."""
    epoch_error: float = 0.0
    """Epoch-estimate error: a job really needs (1 + x*U[-1,1]) times the epochs the
    scheduler sees (DL2 Fig. 14)."""
    realloc_pause_s: float = RESTART_PAUSE_S
    """Training stops this long when a running job's workers/PSs or their servers change:
    checkpoint and restart takes tens of seconds (DL2 section 6.3, Fig. 11)."""
    start_delay_s: float = 0.0
    """Delay before a job's first interval of training (container start)."""

    def __post_init__(self) -> None:
        if self.truth not in TRUTHS:
            raise ValueError(f"truth must be one of {TRUTHS}, got {self.truth!r}")
        for name in ("speed_variation", "slot_noise", "epoch_error"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {value}")
        if self.interference_scale < 0 or self.realloc_pause_s < 0 or self.start_delay_s < 0:
            raise ValueError("interference_scale and delays must be non-negative")


@dataclass(frozen=True)
class SimConfig:
    """One simulation run: cluster, speed realism, time slots and the seed."""

    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    speed: SpeedConfig = field(default_factory=SpeedConfig)
    slot_s: float = 1200.0
    """Time slot (DL2, Harmony: 20 minutes). Decisions happen every slot unless the
    scheduler declares its own interval (Optimus: 600 s)."""
    seed: int = 0
    """Root seed; one independent stream per source of randomness is spawned from it."""
    window: int | None = None
    """At most this many unfinished jobs (earliest arrivals first) are visible to the
    scheduler each decision (DL2: 20 small, 40 large); None shows them all."""
    arrival_jitter_s: float = 0.0
    """Each arrival is delayed by U[0, x] seconds (arrivals stream); 0 keeps the workload's."""
    max_decisions: int = 100_000
    """Guard against a scheduler that never finishes the workload."""
    stall_decisions: int = 3
    """In the interval mode, this many decisions in a row where nothing trains and nothing
    is left to arrive raise SimulationStalled (a heuristic that can never place a job);
    0 lets time run on (an environment's agent may idle; it pays in reward)."""
    trigger: str = "interval"
    """When decisions happen. "interval": every scheduler interval (DL2, Harmony, Optimus;
    RL-TAPS' fixed steps with a short slot_s); "events": at every arrival and every
    completion, and nowhere else (Chic)."""
    fixed_placement: bool = False
    """Harmony: a job keeps the workers, PSs and servers it started with until it
    finishes; decisions only place waiting jobs (the engine rejects anything else)."""

    def __post_init__(self) -> None:
        if self.stall_decisions < 0:
            raise ValueError("stall_decisions must be >= 0")
        if self.trigger not in TRIGGERS:
            raise ValueError(f"trigger must be one of {TRIGGERS}, got {self.trigger!r}")
        if self.slot_s <= 0:
            raise ValueError("slot_s must be positive")
        if self.window is not None and self.window < 1:
            raise ValueError("window must be at least 1 (or None)")
        if self.arrival_jitter_s < 0:
            raise ValueError("arrival_jitter_s must be non-negative")
