"""The policy a decision server answers with: a heuristic by its arena name, or a registered
learned policy (a system's newest, or one policy id) loaded through its verified checkpoint
and composed with the arena's default for the other half of the decision, exactly as a
learned replay runs it (`pipelines.replay_learned`)."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from models.evaluation import (
    EvalConfig,
    LearnedPolicy,
    NotApplicable,
    applicable,
    resolve_scheduler,
)
from pipelines.replay_learned import FAMILIES
from pipelines.shadow.adapter import Outcome, decide
from tracelib.scenarios.dl2 import DL2_SMALL
from tracelib.shadow.schemas import Snapshot
from tracelib.sim.policy import DecisionPolicy
from warehouse.db import resolve_path


class PolicyUnavailable(ValueError):
    """The requested policy cannot serve (unknown, unregistered, or not runnable here)."""


@dataclass
class ServedPolicy:
    """A policy ready to answer snapshots. `make(n_servers)` builds the decision policy for
    a cluster of that many servers (a learned placement network is sized to the cluster);
    the last few are kept. Calls are serialized: the policies keep per-call state (torch
    modules, builders) that is not meant to be shared between threads."""

    name: str
    """What the decision's `policy` field says: the family or heuristic name."""
    policy_id: str
    """The registered policy id, or the heuristic's name."""
    make: Callable[[int], DecisionPolicy]
    seed: int = 0
    cache_size: int = 8
    _cache: OrderedDict[int, DecisionPolicy] = field(default_factory=OrderedDict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def _policy(self, n_servers: int) -> DecisionPolicy:
        policy = self._cache.get(n_servers)
        if policy is None:
            policy = self._cache[n_servers] = self.make(n_servers)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(n_servers)
        return policy

    def decide(self, snap: Snapshot) -> Outcome:
        """The policy's decision on `snap`, valid on the live cluster (`adapter.decide`), with
        the seconds it took (waiting for an earlier call excluded). The placement random
        stream is seeded afresh for every call, so one snapshot always gets one decision."""
        with self._lock:
            started = time.perf_counter()
            policy = self._policy(len(snap.servers))
            rng = np.random.default_rng(np.random.SeedSequence(self.seed))
            outcome = decide(policy, snap, rng)
            return replace(outcome, compute_s=time.perf_counter() - started)


def _learned_maker(ref: LearnedPolicy) -> Callable[[int], DecisionPolicy]:
    def make(n_servers: int) -> DecisionPolicy:
        # The learned replay's setting: the DL2 cluster at this size, every job visible.
        cfg = EvalConfig(
            schedulers=("fifo",),
            n_seeds=1,
            reference="fifo",
            cluster=replace(DL2_SMALL.cluster(), n_servers=max(1, n_servers)),
            window=None,
            learned=(ref,),
        )
        return cfg.policy(ref.name)

    return make


def load_served_policy(
    spec: str, warehouse: str | Path | None = None, seed: int = 0
) -> ServedPolicy:
    """The policy `spec` names: a heuristic of the arena (fifo, drf, optimus-events, srtf,
    "allocation+placement"...), a learned family (dl2, harmony, chic, chic-pair, rl-taps:
    its newest registered policy), or a registered policy id. PolicyUnavailable otherwise."""
    if applicable(spec):
        policy = resolve_scheduler(spec)
        if policy.uses_oracle:
            raise PolicyUnavailable(
                f"{spec!r} reads the simulator's true speeds, which a live cluster has not"
            )
        return ServedPolicy(spec, spec, lambda _n: policy, seed=seed)
    from pipelines.registry import SYSTEMS
    from pipelines.stages import learned_policies

    path = resolve_path(warehouse)
    if not path.exists():
        raise PolicyUnavailable(
            f"{spec!r} is not a heuristic, and there is no warehouse at {path} to find a "
            "registered policy in (run `schedlab run` first, or pass --warehouse)"
        )
    key = FAMILIES.get(spec, spec)
    try:
        (ref,) = learned_policies(path, {spec: key}, SYSTEMS.loaders())
    except ValueError as exc:
        raise PolicyUnavailable(str(exc)) from None
    family = next((f for f, system in FAMILIES.items() if system == ref.system), ref.system)
    served = ServedPolicy(family, ref.policy_id, _learned_maker(ref), seed=seed)
    try:
        # Load it once now: a bad checkpoint or a policy bound to another cluster is refused
        # at start, not on the first request.
        probe = served._policy(DL2_SMALL.n_servers)
    except (NotApplicable, ValueError, OSError) as exc:
        raise PolicyUnavailable(f"policy {ref.policy_id} cannot serve: {exc}") from None
    if probe.uses_oracle:
        raise PolicyUnavailable(f"policy {ref.policy_id} reads the simulator's true speeds")
    return served
