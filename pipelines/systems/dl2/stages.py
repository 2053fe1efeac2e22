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

Training runs in the setting the evaluation simulates (`pipelines.evaluation.EvalConfig`:
DL2's small cluster, 20-minute slots, window 20, speed variation), so the registered policy
is evaluated where it was trained.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import polars as pl

from models.checkpoints import Resumed, resume_from
from models.contracts import DecisionTraces, DL2TeacherConfigs
from models.dl2.config import ALGORITHM as GROUPED
from models.dl2.config import (
    ALGORITHMS,
    DL2_FINETUNE,
    DL2_NET,
    DL2_WARMUP,
    PUBLISHED_DEVIATIONS,
    SWITCHES,
    SYSTEM,
    VARIANTS,
    DL2NetConfig,
    FinetuneConfig,
    GroupedConfig,
    RecorderConfig,
    WarmupConfig,
    shape_of,
)
from models.dl2.finetune import finetune
from models.dl2.grouped import finetune_grouped
from models.dl2.policy import policy_from_checkpoint
from models.dl2.recorder import as_workloads, record_decisions
from models.dl2.search import (
    TABLE_SYSTEM,
    ConfigTable,
    SearchConfig,
    result_frame,
    search_configurations,
    table_of,
)
from models.dl2.search import TEACHER as SEARCHED
from models.dl2.warmup import warmup
from models.heuristics.registry import ALLOCATIONS
from pipelines.evaluation import eval_setting
from pipelines.progress import QUIET, Reporter
from pipelines.system import resized
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
from tracelib.sim import SimConfig
from tracelib.sim.policy import AllocationPolicy
from warehouse import connect, read_frame, transaction
from warehouse.io import write_frame


@dataclass(frozen=True)
class DL2StageConfig:
    """DL2 in `schedlab run`: which workloads, which teacher, the network, and each
    algorithm's config (by value: what the stage hands the algorithm is that config with
    the run's seed, simulator and network filled in, `recorder_config()`, `warmup_config()`,
    `finetune_config()`, `grouped_config()`).

    The default budget is small (a few minutes here); `--dl2-updates` and
    `--dl2-warmup-epochs` make it larger, and every algorithm field has its flag
    (`--dl2-grouped-lr`). Budgets are counted in epochs and updates, not seconds, so the
    same seed gives the same policy."""

    workload_set: str = "dl2-synthetic"
    """Derivation whose train split is recorded and trained on and whose val split
    validates."""
    teacher: str = PUBLISHED_DEVIATIONS["teacher"][1]
    """Allocation policy whose decisions the warm-up imitates: a heuristic (drf, fifo, srtf,
    optimus) or "searched" (default, a deviation; the paper warms up from drf): each model's
    workers and PSs searched on the training sequences' JCT from Optimus' (`search`,
    `models.dl2.search`), recorded job by job (RecorderConfig order "rows")."""
    search: SearchConfig = field(default_factory=SearchConfig)
    """The searched teacher's search (with teacher "searched")."""
    sim: SimConfig = field(default_factory=eval_setting)
    """Simulator of recording, training and validation (default: the evaluation's)."""
    net: DL2NetConfig = field(default_factory=lambda: DL2_NET)
    """The networks, and when they decide (its window is the simulator's, its
    `bundle_first` the teacher's: `network`). Deviations from the paper: the "rows" head
    (paper: "flat"), two hidden layers of 64 (DL2: two of 256; as good as two of 128 in
    `bench_dl2_arena`, at half the training time), a decision at every arrival and
    completion (trigger "events", as Optimus at its best; paper: "interval") or else every
    600 s (interval_s, as Optimus; paper: every 20-minute slot)."""
    recorder: RecorderConfig = field(default_factory=RecorderConfig)
    """How the teacher's decisions are recorded (its teacher, network, simulator and seed
    are the stage's: `recorder_config()`)."""
    warmup: WarmupConfig = field(default_factory=lambda: DL2_WARMUP)
    """The supervised warm-up (its network and seed are the stage's: `warmup_config()`).
    Default: 40 epochs at most, patience 6."""
    finetune: FinetuneConfig = field(default_factory=lambda: DL2_FINETUNE)
    """The paper's actor-critic fine-tuning (DL2's own with `algorithm` "actor-critic", and
    every variant's; its network, simulator and seed are the stage's, and its validation
    interval and critic warm-up are capped by its updates: `finetune_config()`). Defaults
    that deviate from the paper: no job-aware exploration (measured to cost more than it
    gives here), clip 0.2 and KL to the warm-up 1.0 (without them fine-tuning left the
    Optimus warm-up for a policy 45% slower on validation within 3000 updates)."""
    grouped: GroupedConfig = field(default_factory=GroupedConfig)
    """DL2's own fine-tuning by grouped PPO (`algorithm` "grouped-ppo"; its network,
    simulator and seed are the stage's, its validation interval capped by its iterations:
    `grouped_config()`)."""
    algorithm: str = PUBLISHED_DEVIATIONS["algorithm"][1]
    """How DL2 itself is fine-tuned: "grouped-ppo" (default, a deviation: PPO over groups
    of rollouts of one sequence, each judged by the time its jobs spend in the system
    against the group's other rollouts, `models.dl2.grouped`) or "actor-critic" (the
    paper's, `models.dl2.finetune`; its Table 2 ablations and OfflineRL always use it)."""
    record_repeats: int = 1
    """The teacher runs each training sequence this many times, each with its own
    simulator seed, and the warm-up imitates them all (more states of the same teacher).
    Measured with Optimus, one training seed: 3 made the warm-up worse (14% slower than
    its teacher on validation instead of 7%, early stopping after 7 epochs), so 1."""
    seed: int = 0
    """Root seed of recording, initialization, exploration and replay."""
    variants: tuple[str, ...] = (
        "dl2-without-grouped-ppo",
        "offline-rl",
        "dl2-without-critic",
        "dl2-without-exploration",
        "dl2-without-replay",
    )
    """Also trained, with the same budget, and evaluated beside DL2: DL2 fine-tuned by the
    paper's actor-critic instead of grouped PPO (dl2-without-grouped-ppo), the OfflineRL
    baseline and the paper's Table 2 ablations of its actor-critic (VARIANTS); a variant
    that would train what DL2 or an earlier variant trains (without exploration, while the
    actor-critic runs without it; dl2-without-grouped-ppo, while DL2 uses the
    actor-critic) is skipped (`trained_variants`)."""
    finetune_sets: tuple[str, ...] = ()
    """Further derived sets whose train and validation workloads fine-tuning also uses (the
    nightly flow passes each production trace's set, so a new trace retrains every variant
    from its latest policy); sets without such a split are skipped."""
    train_sequences_per_set: int | None = 16
    """At most this many training sequences of each set are recorded and trained on (the
    lowest sequence numbers; None: all), so a large production trace does not make every
    stage larger: the budget sizes the work, not the trace."""
    val_sequences_per_set: int | None = 4
    """At most this many validation sequences of each set are used (every validation
    point of fine-tuning simulates each of them)."""
    init: str = "latest"
    """Fine-tuning starts from: "latest" (the newest registered fine-tuned DL2 policy, else
    this run's warm-up), "warmup" (this run's warm-up), or a policy id."""

    def __post_init__(self) -> None:
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {self.algorithm!r}")

    @property
    def window(self) -> int:
        return self.sim.window or 20

    def as_published(self) -> DL2StageConfig:
        """This config with the paper's choices where the default deviates (PUBLISHED)."""
        return resized(self, {k: v for k, (v, _) in PUBLISHED_DEVIATIONS.items()})

    # What the stage hands each algorithm: its config with the run-level values (seed,
    # simulator, network) filled in, here and nowhere else.

    def network(self, bundle_first: bool = True) -> DL2NetConfig:
        """The networks' shape and decision interval, with the simulator's window."""
        return replace(self.net, window=self.window, bundle_first=bundle_first)

    def recorder_config(self) -> RecorderConfig:
        # DRF's and Optimus' decisions give every job a worker+PS pair first; FIFO's and
        # SRTF's fill one job at a time, which the bundle-first rule would reject
        # (DL2NetConfig).
        net = self.network(bundle_first=self.teacher in ("drf", "optimus", SEARCHED))
        return replace(self.recorder, teacher=self.teacher, net=net, sim=self.sim, seed=self.seed)

    def warmup_config(self) -> WarmupConfig:
        return replace(self.warmup, hidden=self.net.hidden, head=self.net.head, seed=self.seed)

    def _fine_tuning(self, algorithm: Any, steps: int, **more: Any) -> Any:
        """A fine-tuning algorithm's config with the network, simulator and seed filled in,
        validating at least once in its `steps` (updates or iterations)."""
        return replace(
            algorithm,
            net=self.network(),
            sim=self.sim,
            val_every=min(algorithm.val_every, steps),
            seed=self.seed,
            **more,
        )

    def finetune_config(self) -> FinetuneConfig:
        """The paper's actor-critic (DL2's with `algorithm` "actor-critic", every variant's)."""
        ft = self.finetune
        # a third of a short run at most trains the critic alone
        warmup = min(ft.critic_warmup, ft.max_updates // 3)
        return self._fine_tuning(ft, ft.max_updates, critic_warmup=warmup)

    def grouped_config(self) -> GroupedConfig:
        """DL2's own fine-tuning by grouped PPO (`algorithm` "grouped-ppo")."""
        return self._fine_tuning(self.grouped, self.grouped.iterations)

    def algorithm_of(self, variant: str) -> str:
        """The fine-tuning algorithm of `variant`: DL2's own is `algorithm`; every other
        variant uses the paper's actor-critic."""
        return self.algorithm if variant == "dl2" else "actor-critic"

    def trained_variants(self) -> tuple[str, ...]:
        """`variants` less those that would train what DL2 itself, or a variant listed
        before them, trains (same algorithm, same switches)."""
        ft = self.finetune_config()

        def what(variant: str) -> tuple:
            algorithm = self.algorithm_of(variant)
            if algorithm != "actor-critic":
                return (algorithm,)
            return (algorithm, *(getattr(replace(ft, **VARIANTS[variant]), k) for k in SWITCHES))

        seen = {what("dl2")}
        out = []
        for v in self.variants:
            if what(v) not in seen:
                seen.add(what(v))
                out.append(v)
        return tuple(out)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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
