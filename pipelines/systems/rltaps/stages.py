"""RL-TAPS' pipeline stages: REINFORCE training (either mode) and the evaluation against
RL-TAPS' baselines (Random, SJF, Tetris job pickers with first-fit GPUs) and the arena's
preemptive ones (Tiresias' 2D-LAS and 2D-Gittins, preemptive SRTF).

    train_rltaps_stage     trains cfg.mode ("nonstreaming" -> system "rl-taps", "streaming"
                           -> "rl-taps-streaming") from the newest registered policy of that
                           system (or from scratch), registers it in `policies` and writes
                           its curve to `rltaps_learning_curves`
    evaluate_rltaps_stage  the newest policy of each system and the six baselines on a
                           held-out set of job sequences -> eval_runs / eval_jobs /
                           eval_summary (set rl-taps-bimodal; the view `rltaps_evaluation`
                           keeps the old columns)
    train_arena_stage      the arena policy (system "rl-taps-arena"): RL-TAPS' per-GPU
                           decision on the evaluation's cluster, trained on a workload set's
                           train split from the newest arena policy; the evaluation on every
                           workload set runs it as "rl-taps" (steps.py `loaders`); its curve
                           goes with `register_policy` to the shared curve table (phase
                           "finetune"), as `rltaps_learning_curves.mode` admits only the
                           paper's two modes

The own-scenario job sequences are not read from the warehouse: RL-TAPS' workload is
DeepRM's synthetic bimodal mix on a fixed topology, generated in-stage from seeds (one job
per step, `tracelib.synthetic.BimodalConfig.rl_taps`). The seeds are recorded: training ones
in the policy's `metrics.train_seeds` and `training_workloads`, validation ones in each
curve row, test ones in each evaluation row. Same config, same tables (bit for bit,
timestamps aside).

Each training hands its pure parts to `pipelines.trained.train_and_register` (skip,
resume, save, register), fine-tuning from the latest registered policy. The default budget
is small (30 to 60 s per mode and 10 s of evaluation on this shared machine) and does not
train long enough to beat SJF; `benchmarks/bench_rltaps.py` has larger ones, and the
paper's sizes are `RLTapsStageConfig.paper()` (hours).
"""

from __future__ import annotations

import shutil
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from pathlib import Path

import polars as pl

from models.checkpoints import Resumed, policy_id_for, register_policy, resume_from
from models.rltaps.arena import arena_policy_from_checkpoint, why_not_continued
from models.rltaps.arena_reinforce import train_arena
from models.rltaps.config import (
    ARENA_SYSTEM,
    MODES,
    system_of,
)
from models.rltaps.contracts import RLTapsLearningCurves
from models.rltaps.evaluate import rltaps_tables
from models.rltaps.policy import (
    BASELINES,
    PREEMPTIVE,
    RLTapsPolicy,
    policy_from_checkpoint,
)
from models.rltaps.pretrained import Shipped, load_shipped
from models.rltaps.reinforce import train
from models.rltaps.stage_config import RLTapsArenaConfig, RLTapsStageConfig
from pipelines.progress import QUIET, Reporter
from pipelines.trained import (
    Trained,
    TrainResult,
    arena_splits,
    evaluate_once,
    input_key,
    job_sequences_of,
    newest_policy,
    newest_usable,
    parent_of,
    policies_dir,
    train_and_register,
)
from tracelib.progress import ProgressFn
from tracelib.provenance import code_version
from warehouse import connect, read_frame


@dataclass(frozen=True)
class RLTapsTrainResult(TrainResult):
    """A `TrainResult` that also names which mode's system it trained."""

    system: str = ""


@dataclass(frozen=True)
class RLTapsEvalResult:
    run_id: str
    sequence_set: str
    policy_ids: dict[str, str]
    """Evaluated scheduler name -> policy id (learned ones)."""
    mean_slowdown: dict[str, float]
    """Scheduler -> mean slowdown over the test sequences."""
    mean_reward: dict[str, float]
    slowdowns: dict[str, list[float]]
    """Scheduler -> mean slowdown of each test sequence (in `seeds` order, for paired
    comparisons)."""
    seeds: list[int]
    cached: bool = False
    """True when this evaluation was already stored (same config, policies and code
    version) and nothing was simulated."""


