"""DL2's pipeline stages: decision logs, supervised warm-up, RL fine-tuning.

    record_stage    the teacher (the searched table by default; the paper's: DRF) runs
                    over a workload set's training sequences; every inference step goes to
                    `decision_traces`
    table_stage     the searched table registered as a policy of its own ("dl2-table"),
                    so the evaluation runs it beside DL2 as a baseline
    warmup_stage    imitation of those decisions; the warm policy is registered
    finetune_stage  RL in the simulator (DL2's actor-critic, or by default PPO over groups
                    of rollouts of one sequence, `models.dl2.grouped`), from the latest
                    registered fine-tuned policy (retraining as new traces arrive) or else
                    the warm-up

Each stage reads what it needs, trains with the warehouse closed (other processes can read
meanwhile), then writes its rows in one transaction; a training stage hands its pure parts
to `pipelines.trained.train_and_register`, which skips inputs already trained on
(`metrics.input_key`: stage config, training and validation workloads' content, and for the
warm-up the recording), saves the content-addressed checkpoint and registers it.
Fine-tuning therefore happens again only when new workloads arrive, and then starts from
the newest fine-tuned policy, whose lineage `policies.parent_policy_id` keeps.

Training runs in the setting the evaluation simulates (`models.evaluation.EvalConfig`:
DL2's small cluster, 20-minute slots, window 20, speed variation), so the registered policy
is evaluated where it was trained.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import polars as pl

from models.checkpoints import Resumed, resume_from
from models.contracts import DecisionTraces, DL2TeacherConfigs
from models.dl2.config import ALGORITHM as GROUPED
from models.dl2.config import (
    SYSTEM,
    VARIANTS,
    DL2NetConfig,
    shape_of,
)
from models.dl2.finetune import finetune
from models.dl2.grouped import finetune_grouped
from models.dl2.policy import policy_from_checkpoint
from models.dl2.recorder import as_workloads, record_decisions
from models.dl2.search import (
    TABLE_SYSTEM,
    ConfigTable,
    result_frame,
    search_configurations,
    table_of,
)
from models.dl2.search import TEACHER as SEARCHED
from models.dl2.stage_config import DL2StageConfig
from models.dl2.warmup import warmup
from models.heuristics.registry import ALLOCATIONS
from pipelines.progress import QUIET, Reporter
from pipelines.trained import (
    Trained,
    TrainResult,
    input_key,
    newest_policy,
    set_workloads,
    train_and_register,
)
from tracelib.progress import ProgressFn
from tracelib.provenance import canonical_json
from tracelib.sim.policy import AllocationPolicy
from warehouse import connect, read_frame, transaction
from warehouse.io import write_frame


@dataclass(frozen=True)
class RecordResult:
    run_id: str
    teacher: str
    workloads: int
    steps: int


def _set_workloads(con, cfg: DL2StageConfig, split: str) -> pl.DataFrame:
    """workload_jobs rows of one split of the main set (required) and of the further
    fine-tuning sets (where they have that split), each capped by the budget."""
    limit = _limit(cfg, split)
    frames = [set_workloads(con, cfg.workload_set, split, limit)]
    for extra in cfg.finetune_sets:
        if extra == cfg.workload_set:
            continue
        try:
            frames.append(set_workloads(con, extra, split, limit))
        except ValueError:
            continue
    return pl.concat(frames)


def _limit(cfg: DL2StageConfig, split: str) -> int | None:
    """How many sequences of a set's `split` the stages use."""
    return cfg.val_sequences_per_set if split == "validation" else cfg.train_sequences_per_set


def _record_run_id(cfg: DL2StageConfig, jobs: pl.DataFrame) -> str:
    """Deterministic id of one recording: set, teacher, seed, encoder and the jobs' content,
    so re-recording the same inputs replaces its rows and new workloads get new ones."""
    digest = hashlib.sha256()
    recorder = cfg.recorder_config()
    # the order "auto" stands for is part of what is recorded
    recorder = replace(recorder, order=recorder.resolved_order())
    digest.update(canonical_json(asdict(recorder)).encode())
    if cfg.record_repeats != 1:
        digest.update(f"repeats={cfg.record_repeats}".encode())
    if cfg.teacher == SEARCHED:
        digest.update(canonical_json(asdict(cfg.search)).encode())
    digest.update(jobs.write_csv().encode())
    return f"{cfg.workload_set}:{cfg.teacher}:{digest.hexdigest()[:12]}"


