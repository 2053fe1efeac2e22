"""Harmony's steps in `schedlab run` (pipelines/system.py `Steps`): the reward predictor on
the interference samples, the placement DRL and its Table II ablations, the evaluation under
three arrival patterns, and optionally the online update from the speeds it observed; and
its placement policy trained for the arena (`HarmonyArenaConfig`), which places beside the
heuristics in the evaluation on every workload set (`arena`, `loaders`)."""

from __future__ import annotations

from dataclasses import asdict, replace

from prefect import task

from models.evaluation import EvalConfig, LearnedPolicy, Loader, NotApplicable
from models.harmony.stage_config import HarmonyArenaConfig, HarmonyRunConfig, HarmonyStageConfig
from models.harmony.train import WarmStart
from pipelines.progress import QUIET, Reporter
from pipelines.retries import IO_RETRIES
from pipelines.sections import Section, exists, frame_table
from pipelines.system import ArenaPolicies, Pending, RunContext, arena_configs
from pipelines.system_steps import arena_entry, results, submit_stage, view_section
from pipelines.systems.harmony.stages import (
    ARENA_SYSTEM,
    evaluate_harmony_stage,
    fit_reward_model_stage,
    online_update_stage,
    train_arena_stage,
    train_placement_stage,
    warm_start_stage,
)
from pipelines.trained import TrainResult
from tracelib.sim import DecisionPolicy, Scheduler
from warehouse import read_frame


@task(name="harmony-warm-start", **IO_RETRIES)
def warm_task(
    warehouse: str | None, cfg: HarmonyStageConfig, reward: dict, progress: Reporter = QUIET
) -> dict[tuple, WarmStart]:
    # No stage line: on a run with nothing to train it does nothing; the warm start, when
    # made, prints its own line.
    return warm_start_stage(warehouse, cfg, reward["reward_model"]["policy_id"], progress)


def _placement(
    warehouse: str | None,
    cfg: HarmonyStageConfig,
    variant: str,
    reward: dict,
    warm: dict[tuple, WarmStart],
    progress: Reporter,
) -> TrainResult:
    one = replace(cfg, variants=(variant,))
    rid = reward["reward_model"]["policy_id"]
    return train_placement_stage(warehouse, one, rid, progress, warm)[variant]


def _arena(
    warehouse: str | None,
    cfg: HarmonyArenaConfig,
    reward: dict,
    own: dict | None,
    progress: Reporter,
) -> TrainResult:
    rid, own_id = reward["reward_model"]["policy_id"], own["policy_id"] if own else None
    return train_arena_stage(warehouse, cfg, rid, own_id, progress)


@task(name="harmony-evaluate", **IO_RETRIES)
def evaluate_task(
    warehouse: str | None, cfg: HarmonyStageConfig, progress: Reporter = QUIET
) -> dict:
    with progress.stage("Harmony evaluation"):
        result = evaluate_harmony_stage(warehouse, cfg, progress)
    return {
        "eval_id": result.eval_id,
        "online_samples": result.online_samples,
        "summary": result.summary.to_dicts(),
    }


@task(name="harmony-online-update", **IO_RETRIES)
def online_task(warehouse: str | None, cfg: HarmonyStageConfig, progress: Reporter = QUIET) -> dict:
    with progress.stage("Harmony online update"):
        reward, placed = online_update_stage(warehouse, cfg, progress)
    return {"reward": asdict(reward), "placement": {k: asdict(v) for k, v in placed.items()}}


def prepare(run: RunContext, cfg: HarmonyRunConfig) -> Pending:
    """The reward predictor, once the interference samples are in."""
    reward = submit_stage(
        "harmony-fit-reward-model",
        "Harmony reward predictor",
        fit_reward_model_stage,
        run,
        cfg.stage,
        wait_for=[run.interference],
    )
    return {"reward": reward}