def train_rltaps_stage(
    warehouse: str | Path | None, cfg: RLTapsStageConfig, progress: Reporter = QUIET
) -> RLTapsTrainResult:
    """Train RL-TAPS in `cfg.mode` (REINFORCE, models/rltaps/reinforce.py) from the newest
    registered policy of that mode's system (cfg.init = "latest"), else from the shipped
    policy (`models.rltaps.pretrained`; registered first, as the parent), else from scratch;
    register it (parent: the policy it started from) and write its learning curve. A
    shipped policy that cannot be used (another simulator, another network) is skipped with
    a `resume_note` saying why."""
    rl_cfg = cfg.reinforce_config()
    system = rl_cfg.system
    shipped: list[Shipped] = []  # the shipped policy training starts from, if it does

    def start(con) -> Resumed:
        init = "scratch" if cfg.init == "shipped" else cfg.init
        resumed = resume_from(
            con, parent_of(init, lambda: newest_policy(con, system)), policy_from_checkpoint
        )
        # The shipped policy began by imitating SJF: not a start for the paper's training
        # from random weights (teacher None).
        if (
            resumed.policy is None
            and cfg.init in ("latest", "shipped")
            and rl_cfg.teacher is not None
        ):
            found = load_shipped(cfg.mode, rl_cfg.env, rl_cfg.hidden)
            if found.policy is None and cfg.init == "shipped":
                raise ValueError(found.note)
            if found.policy is None:
                start_over = f"{found.note}; trained from scratch ({rl_cfg.teacher} warm start)"
                return replace(resumed, note="; ".join(filter(None, [resumed.note, start_over])))
            shipped.append(found)
            parent = policy_id_for(system, found.description["checkpoint_sha256"])
            # Its file goes beside the warehouse's checkpoints before the transaction that
            # registers it, as every checkpoint does.
            policies_dir(warehouse).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(found.path, policies_dir(warehouse) / f"{parent}.pt")
            resumed = Resumed(parent, found.policy, resumed.note)
        if resumed.policy is not None:
            resumed.policy.check_env(rl_cfg.env)
            if resumed.policy.cfg.hidden != rl_cfg.hidden:
                raise ValueError(
                    f"policy {resumed.policy_id} has hidden {resumed.policy.cfg.hidden}, this "
                    f"stage trains {rl_cfg.hidden}: set init='scratch'"
                )
        return resumed

    def train_mode(resumed: Resumed, advance: ProgressFn) -> Trained:
        trained = Trained(*train(rl_cfg, init=resumed.policy, progress=advance))
        if shipped:
            trained.metrics["started_from"] = "shipped"
        return trained

    def register(con, **row) -> str:
        if shipped:
            parent = row["parent_policy_id"]
            _register_shipped(con, shipped[0], policies_dir(warehouse) / f"{parent}.pt", parent)
        return register_policy(con, **row)

    result = train_and_register(
        warehouse,
        system=system,
        key=input_key(cfg.init, asdict(rl_cfg)),
        config=cfg,
        start=start,
        train=train_mode,
        bar=f"RL-TAPS {cfg.mode} REINFORCE",
        progress=progress,
        workloads=lambda trained: {
            f"rl-taps-bimodal:{rl_cfg.n_jobs}:{s}"
            for seeds in trained.metrics["train_seeds"]
            for s in seeds
        },
        curves=RLTapsLearningCurves,
        register=register,
    )
    return RLTapsTrainResult(**vars(result), system=system)


def _register_shipped(con, shipped: Shipped, path: Path, policy_id: str) -> None:
    """Register the shipped policy (as trained by the pretraining command, dated then) so
    that the policies trained from it name it as their parent."""
    about = shipped.description
    n_jobs = about["sizes"]["n_jobs"]
    register_policy(
        con,
        system=about["system"],
        config=shipped.policy.checkpoint_config(),
        checkpoint_path=path,
        sha256=about["checkpoint_sha256"],
        training_workloads=[
            f"rl-taps-bimodal:{n_jobs}:{s}" for seeds in about["train_seeds"] for s in seeds
        ],
        metrics={"shipped": about, "source": f"models/rltaps/pretrained/{about['mode']}.pt"},
        policy_id=policy_id,
        created_at=datetime.fromisoformat(about["created_at"]).replace(tzinfo=None),
    )


