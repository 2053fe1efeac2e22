"""Chic's own scenario (Chic section 6) through the one evaluation (`models.evaluation`)."""

from __future__ import annotations

from dataclasses import asdict, replace

from models.chic.config import ChicEvalConfig
from models.chic.policy import ChicPolicy, episode_results
from models.evaluation import (
    EvalTables,
    RunOutcome,
    Workload,
    best_rates,
    job_rows,
    scenario_tables,
    scenario_workloads,
    simulated,
)
from models.heuristics.optimus import Optimus
from tracelib.progress import ProgressFn, no_progress
from tracelib.provenance import canonical_json
from tracelib.scenarios import chic_set
from tracelib.scenarios.chic import ChicScenario, chic_speed, split_seeds
from tracelib.sim import LoadBalancing, Scheduler

SCENARIO = "chic"
"""eval_summary.scenario of Chic's own evaluation; its sets are chic@<rate>/h."""

OPTIMUS_EVENTS = "optimus-events"
"""Optimus deciding at every arrival and completion (`ChicEvalConfig.optimus_events`)."""


def _replayed(
    results: list, policy_id: str, rates: dict[str, float], delay: float, scenario: ChicScenario
):
    """A run function that reads each sequence's already simulated episode."""

    def run(workload: Workload, _seed: int) -> RunOutcome:
        result = results[workload.sequence_no]
        return RunOutcome(job_rows(result, None, rates, delay, scenario.catalogue), policy_id)

    return run


def chic_tables(
    cfg: ChicEvalConfig,
    policies: dict[tuple[str, float], str],
    loaded: dict[str, ChicPolicy],
    eval_id: str,
    progress: ProgressFn = no_progress,
    teachers: dict[str, str] | None = None,
) -> EvalTables:
    """Chic's own scenario (section 6) through the one evaluation: at every rate (set
    chic@<rate>/h), Optimus at each interval and every policy of `policies` ((variant,
    trained-at rate) -> policy id, loaded in `loaded`) on the same unseen sequences (one
    run each; Optimus' simulator seed is the sequence's seed, a policy's actions are sampled
    per sequence from `cfg.seed`, as Chic's own evaluation always ran them). Paired ratios
    to the best Optimus interval, and each policy's to its warm start's teacher
    (`teachers`: policy id -> the teacher's scheduler name). Pure: same inputs, same
    tables."""
    seeds = split_seeds("test", cfg.test_sequences, cfg.seed)
    val_seeds = split_seeds("validation", cfg.validation_sequences, cfg.seed)
    config = canonical_json({**asdict(cfg), "sequence_seeds": list(seeds)})
    families: dict[str, str] = {}
    taught: dict[str, str] = {}

    def parts():
        for done, rate in enumerate(cfg.rates, 1):
            scenario = ChicScenario(rate_per_hour=rate, jobs_per_sequence=cfg.jobs_per_sequence)
            sequences = scenario.sequences(seeds)
            rates = best_rates(scenario.cluster(), chic_speed(), scenario.catalogue)
            delay = chic_speed().start_delay_s
            schedulers = _optimus_schedulers(cfg, scenario)
            for system, pid in _learned(cfg, policies, rate):
                # One environment runs every sequence of the rate (as Chic's own evaluation
                # always did): the episodes are simulated once, then read per sequence.
                results = episode_results(
                    loaded[pid], sequences, scenario, seed=cfg.seed, sim_seeds=seeds
                )
                schedulers[system] = _replayed(results, pid, rates, delay, scenario)
                families[system] = SCENARIO
                if (teacher := (teachers or {}).get(pid)) in schedulers:
                    taught[system] = teacher
            ids = [f"{chic_set(rate)}:{seed}" for seed in seeds]
            yield (
                schedulers,
                scenario_workloads(chic_set(rate), ids, seeds, sequences),
                scenario.gpus,
            )
            progress(done, len(cfg.rates))

    def selection():
        for rate in cfg.rates if val_seeds else ():
            scenario = ChicScenario(rate_per_hour=rate, jobs_per_sequence=cfg.jobs_per_sequence)
            ids = [f"{chic_set(rate)}:validation:{seed}" for seed in val_seeds]
            workloads = scenario_workloads(
                chic_set(rate), ids, val_seeds, scenario.sequences(val_seeds), "validation"
            )
            yield _optimus_schedulers(cfg, scenario), workloads, scenario.gpus

    return scenario_tables(
        eval_id,
        parts(),
        config=config,
        scenario=SCENARIO,
        reference="optimus-600",
        slot_s=600.0,
        families=families,
        teachers=taught,
        selection=selection(),
    )


def _learned(
    cfg: ChicEvalConfig, policies: dict[tuple[str, float], str], rate: float
) -> list[tuple[str, str]]:
    """The policies Chic's evaluation runs at `rate`, by scheduler name: each variant's
    trained at that rate and the one trained at the reference rate (where there is one)."""
    out = []
    for variant in ("chic", "chic-pair"):
        for system, pid in (
            (variant, policies.get((variant, rate))),
            (
                f"{variant}-trained-at-{cfg.reference_rate:g}",
                policies.get((variant, cfg.reference_rate)),
            ),
        ):
            if pid is not None:
                out.append((system, pid))
    return out


def _optimus_schedulers(cfg: ChicEvalConfig, scenario: ChicScenario) -> dict:
    """Optimus at each interval of `cfg` and at every event, each simulated with its
    sequence's seed: the baselines of Chic's evaluation at one rate."""
    rates = best_rates(scenario.cluster(), chic_speed(), scenario.catalogue)
    delay = chic_speed().start_delay_s
    schedulers = {
        f"optimus-{interval:g}": simulated(
            lambda interval=interval: Scheduler(Optimus(interval_s=interval), LoadBalancing()),
            lambda seed, scenario=scenario: scenario.sim_config("interval", seed),
            catalogue=scenario.catalogue,
            rates=rates,
            start_delay_s=delay,
            policy_name=f"optimus-{interval:g}",
        )
        for interval in cfg.optimus_intervals
    }
    if cfg.optimus_events:
        schedulers[OPTIMUS_EVENTS] = simulated(
            lambda: Scheduler(Optimus(), LoadBalancing()),
            lambda seed, scenario=scenario: replace(
                scenario.sim_config("events", seed), window=None
            ),
            catalogue=scenario.catalogue,
            rates=rates,
            start_delay_s=delay,
            policy_name=OPTIMUS_EVENTS,
        )
    return schedulers