def train(run: RunContext, cfg: HarmonyRunConfig, pending: Pending) -> Pending:
    """Harmony and each ablation on rollouts scored by that predictor; then Harmony for the
    arena on each arena set, from this run's own-scenario Harmony when the arena has no
    policy yet (it waits for that training, so what it starts from never depends on which
    task finishes first). The variants share one warm start, made first (`warm_task`)."""
    warm = warm_task.submit(run.warehouse, cfg.stage, pending["reward"], run.progress)
    placement = {
        v: submit_stage(
            "harmony-train-placement",
            f"Harmony placement {v}",
            _placement,
            run,
            cfg.stage,
            v,
            pending["reward"],
            warm,
        )
        for v in cfg.stage.variants
    }
    if cfg.arena.train.updates <= 0:
        return {"placement": placement}
    own = placement.get("harmony")
    arena = {
        name: submit_stage(
            "harmony-train-arena",
            f"Harmony placement {ARENA_SYSTEM} ({one.workload_set})",
            _arena,
            run,
            one,
            pending["reward"],
            own,
        )
        for name, one in arena_configs(run, cfg.arena).items()
    }
    return {"placement": placement, "arena": arena}


def evaluate(run: RunContext, cfg: HarmonyRunConfig, pending: Pending) -> Pending:
    """Every policy and the baselines under three arrival patterns, after its training."""
    wait = list(pending["placement"].values())
    return {
        "evaluation": evaluate_task.submit(run.warehouse, cfg.stage, run.progress, wait_for=wait)
    }


def collect(run: RunContext, cfg: HarmonyRunConfig, pending: Pending) -> dict:
    """The predictor, every placement policy, the evaluation; then the online update (which
    consumes what the evaluation observed) when asked for."""
    out = {"arena": {}, **results(pending)}
    if cfg.online_update:
        out["online_update"] = online_task(run.warehouse, cfg.stage, run.progress)
    return out


def report(con) -> list[Section]:
    """The reward predictor against LIF and gradient boosting, and the evaluation."""
    section = Section(
        "Harmony: interference-aware placement",
        "Mean relative error of job-speed predictors on held-out interference samples "
        "(Harmony's predictor against LIF-Line, LIF-Quad and gradient boosting), then "
        "Harmony, its ablations and the baselines in Harmony's scenario.",
        empty="No reward model has been fitted yet.",
    )
    if exists(con, "reward_model_quality"):
        quality = read_frame(con, "SELECT * FROM reward_model_quality ORDER BY ALL")
        if quality.height:
            section.tables.append(frame_table("Held-out error", quality))
    return view_section(
        con, section, "harmony_evaluation", ("config", "eval_config", "code_version")
    )


def config() -> HarmonyRunConfig:
    """Harmony's run config at the default budget."""
    return HarmonyRunConfig()


def arena(run: RunContext, pending: Pending) -> ArenaPolicies:
    """Its arena policy per set, under the scheduler name "harmony" (none when not
    trained)."""
    return arena_entry("harmony", pending)


def load_arena_policy(ref: LearnedPolicy, cfg: EvalConfig) -> DecisionPolicy:
    """A Harmony placement checkpoint placing in the evaluation, sized to its cluster and
    window (`HarmonyPolicy.resized`: the pair head fits any), composed with the
    evaluation's default allocation (the jobs' requested workers and PSs: Harmony's own
    setting); on servers with GPU types its mask offers a job only the types it accepts.
    See `models.harmony.arena`."""
    from models.checkpoints import load_checkpoint
    from models.harmony.arena import ArenaPlacement
    from models.harmony.placement import policy_from_checkpoint
    from models.heuristics.registry import ALLOCATIONS

    ckpt = load_checkpoint(ref.checkpoint_path, sha256=ref.sha256, system=ref.system)
    policy = policy_from_checkpoint(ckpt, name=ref.policy_id)
    window = cfg.window or policy.cfg.window
    try:
        sized = policy.resized(cfg.cluster.n_servers, window)
    except ValueError as exc:
        raise NotApplicable(f"{ref.policy_id}: {exc}") from None
    placement = ArenaPlacement(sized, ref.policy_id)
    return Scheduler(ALLOCATIONS.create(cfg.default_allocation), placement)


def loaders() -> dict[str, Loader]:
    """Arena policies place in the evaluation, and so do own-scenario Harmony policies
    (resized; they place there as trained on 6 servers, to compare with the arena's)."""
    return {ARENA_SYSTEM: load_arena_policy, "harmony": load_arena_policy}