def record_stage(
    warehouse: str | Path | None, cfg: DL2StageConfig, progress: Reporter = QUIET
) -> RecordResult:
    """Record the teacher's decisions on the set's training workloads into
    `decision_traces` (replacing an earlier recording of the same inputs)."""
    with connect(warehouse) as con:
        jobs = set_workloads(con, cfg.workload_set, "train", _limit(cfg, "train"))
    run_id = _record_run_id(cfg, jobs)
    with connect(warehouse) as con:
        ((done,),) = con.sql(
            "SELECT count(*) FROM decision_traces WHERE run_id = ?", params=[run_id]
        ).fetchall()
    if done:
        return RecordResult(run_id, cfg.teacher, jobs["workload_id"].n_unique(), done)
    teacher, configs = cfg.teacher, None
    if cfg.teacher == SEARCHED:
        teacher, configs = _search_teacher(cfg, jobs, run_id, progress)
    # Each repeat runs every sequence again with its own simulator seed (speed variation,
    # noise): other states, other decisions of the same teacher.
    runs = as_workloads(jobs) * cfg.record_repeats
    with progress.bar(f"{cfg.teacher} decisions: workloads recorded") as advance:
        traces = record_decisions(
            runs, teacher, cfg.recorder_config(), run_id=run_id, trace_version="", progress=advance
        )
    with connect(warehouse) as con, transaction(con):
        con.execute("DELETE FROM decision_traces WHERE run_id = ?", [run_id])
        con.execute("DELETE FROM dl2_teacher_configs WHERE run_id = ?", [run_id])
        write_frame(con, traces, DecisionTraces)
        if configs is not None:
            write_frame(con, configs, DL2TeacherConfigs)
    return RecordResult(
        run_id=run_id,
        teacher=cfg.teacher,
        workloads=traces["workload_id"].n_unique(),
        steps=traces.height,
    )


def _search_teacher(
    cfg: DL2StageConfig, jobs: pl.DataFrame, run_id: str, progress: Reporter
) -> tuple[ConfigTable, pl.DataFrame]:
    """The searched teacher on the recording's training sequences (the recorder's
    simulator and seeds) and its `dl2_teacher_configs` rows."""
    workloads = [specs for _, specs in as_workloads(jobs)]
    recorder = cfg.recorder_config()
    sim = replace(recorder.sim, window=recorder.net.window)
    with progress.bar("searched teacher: screening, then models", 1) as advance:
        found = search_configurations(
            workloads,
            cfg.search,
            sim,
            seed=recorder.seed,
            interval_s=cfg.net.interval_s,
            trigger=cfg.net.trigger,
            progress=advance,
        )
    return found.policy(), result_frame(found, run_id)


def teacher_policy(con, cfg: DL2StageConfig, record_run_id: str) -> AllocationPolicy:
    """The policy a recording imitated: the searched teacher rebuilt from its
    `dl2_teacher_configs` rows, or the named heuristic (deciding as the student does)."""
    if cfg.teacher != SEARCHED:
        return ALLOCATIONS.create(cfg.teacher)
    rows = read_frame(
        con, "SELECT model, workers, ps FROM dl2_teacher_configs WHERE run_id = ?", [record_run_id]
    )
    if rows.height == 0:
        raise ValueError(f"recording {record_run_id!r} has no searched teacher; record again")
    return ConfigTable(
        table_of(rows.to_dicts()), interval_s=cfg.net.interval_s, trigger=cfg.net.trigger
    )


def newest_teacher_configs(con) -> pl.DataFrame:
    """`dl2_teacher_configs` rows (by model) of the recording the newest DL2 warm-up
    imitated; none when its teacher was a heuristic."""
    return read_frame(
        con,
        "SELECT * FROM dl2_teacher_configs WHERE run_id = ("
        "  SELECT json_extract_string(metrics, '$.record_run_id') FROM policies"
        "  WHERE system = ? AND parent_policy_id IS NULL ORDER BY created_at DESC LIMIT 1"
        ") ORDER BY model",
        [SYSTEM],
    )


def table_stage(
    warehouse: str | Path | None,
    cfg: DL2StageConfig,
    record_run_id: str,
    progress: Reporter = QUIET,
) -> TrainResult | None:
    """Register the searched table a recording imitated as a policy of system
    "dl2-table" (None when the teacher was a heuristic): a fixed per-model configuration
    found on the training sequences is a baseline DL2 must beat, not only its teacher.
    Registering the same table again returns the policy already registered."""
    if cfg.teacher != SEARCHED:
        return None
    with connect(warehouse) as con:
        table = teacher_policy(con, cfg, record_run_id)
        rows = read_frame(
            con,
            "SELECT DISTINCT workload_id FROM decision_traces WHERE run_id = ?",
            [record_run_id],
        )

    def train(_: Resumed, advance: ProgressFn) -> Trained:
        return Trained(table, None, {"record_run_id": record_run_id, "models": len(table.table)})

    return train_and_register(
        warehouse,
        system=TABLE_SYSTEM,
        key=input_key(record_run_id, table.checkpoint_config()),
        config=cfg,
        train=train,
        bar="DL2 searched table",
        progress=progress,
        workloads=rows["workload_id"].sort().to_list(),
        metrics={"record_run_id": record_run_id},
    )


