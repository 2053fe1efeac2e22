"""Heuristic schedulers (pure numpy, no torch): DL2's baselines and placement policies.

Allocation: FIFO, SRTF, DRF, Tetris, Optimus (online NNLS speed fit) and optimus-oracle
(true speed model); the preemptive Tiresias 2D-LAS and 2D-Gittins and SRTF with fixed
worker counts. Placement policies live in `tracelib.sim.placement` (they are the
cluster's mechanics) and are re-exported here. `make_scheduler(name, placement)` builds a
`Scheduler` from registered names.
"""

from models.heuristics.drf import DRF
from models.heuristics.optimus import Optimus, OptimusOracle
from models.heuristics.priority import FIFO, SRTF
from models.heuristics.registry import (
    ALLOCATIONS,
    HEURISTICS,
    PLACEMENTS,
    PREEMPTIVE_BASELINES,
    REPLAYS,
    Registry,
    make_scheduler,
)
from models.heuristics.tetris import Tetris
from models.heuristics.tiresias import TiresiasGittins, TiresiasLAS
from tracelib.sim.placement import BinPacking, LoadBalancing, RandomPlacement

__all__ = [
    "ALLOCATIONS",
    "DRF",
    "FIFO",
    "HEURISTICS",
    "PLACEMENTS",
    "PREEMPTIVE_BASELINES",
    "REPLAYS",
    "SRTF",
    "BinPacking",
    "LoadBalancing",
    "Optimus",
    "OptimusOracle",
    "RandomPlacement",
    "Registry",
    "Tetris",
    "TiresiasGittins",
    "TiresiasLAS",
    "make_scheduler",
]