def evaluate_rltaps_stage(
    warehouse: str | Path | None, cfg: RLTapsStageConfig, progress: Reporter = QUIET
) -> RLTapsEvalResult:
    """Evaluate the newest registered policy of each RL-TAPS system (those registered) and
    the Random, SJF and Tetris pickers and the preemptive baselines (`PREEMPTIVE`; all with
    first-fit GPUs) on `cfg.test_sequences` held-out job
    sequences: eval_runs / eval_jobs / eval_summary rows (one `rltaps_evaluation` row per
    scheduler). Stored rows of the same config, policies and code version are read back
    instead of simulated again (`cached` in the result)."""
    with connect(warehouse) as con:
        usable = newest_usable(
            con,
            (
                (
                    f"rl-taps-{mode}",
                    lambda m=mode: newest_policy(con, system_of(m)),
                    policy_from_checkpoint,
                )
                for mode in MODES
            ),
        )
    learned: dict[str, RLTapsPolicy] = {name: r.policy for name, r in usable.items()}
    policy_ids = {name: r.policy_id for name, r in usable.items()}
    eval_config = cfg.eval_config()
    run_id = "rltaps-eval:" + input_key(eval_config, policy_ids)[:16]
    schedulers: dict[str, RLTapsPolicy | None] = {
        **learned,
        **dict.fromkeys((*BASELINES, *PREEMPTIVE)),
    }

    def stored(con) -> RLTapsEvalResult | None:
        # Rows stored under the id by this code version (the summary: one per scheduler).
        [(rows,)] = con.sql(
            "SELECT count(*) FROM eval_summary WHERE eval_id = ? AND code_version = ?",
            params=[run_id, code_version()],
        ).fetchall()
        if rows != len(schedulers):
            return None
        return _evaluation_result(con, run_id, policy_ids, list(schedulers), cfg, True)

    return evaluate_once(
        warehouse,
        stored=stored,
        tables=lambda advance: rltaps_tables(schedulers, policy_ids, cfg, run_id, advance),
        result=lambda con, _: _evaluation_result(
            con, run_id, policy_ids, list(schedulers), cfg, False
        ),
        bar="RL-TAPS evaluation episodes",
        progress=progress,
    )


def _evaluation_result(
    con,
    run_id: str,
    policy_ids: dict[str, str],
    names: list[str],
    cfg: RLTapsStageConfig,
    cached: bool,
) -> RLTapsEvalResult:
    """The stage's result from the stored rows of evaluation `run_id`."""
    rows = read_frame(
        con, "SELECT * FROM rltaps_evaluation WHERE run_id = ? ORDER BY scheduler", [run_id]
    )
    runs = read_frame(
        con,
        "SELECT scheduler, mean_slowdown FROM eval_runs WHERE eval_id = ? "
        "ORDER BY sequence_no, replicate",
        [run_id],
    )
    return RLTapsEvalResult(
        run_id,
        rows["sequence_set"][0],
        policy_ids,
        dict(zip(rows["scheduler"], rows["mean_slowdown"], strict=True)),
        dict(zip(rows["scheduler"], rows["mean_reward"], strict=True)),
        {
            name: runs.filter(pl.col("scheduler") == name)["mean_slowdown"].to_list()
            for name in names
        },
        cfg.test_seeds(),
        cached,
    )


# -- the arena: RL-TAPS' decision on the evaluation's cluster ------------------------------


def train_arena_stage(
    warehouse: str | Path | None, cfg: RLTapsArenaConfig, progress: Reporter = QUIET
) -> TrainResult:
    """Train RL-TAPS' arena policy from the newest registered `rl-taps-arena` policy whose
    shapes fit (cfg.init = "latest"), else from scratch; register it (system
    `rl-taps-arena`, parent: the policy it started from) with its learning curve."""
    tr_cfg = cfg.train_config()
    train_jobs, val_jobs = arena_splits(warehouse, cfg)

    def start(con) -> Resumed:
        parent = parent_of(cfg.init, lambda: newest_policy(con, ARENA_SYSTEM, cfg.workload_set))
        resumed = resume_from(con, parent, arena_policy_from_checkpoint)
        why = resumed.policy is not None and why_not_continued(resumed.policy, tr_cfg)
        if not why:
            return resumed
        if cfg.init not in ("latest", "scratch"):
            raise ValueError(f"policy {resumed.policy_id} cannot continue this training: {why}")
        return Resumed(
            None, None, f"newest policy {resumed.policy_id} not continued ({why}): from scratch"
        )

    return train_and_register(
        warehouse,
        system=ARENA_SYSTEM,
        key=input_key(cfg.init, tr_cfg, train_jobs, val_jobs),
        config=cfg,
        start=start,
        train=lambda resumed, advance: Trained(
            *train_arena(
                tr_cfg,
                job_sequences_of(train_jobs),
                job_sequences_of(val_jobs),
                init=resumed.policy,
                progress=advance,
            )
        ),
        bar="RL-TAPS arena training sequences",
        progress=progress,
        workloads=train_jobs["workload_id"].unique().to_list(),
        metrics={"workload_set": cfg.workload_set},
    )
