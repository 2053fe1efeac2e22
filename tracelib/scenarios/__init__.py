"""The four papers' settings as named scenarios, in one place, beside the warehouse's
production-derived and synthetic workload sets.

    from tracelib.scenarios import scenario, names
    s = scenario("harmony-poisson")
    jobs = s.sequence(seed)                      # one job sequence, a pure function of the seed
    Simulator(jobs, policy, s.sim_config(seed), s.catalogue, speed_model=s.speed_model)

A scenario is what a paper evaluates in: its cluster, job catalogue, arrival process,
decision trigger ("slots": every slot; "events": on arrivals and completions; "steps":
fixed preemptive steps), how a sequence is drawn from a seed and the `SimConfig` it runs
with. Its name is also the `workload_set` its own evaluation writes (eval_summary rows
with `scenario` = its `paper`, models/evaluation):

    dl2-small, dl2-large              DL2's settings (tracelib.scenarios.dl2)
    harmony-uniform/-poisson/-google  Harmony's arrival patterns (tracelib.scenarios.harmony)
    chic@<rate>/h                     Chic at a Poisson rate per hour, e.g. chic@1.8/h
                                      (tracelib.scenarios.chic)
    rl-taps-bimodal                   RL-TAPS' bimodal sequences on its GPU topology
                                      (tracelib.scenarios.rltaps)
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace

from tracelib.catalogue import DL2_CATALOGUE, JobType
from tracelib.scenarios.chic import ChicScenario
from tracelib.scenarios.dl2 import DL2_LARGE, DL2_SMALL, DL2Setting
from tracelib.scenarios.harmony import PATTERNS, ArrivalConfig, harmony_sim, sequence
from tracelib.scenarios.rltaps import rl_taps_jobs, rl_taps_scenario
from tracelib.sim.config import ClusterConfig, SimConfig
from tracelib.sim.jobs import JobSpec
from tracelib.synthetic import BimodalConfig

TRIGGERS = ("slots", "events", "steps")


@dataclass(frozen=True)
class Scenario:
    """One paper's setting under its registry name."""

    name: str
    paper: str
    """dl2, harmony, chic or rl-taps (eval_summary.scenario of its own evaluation)."""
    trigger: str
    """When decisions are made: "slots", "events" or "steps" (TRIGGERS)."""
    arrivals: str
    """The arrival process, in words."""
    cluster: ClusterConfig
    catalogue: tuple[JobType, ...]
    sim_config: Callable[[int], SimConfig]
    """seed -> the simulator settings its own evaluation runs with."""
    sequence: Callable[[int], tuple[JobSpec, ...]]
    """seed -> one job sequence."""
    speed_model: object | None = None
    """A speed model other than the simulator's default (RL-TAPS' topology)."""


def dl2_scenario(setting: DL2Setting) -> Scenario:
    return Scenario(
        name=setting.name,
        paper="dl2",
        trigger="slots",
        arrivals=f"up to {setting.max_arrivals_per_slot} per slot, {setting.n_jobs} jobs",
        cluster=setting.cluster(),
        catalogue=DL2_CATALOGUE,
        sim_config=setting.sim_config,
        sequence=setting.sequence,
    )


def harmony_set(pattern: str) -> str:
    """Registry name of Harmony's scenario under an arrival pattern ("harmony-uniform")."""
    return f"harmony-{pattern}"


def harmony_scenario(pattern: str, arrivals: ArrivalConfig | None = None) -> Scenario:
    cfg = replace(arrivals or ArrivalConfig(), pattern=pattern)
    sim = harmony_sim()
    return Scenario(
        name=harmony_set(pattern),
        paper="harmony",
        trigger="slots",
        arrivals=f"{pattern} arrivals per interval, {cfg.n_jobs} jobs",
        cluster=sim.cluster,
        catalogue=DL2_CATALOGUE,
        sim_config=lambda seed: replace(sim, seed=seed),
        sequence=lambda seed: sequence(cfg, seed),
    )


def chic_set(rate_per_hour: float) -> str:
    """Registry name of Chic's scenario at a Poisson rate ("chic@1.8/h")."""
    return f"chic@{rate_per_hour:g}/h"


def chic_scenario(rate_per_hour: float, jobs_per_sequence: int = 30) -> Scenario:
    chic = ChicScenario(rate_per_hour=rate_per_hour, jobs_per_sequence=jobs_per_sequence)
    return Scenario(
        name=chic_set(rate_per_hour),
        paper="chic",
        trigger="events",
        arrivals=f"Poisson, {rate_per_hour:g} per hour, {jobs_per_sequence} jobs",
        cluster=chic.cluster(),
        catalogue=chic.catalogue,
        sim_config=lambda seed: chic.sim_config("events", seed),
        sequence=chic.sequence,
    )


RL_TAPS_SET = "rl-taps-bimodal"
"""Registry name of RL-TAPS' scenario."""


def rl_taps_registry_scenario(n_jobs: int = 30) -> Scenario:
    setting = rl_taps_scenario()
    return Scenario(
        name=RL_TAPS_SET,
        paper="rl-taps",
        trigger="steps",
        arrivals=f"one job per step (bimodal lengths), {n_jobs} jobs",
        cluster=setting.cfg.cluster,
        catalogue=setting.catalogue,
        sim_config=lambda seed: rl_taps_scenario(seed=seed).cfg,
        sequence=lambda seed: rl_taps_jobs(BimodalConfig.rl_taps(n_jobs=n_jobs, seed=seed)),
        speed_model=setting.speed_model,
    )


_FIXED: dict[str, Callable[[], Scenario]] = {
    DL2_SMALL.name: lambda: dl2_scenario(DL2_SMALL),
    DL2_LARGE.name: lambda: dl2_scenario(DL2_LARGE),
    **{harmony_set(p): (lambda p=p: harmony_scenario(p)) for p in PATTERNS},
    RL_TAPS_SET: rl_taps_registry_scenario,
}
_CHIC = re.compile(r"chic@([0-9]*\.?[0-9]+)/h")


def names() -> tuple[str, ...]:
    """Every registered name (Chic's at the paper's rates 0.9, 1.8, 2.7; any rate parses)."""
    return (*_FIXED, *(chic_set(r) for r in (0.9, 1.8, 2.7)))


def scenario(name: str) -> Scenario:
    """The scenario registered under `name` (KeyError naming the known ones)."""
    if name in _FIXED:
        return _FIXED[name]()
    match = _CHIC.fullmatch(name)
    if match:
        return chic_scenario(float(match.group(1)))
    raise KeyError(f"unknown scenario {name!r}; known: {', '.join(names())} (chic@<rate>/h)")


def is_scenario(name: str) -> bool:
    """Whether a workload set name is a paper's scenario rather than a warehouse set."""
    try:
        scenario(name)
    except KeyError:
        return False
    return True


__all__ = [
    "RL_TAPS_SET",
    "TRIGGERS",
    "Scenario",
    "chic_set",
    "harmony_set",
    "is_scenario",
    "names",
    "scenario",
]
