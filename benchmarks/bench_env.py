"""Raw gymnasium environment throughput, no network: DL2's allocation env in the large
setting (500 servers, 200 jobs, window 40), actions drawn uniformly among the valid ones
(stop only when nothing else is valid), whole episodes including the simulator's slots.

Target (issue: simulator): at least 20,000 actions per second on the 2-core machine.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

import numpy as np

from benchmarks.options import parse
from tracelib.envs import (
    AllocationEnv,
    AllocationEnvConfig,
    AllocationObsConfig,
    PlacementEnv,
    PlacementEnvConfig,
    PlacementObsConfig,
)
from tracelib.sim import ClusterConfig, SimConfig, dl2_like_frame, jobs_from_frame


def _episode(env, seed: int) -> tuple[int, float]:
    """Steps and wall seconds of one episode under random valid actions."""
    rng = np.random.default_rng(seed)
    draws = iter(rng.integers(0, 2**62, size=2_000_000).tolist())
    env.reset(seed=seed)
    steps = 0
    start = time.perf_counter()
    while True:
        valid = np.flatnonzero(env.action_masks()[:-1]) if isinstance(env, AllocationEnv) else None
        if valid is None:
            valid = np.flatnonzero(env.action_masks())
        action = valid[next(draws) % len(valid)] if len(valid) else env.action_space.n - 1
        _, _, terminated, truncated, _ = env.step(action)
        steps += 1
        if terminated or truncated:
            return steps, time.perf_counter() - start


@dataclass(frozen=True)
class Options:
    """`python -m benchmarks.bench_env` takes no options."""


def main(argv: list[str]) -> int:
    """Print actions per second of the allocation and placement environments."""
    parse(Options, argv)
    jobs = jobs_from_frame(dl2_like_frame(200, 0, max_arrivals_per_slot=10))
    env = AllocationEnv(
        [jobs],
        AllocationEnvConfig(
            obs=AllocationObsConfig(window=40),
            sim=SimConfig(cluster=ClusterConfig(n_servers=500)),
        ),
    )
    steps, wall = _episode(env, 0)
    print(
        f"AllocationEnv (DL2 large: 500 servers, 200 jobs, J=40): {steps:,} actions in "
        f"{wall:.2f} s = {steps / wall:,.0f} actions/s (target >= 20,000)"
    )
    small = jobs_from_frame(dl2_like_frame(60, 1))
    penv = PlacementEnv(
        [small],
        PlacementEnvConfig(
            obs=PlacementObsConfig(window=10),
            sim=SimConfig(cluster=ClusterConfig(n_servers=20), fixed_placement=True),
        ),
    )
    steps, wall = _episode(penv, 0)
    print(
        f"PlacementEnv (Harmony-like: 20 servers, 60 jobs, N'=10): {steps:,} actions in "
        f"{wall:.2f} s = {steps / wall:,.0f} actions/s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