def warmup_stage(
    warehouse: str | Path | None,
    cfg: DL2StageConfig,
    record_run_id: str,
    progress: Reporter = QUIET,
) -> TrainResult:
    """Supervised warm-up on the decisions of `record_run_id`; registers the warm policy
    (system "dl2", no parent) with its learning curve."""
    with connect(warehouse) as con:
        traces = read_frame(
            con,
            "SELECT * FROM decision_traces WHERE run_id = ? "
            "ORDER BY workload_id, seed, decision, step",
            [record_run_id],
        )
        if traces.height == 0:
            raise ValueError(f"no decision traces of recording {record_run_id!r}; run record first")
        val_jobs = set_workloads(con, cfg.workload_set, "validation", _limit(cfg, "validation"))
        teacher = teacher_policy(con, cfg, record_run_id)
    val_workloads = [jobs for _, jobs in as_workloads(val_jobs)]

    def train(_: Resumed, advance: ProgressFn) -> Trained:
        policy, metrics, curve = warmup(
            traces,
            cfg.warmup_config(),
            val_workloads=val_workloads,
            sim=cfg.sim,
            eval_seed=cfg.seed,
            teacher_policy=teacher,
            progress=advance,
        )
        return Trained(policy, curve, metrics)

    return train_and_register(
        warehouse,
        system=SYSTEM,
        key=input_key(record_run_id, cfg.warmup_config(), val_jobs),
        config=cfg,
        train=train,
        bar="DL2 warm-up epochs",
        steps=cfg.warmup.max_epochs,
        progress=progress,
        workloads=traces["workload_id"].unique().to_list(),
        metrics={"record_run_id": record_run_id},
    )


def _finetune_start(
    con, cfg: DL2StageConfig, net: DL2NetConfig, warm: str | None, system: str
) -> Resumed:
    """Where fine-tuning starts (`cfg.init`): the newest fine-tuned policy of `system`,
    else the warm-up `warm` (None: from scratch, as OfflineRL); the warm-up; or a policy
    id. A policy of another network than `net` is refused."""
    if cfg.init == "latest":
        tuned = newest_policy(con, system, config_is=("$.train.stage", "finetune"))
        parent = tuned or warm
    else:
        parent = warm if cfg.init == "warmup" else cfg.init
    resumed = resume_from(con, parent, policy_from_checkpoint)
    if (
        resumed.policy is not None
        and cfg.init == "latest"
        and shape_of(resumed.policy.cfg) != shape_of(net)
    ):
        # The newest policy has another network (trained before DL2's network or trigger
        # changed): a new lineage starts, from this run's warm-up (OfflineRL: from scratch).
        if warm is None:
            return Resumed(None, None, resumed.note)
        resumed = resume_from(con, warm, policy_from_checkpoint)
    if resumed.policy is not None and shape_of(resumed.policy.cfg) != shape_of(net):
        raise ValueError(
            f"policy {resumed.policy_id} has network {shape_of(resumed.policy.cfg)}; this stage "
            f"trains {shape_of(net)}: set init='warmup'"
        )
    return resumed


def finetune_stage(
    warehouse: str | Path | None,
    cfg: DL2StageConfig,
    warmup_policy_id: str,
    variant: str = "dl2",
    progress: Reporter = QUIET,
) -> TrainResult:
    """RL fine-tuning of `variant` (a VARIANTS key; its algorithm `cfg.algorithm_of`) from
    its newest registered policy (cfg.init = "latest") or else the warm-up (OfflineRL: from
    scratch); registers the result as its child, with its learning curve."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown DL2 variant {variant!r}; known: {', '.join(VARIANTS)}")
    ft_cfg = replace(cfg.finetune_config(), variant=variant, **VARIANTS[variant])
    grouped = cfg.algorithm_of(variant) == GROUPED
    trainer_cfg = replace(cfg.grouped_config(), variant=variant) if grouped else ft_cfg
    system = ft_cfg.system
    warm = None if ft_cfg.offline else warmup_policy_id
    with connect(warehouse) as con:
        train_jobs = _set_workloads(con, cfg, "train")
        val_jobs = _set_workloads(con, cfg, "validation")
    # "warmup" starts from this run's warm-up: a new warm-up (another teacher, new
    # decisions) is a new input
    start = f"warmup:{warmup_policy_id}" if cfg.init == "warmup" else cfg.init
    key = input_key(start, trainer_cfg, train_jobs, val_jobs)
    trainer, steps, unit = (
        (finetune_grouped, trainer_cfg.iterations, "PPO iterations")
        if grouped
        else (finetune, ft_cfg.max_updates, "RL updates")
    )

    def train(resumed: Resumed, advance: ProgressFn) -> Trained:
        policy, curve, metrics = trainer(
            train_jobs,
            val_jobs,
            trainer_cfg,
            init=resumed.policy,
            eval_seed=cfg.seed,
            progress=advance,
        )
        # The inputs' hash goes into the checkpoint: a training that keeps its starting
        # weights (grouped PPO when no iteration beats them on validation) is still its own
        # policy, not its parent's file registered as its own child.
        policy.train_config = {**policy.train_config, "input_key": key}
        return Trained(policy, curve, metrics)

    return train_and_register(
        warehouse,
        system=system,
        key=key,
        config=cfg,
        start=lambda con: _finetune_start(con, cfg, ft_cfg.net, warm, system),
        train=train,
        bar=f"{variant} {unit}",
        steps=steps,
        progress=progress,
        workloads=train_jobs["workload_id"].unique().to_list(),
    )
