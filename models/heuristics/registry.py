"""Typed registry: scheduler names -> factories, so configs and CLIs name policies.

make_scheduler("drf")                        # DRF + load balancing (DL2's setting)
make_scheduler("optimus", "bin-packing")
ALLOCATIONS.names(), PLACEMENTS.names()
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Generic, TypeVar

from models.heuristics.drf import DRF
from models.heuristics.lif import lif_line, lif_quad
from models.heuristics.optimus import Optimus, OptimusOracle
from models.heuristics.pickers import SJF, FirstFit, Random, TetrisPicker
from models.heuristics.priority import FIFO, SRTF
from models.heuristics.replay import REPLAY_RULES
from models.heuristics.tetris import Tetris
from models.heuristics.tiresias import TiresiasGittins, TiresiasLAS
from tracelib.sim.placement import BinPacking, LoadBalancing, RandomPlacement
from tracelib.sim.policy import AllocationPolicy, PlacementPolicy, RequestedAllocation, Scheduler
from tracelib.sim.replay import ReplayRule

T = TypeVar("T")


@dataclass(frozen=True)
class Registry(Generic[T]):
    """Immutable name -> factory map with a helpful error for unknown names."""

    kind: str
    factories: Mapping[str, Callable[[], T]]

    def names(self) -> tuple[str, ...]:
        """Registered names, sorted."""
        return tuple(sorted(self.factories))

    def create(self, name: str) -> T:
        """A new policy registered under `name`; KeyError lists the known names."""
        try:
            factory = self.factories[name]
        except KeyError:
            raise KeyError(
                f"unknown {self.kind} {name!r}; known: {', '.join(self.names())}"
            ) from None
        return factory()


ALLOCATIONS: Registry[AllocationPolicy] = Registry(
    "allocation policy",
    MappingProxyType(
        {
            "fifo": FIFO,
            "srtf": SRTF,
            "drf": DRF,
            "tetris": Tetris,
            "optimus": Optimus,
            "optimus-oracle": OptimusOracle,
            "optimus-300": lambda: Optimus(name="optimus-300", interval_s=300.0),
            "optimus-events": lambda: Optimus(name="optimus-events", trigger="events"),
            "requested": RequestedAllocation,
            "sjf": SJF,
            "random": Random,
            "tetris-picker": TetrisPicker,
            "tiresias-las": TiresiasLAS,
            "tiresias-gittins": TiresiasGittins,
            # The SJF picker re-picking running jobs each decision: shortest remaining time
            # first, by the user's epoch estimate at the catalogue speed (as `srtf`).
            "srtf-preemptive": lambda: SJF(name="srtf-preemptive", preemptive=True),
        }
    ),
)

PLACEMENTS: Registry[PlacementPolicy] = Registry(
    "placement policy",
    MappingProxyType(
        {
            "load-balancing": LoadBalancing,
            "bin-packing": BinPacking,
            "random": RandomPlacement,
            "first-fit": FirstFit,
            # Harmony's LIF baselines, fitted once per process on a small default sample set.
            "lif-line": lif_line,
            "lif-quad": lif_quad,
        }
    ),
)

REPLAYS: Registry[ReplayRule] = Registry(
    "replay rule",
    MappingProxyType({name: (lambda r=rule: r) for name, rule in REPLAY_RULES.items()}),
)
"""Whole-trace replay rules (`schedlab replay`, `models/heuristics/replay.py`)."""

HEURISTICS = ("fifo", "srtf", "drf", "tetris", "optimus", "optimus-oracle")
"""The DL2 baselines (plus the oracle reference), in the order reports list them."""

OPTIMUS_VARIANTS = ("optimus-300", "optimus-events")
"""Optimus deciding more often than its paper's 600 s: every 300 s (Chic's other baseline)
and at every arrival and completion, the best of the intervals measured in the arena
(average JCT 0.94 times Optimus-600's; 300 s 0.97, 150 s 0.95, 1,200 s 1.07): every learned
system is compared with Optimus at its best interval."""

OTHER_BASELINES = ("lif-line", "lif-quad", "requested+load-balancing", "sjf+first-fit")
"""The other papers' baselines, as they run beside DL2's on any workload: Harmony's
placement heuristics (LIF-Line, LIF-Quad, load balancing) with the jobs' requested
allocation, and RL-TAPS' shortest-job-first picker with first-fit GPUs."""


PREEMPTIVE_BASELINES = ("tiresias-las", "tiresias-gittins", "srtf-preemptive")
"""Preemptive schedulers with fixed worker counts (each job its request, all or nothing):
Tiresias' discretized 2D-LAS and 2D-Gittins (`models/heuristics/tiresias.py`, the replay
rules' knobs) and shortest remaining time first. Every decision they re-rank every visible
job and pause the running jobs that no longer fit; a paused job pays the simulator's
`SpeedConfig.realloc_pause_s` when it resumes, as RL-TAPS' arena policy's do."""


def make_scheduler(allocation: str, placement: str = "load-balancing") -> Scheduler:
    """A scheduler from registered names (placement defaults to DL2's load balancing)."""
    return Scheduler(ALLOCATIONS.create(allocation), PLACEMENTS.create(placement))
