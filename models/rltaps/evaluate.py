"""RL-TAPS' own scenario (its section 5: held-out bimodal sequences) through the one evaluation
(`models.evaluation`)."""

from __future__ import annotations

from models.evaluation import (
    EvalTables,
    RunOutcome,
    Workload,
    scenario_tables,
    scenario_workloads,
)
from models.rltaps.policy import (
    RLTapsPolicy,
    episode_job_rows,
    job_sequences,
    scheduler_episodes,
)
from models.rltaps.stage_config import RLTapsStageConfig
from tracelib.progress import ProgressFn, no_progress
from tracelib.provenance import canonical_json
from tracelib.scenarios import RL_TAPS_SET
from tracelib.sim.topology import RLTAPS_STEP_S

SCENARIO = "rl-taps"
"""eval_summary.scenario of RL-TAPS' own evaluation; its set is rl-taps-bimodal."""


def rltaps_tables(
    schedulers: dict[str, RLTapsPolicy | None],
    policy_ids: dict[str, str],
    cfg: RLTapsStageConfig,
    eval_id: str,
    progress: ProgressFn = no_progress,
) -> EvalTables:
    """RL-TAPS' own scenario (section 5) through the one evaluation: every scheduler (a
    learned policy, greedy, or a picker name with first-fit GPUs) on `cfg.test_sequences`
    held-out bimodal sequences (set rl-taps-bimodal, one run each), each run's reward G_1
    in eval_runs.reward and its jobs' slowdowns in eval_jobs; the ratios pair mean
    slowdown (the paper's metric) by sequence. Pure: same inputs, same tables."""
    seeds = cfg.test_seeds()
    sequences = job_sequences(seeds, cfg.reinforce.n_jobs)
    env_cfg = cfg.env_config()
    # The pickers' generators run through the sequences in order (as RL-TAPS' evaluation
    # always ran them), so the episodes are simulated first and read per sequence.
    episodes = scheduler_episodes(schedulers, sequences, env_cfg, seed=cfg.seed, progress=progress)

    baselines = [name for name in schedulers if schedulers[name] is None]
    val_seeds = cfg.validation_seeds()
    val_sequences = job_sequences(val_seeds, cfg.reinforce.n_jobs)
    held_out = (
        scheduler_episodes(dict.fromkeys(baselines), val_sequences, env_cfg, seed=cfg.seed)
        if val_seeds
        else {}
    )

    def replayed(name: str, episodes=episodes):
        def run(workload: Workload, _seed: int) -> RunOutcome:
            ep = episodes[name][workload.sequence_no]
            return RunOutcome(
                episode_job_rows(ep, workload.jobs),
                policy_ids.get(name, name),
                reward=ep.first_return(cfg.reinforce.gamma),
            )

        return run

    n_jobs = cfg.reinforce.n_jobs
    sequence_set = f"rl-taps-bimodal-test:{n_jobs}x{cfg.test_sequences}:seed{cfg.seed}"
    ids = [f"{sequence_set}:{seed}" for seed in seeds]
    workloads = scenario_workloads(RL_TAPS_SET, ids, seeds, sequences)
    val_ids = [f"{RL_TAPS_SET}-validation:{n_jobs}:seed{cfg.seed}:{seed}" for seed in val_seeds]
    val_workloads = scenario_workloads(
        RL_TAPS_SET, val_ids, val_seeds, val_sequences, split="validation"
    )
    config = canonical_json({**cfg.eval_config(), "sequence_set": sequence_set, "seeds": seeds})
    return scenario_tables(
        eval_id,
        [({name: replayed(name) for name in schedulers}, workloads, env_cfg.topology.n_gpus)],
        config=config,
        scenario=SCENARIO,
        reference="sjf" if "sjf" in baselines else (baselines or list(schedulers))[0],
        slot_s=RLTAPS_STEP_S,
        families={name: SCENARIO for name in schedulers if schedulers[name] is not None},
        metric="mean_slowdown",
        selection=[
            (
                {name: replayed(name, held_out) for name in baselines},
                val_workloads,
                env_cfg.topology.n_gpus,
            )
        ]
        if val_seeds
        else (),
    )
