"""Stalled simulations on demand, for the DL2 trainers' tests: deciding only at arrivals and
completions, an allocation that leaves nothing running with no arrival to come has no next
decision, and the simulator says so (`SimulationStalled`). Seen once in thousands of
rollouts; these tests make it happen where they choose."""

from __future__ import annotations

from collections.abc import Callable

from tracelib.envs import AllocationEnv
from tracelib.sim.engine import SimulationStalled


def stall_steps(monkeypatch, stalls: Callable[[int], bool]) -> dict[str, int]:
    """Patch `AllocationEnv.step` to raise `SimulationStalled` at every call whose count
    (from 1) `stalls` accepts; returns the counter ({"n": calls so far}, resettable)."""
    real_step = AllocationEnv.step
    calls = {"n": 0}

    def step(self, action):
        calls["n"] += 1
        if stalls(calls["n"]):
            raise SimulationStalled("at t=0s 6 jobs wait, none runs and none arrives")
        return real_step(self, action)

    monkeypatch.setattr(AllocationEnv, "step", step)
    return calls
