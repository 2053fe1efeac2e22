"""Chic's pipeline stages: CEM training per variant and arrival rate, and the evaluation
against Optimus (Chic section 6); CEM training in the arena.

    train_chic_stage     trains Chic or Chic-Pair at one arrival rate (from the newest
                         registered policy of that variant and rate, if any); registers it
                         in `policies` (system "chic" / "chic-pair") with its
                         `chic_learning_curves` rows
    evaluate_chic_stage  at every rate, the newest policies trained at that rate, the ones
                         trained at the reference rate (1.8 per hour), Optimus at 600 s and
                         300 s intervals, on the same unseen sequences -> eval_runs /
                         eval_jobs / eval_summary (sets chic@<rate>/h; the view
                         `chic_evaluation` keeps the old columns)
    train_chic_arena_stage  trains Chic or Chic-Pair in the arena's DL2 setting on a
                         workload set's train split (from the newest "<variant>-arena"
                         policy whose network fits); registers it as system "chic-arena" /
                         "chic-pair-arena" with its `chic_learning_curves` rows. The shared
                         evaluation then runs it on every workload set's test split.

Workloads are generated in-stage from the scenario's seeded generator (the paper's
sequences are synthetic): train, validation and test sequences have disjoint seeds
(`tracelib.scenarios.chic.split_seeds`), recorded in the rows. A training
hands its pure parts to `pipelines.trained.train_and_register` (skip, resume, save,
register); an evaluation's id hashes its config and the policies it evaluates, so
re-running it replaces nothing and writes nothing new.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import polars as pl

from models.checkpoints import Resumed, resume_from
from models.chic.cem import arena_sequences, train_cem, warm_start
from models.chic.config import CHIC_CEM, REFERENCE_RATE, CEMConfig, ChicEvalConfig
from models.chic.contracts import ChicLearningCurves
from models.chic.policy import ARENA, ChicPolicy, episode_results, policy_from_checkpoint
from models.heuristics.optimus import Optimus
from pipelines.evaluation import (
    EvalConfig,
    EvalTables,
    RunOutcome,
    Workload,
    best_rates,
    eval_setting,
    job_rows,
    scenario_tables,
    scenario_workloads,
    simulated,
)
from pipelines.progress import QUIET, Reporter
from pipelines.trained import (
    Trained,
    TrainResult,
    arena_splits,
    evaluate_once,
    input_key,
    newest_policy,
    newest_usable,
    parent_of,
    train_and_register,
)
from tracelib.envs.chic import ChicEnvConfig
from tracelib.progress import ProgressFn, no_progress
from tracelib.provenance import canonical_json
from tracelib.scenarios import chic_set
from tracelib.scenarios.chic import ChicArenaScenario, ChicScenario, chic_speed, split_seeds
from tracelib.sim import LoadBalancing, Scheduler, SimConfig
from warehouse import connect, read_frame


@dataclass(frozen=True)
class ChicTrainConfig:
    """One Chic / Chic-Pair training run in `schedlab run`: which variant, at which arrival
    rate, on how many sequences, and the cross-entropy method's config by value (what the
    trainer gets is that config with this run's variant, rate and seed filled in,
    `cem_config()`). The default budget is small (tens of seconds here); `iterations`
    (paper: until converged, 19+ to beat Optimus) and the sequence counts make it larger.
    Counted in iterations, so a seed gives one policy."""

    variant: str = "chic"
    """"chic" (2I + 1 actions) or "chic-pair" (I + 1)."""
    rate_per_hour: float = REFERENCE_RATE
    """Poisson arrival rate of the training and validation sequences."""
    train_sequences: int = 100
    """Training sequences episodes draw from."""
    val_sequences: int = 30
    """Validation sequences (paper: 30), every `cem.val_every` iterations."""
    cem: CEMConfig = field(default_factory=lambda: CHIC_CEM)
    """The modified cross-entropy method (`models.chic.cem`) in Chic's own scenario (its
    variant, the scenario's arrival rate and its seed are this config's). Default: 6
    iterations of N = 35 trajectories of W = 30 jobs, the five measured departures on
    (`CEMConfig.as_published` undoes them)."""
    seed: int = 0
    """Root seed of the sequences' seeds, initialization and sampling."""
    init: str = "latest"
    """Start from "latest" (the newest registered policy of this variant and rate, else
    random), "scratch", or a policy id."""

    def as_published(self) -> ChicTrainConfig:
        """This config with Chic's MDP and update as the paper writes them."""
        return replace(self, cem=self.cem.as_published())

    # What the stage hands the trainer: its config with the run-level values (variant,
    # arrival rate, seed) filled in, here and nowhere else.

    def scenario(self) -> ChicScenario:
        """The CEM's scenario at this training's arrival rate."""
        return replace(self.cem.scenario, rate_per_hour=self.rate_per_hour)

    def cem_config(self) -> CEMConfig:
        """The trainer's config."""
        return replace(self.cem, variant=self.variant, scenario=self.scenario(), seed=self.seed)


def _cem_training(
    train: list, validation: list, cem: CEMConfig, name: str, progress: Reporter
) -> Callable[[Resumed, ProgressFn], Trained]:
    """The train function of one CEM training (`train_and_register`'s `train`): from the
    policy it resumes, else from the clone of `cem.teacher` (said in one line), else from
    random weights."""

    def run(resumed: Resumed, advance: ProgressFn) -> Trained:
        warm = None
        if resumed.policy is None and cem.teacher is not None:
            warm = warm_start(train, cem)
            m = warm.metrics
            progress.line(
                f"{name} warm start: {cem.teacher}'s {m['imitation_steps']} actions cloned, "
                f"held-out accuracy {m['imitation_held_out_accuracy']:.2f} "
                f"({m['warm_start_wall_s']:.1f} s)"
            )
        return Trained(*train_cem(train, validation, cem, resumed.policy, advance, warm))

    return run


@dataclass(frozen=True)
class ChicEvalResult:
    eval_id: str
    rows: int
    act: dict[str, dict[float, float]]
    """system -> rate -> average completion time (s)."""
    improvement: dict[str, dict[float, float]]
    """system -> rate -> ACT reduction against Optimus-600."""
    sequence_acts: dict[str, dict[float, list[float]]] | None = None
    """system -> rate -> completion time per test sequence, in the order of the sequence
    seeds (for paired comparisons); None when the evaluation was read back, not run."""


def latest_chic_policy(con, variant: str, rate: float) -> str | None:
    """Id of the newest registered `variant` policy trained at `rate` (None if none)."""
    return newest_policy(con, variant, config_is=("$.train.scenario.rate_per_hour", float(rate)))


def train_chic_stage(
    warehouse: str | Path | None, cfg: ChicTrainConfig, progress: Reporter = QUIET
) -> TrainResult:
    """Train one variant at one rate with the modified CEM; register the best validated
    policy (child of the policy it started from) and its learning curve."""
    cem = cfg.cem_config()
    scenario = cfg.scenario()
    train_seeds = split_seeds("train", cfg.train_sequences, cfg.seed)
    val_seeds = split_seeds("validation", cfg.val_sequences, cfg.seed)
    train, validation = scenario.sequences(train_seeds), scenario.sequences(val_seeds)
    name = "Chic" if cfg.variant == "chic" else "Chic-Pair"
    return train_and_register(
        warehouse,
        system=cfg.variant,
        key=input_key(cfg.init, cem, f"train:{cfg.train_sequences}:val:{cfg.val_sequences}"),
        config=cfg,
        start=lambda con: resume_from(
            con,
            parent_of(cfg.init, lambda: latest_chic_policy(con, cfg.variant, cfg.rate_per_hour)),
            policy_from_checkpoint,
        ),
        train=_cem_training(train, validation, cem, name, progress),
        bar=f"{cfg.variant} CEM iterations",
        steps=cem.iterations,
        progress=progress,
        workloads=[f"chic:train:{s}@{cfg.rate_per_hour:g}" for s in train_seeds],
        metrics={"rate_per_hour": cfg.rate_per_hour, "val_seeds": list(val_seeds)},
        curves=ChicLearningCurves,
    )


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


def warm_start_teacher(con, policy_id: str) -> str | None:
    """The scheduler of Chic's own evaluation a policy's warm start cloned: Optimus
    deciding at every event (`optimus-events`, as the clone's Optimus decided inside Chic's
    MDP, there over its first I jobs), or None without a warm start."""
    (teacher,) = con.sql(
        "SELECT json_extract_string(metrics, '$.stage_config.cem.teacher') FROM policies "
        "WHERE policy_id = ?",
        params=[policy_id],
    ).fetchall()[0]
    return OPTIMUS_EVENTS if teacher == "optimus" else None


def evaluate_chic_stage(
    warehouse: str | Path | None, cfg: ChicEvalConfig, progress: Reporter = QUIET
) -> ChicEvalResult:
    """Evaluate the newest Chic / Chic-Pair policies and Optimus at every rate (eval_runs,
    eval_jobs, eval_summary; one `chic_evaluation` row per system and rate)."""
    with connect(warehouse) as con:
        usable = newest_usable(
            con,
            (
                (
                    (variant, rate),
                    lambda v=variant, r=rate: latest_chic_policy(con, v, r),
                    policy_from_checkpoint,
                )
                for variant in ("chic", "chic-pair")
                for rate in sorted({*cfg.rates, cfg.reference_rate})
            ),
        )
        policies = {key: resumed.policy_id for key, resumed in usable.items()}
        loaded = {resumed.policy_id: resumed.policy for resumed in usable.values()}
        teachers = {pid: t for pid in loaded if (t := warm_start_teacher(con, pid)) is not None}
    eval_id = (
        "chic-eval-"
        + input_key(
            canonical_json(asdict(cfg)), canonical_json(sorted(map(list, policies.items())))
        )[:16]
    )

    def stored(con) -> ChicEvalResult | None:
        frame = read_frame(con, "SELECT * FROM chic_evaluation WHERE eval_id = ?", [eval_id])
        return _summary(eval_id, frame) if frame.height else None

    def result(con, tables: EvalTables) -> ChicEvalResult:
        frame = read_frame(con, "SELECT * FROM chic_evaluation WHERE eval_id = ?", [eval_id])
        acts: dict[str, dict[float, list[float]]] = {}
        for rate in cfg.rates:
            of_rate = tables.runs.filter(pl.col("workload_set") == chic_set(rate))
            for (system,), part in of_rate.group_by("scheduler", maintain_order=True):
                by_sequence = part.sort("sequence_no")["avg_jct_s"].to_list()
                acts.setdefault(system, {})[float(rate)] = by_sequence
        return replace(_summary(eval_id, frame), sequence_acts=acts)

    return evaluate_once(
        warehouse,
        stored=stored,
        tables=lambda advance: chic_tables(cfg, policies, loaded, eval_id, advance, teachers),
        result=result,
        bar="Chic evaluation: arrival rates",
        steps=len(cfg.rates),
        progress=progress,
    )


def _summary(eval_id: str, frame: pl.DataFrame) -> ChicEvalResult:
    act: dict[str, dict[float, float]] = {}
    imp: dict[str, dict[float, float]] = {}
    for row in frame.iter_rows(named=True):
        act.setdefault(row["system"], {})[row["rate_per_hour"]] = row["avg_jct_s"]
        imp.setdefault(row["system"], {})[row["rate_per_hour"]] = row["improvement_vs_optimus_600"]
    return ChicEvalResult(eval_id, frame.height, act, imp)


# -- the arena ---------------------------------------------------------------------------


def _arena_cem() -> CEMConfig:
    return CEMConfig(
        scenario=ChicArenaScenario(
            sim=eval_setting(), window=20, placement=EvalConfig().default_placement
        ),
        iterations=6,
        n_trajectories=8,
        fit_epochs=10,
        teacher=None,
        env=ChicEnvConfig(max_phase_steps=1000),
    )


@dataclass(frozen=True)
class ChicArenaConfig:
    """Chic in the arena: the published MDP in the evaluation's DL2 setting
    (`tracelib.envs.chic_arena`: I = the evaluation's window, the DL2 catalogue, a
    schedule every slot, placed by the evaluation's default placement), trained by the
    modified CEM on a workload set's train split and validated on its validation split.
    The CEM's config is held by value (`cem`); what the trainer gets is it with this
    config's variant, simulator and seed filled in (`cem_config()`).
    At the default budget a training takes 20-27 s of one core here (Chic; Chic-Pair half:
    a 30-job episode is ~5,000 actions at ~70 us); `large` runs the paper's N = 35 for 40
    iterations."""

    workload_set: str = "dl2-synthetic"
    """Derivation whose train split is trained on and whose validation split validates."""
    variants: tuple[str, ...] = ("chic", "chic-pair")
    """Entered into the arena, each trained apart: "chic" (2I + 1 actions), "chic-pair"
    (I + 1)."""
    sim: SimConfig = field(default_factory=eval_setting)
    """Simulator of training and validation (default: the evaluation's)."""
    cem: CEMConfig = field(default_factory=_arena_cem)
    """The modified CEM in the arena (its variant, its scenario's simulator and its seed
    are this config's; its validation interval is capped by its iterations). Default: 6
    iterations of N = 8 trajectories (paper: 35) plus the uniform one, 10 fit epochs; I =
    20 visible jobs (the evaluation's window; Chic's own scenario: 3) placed by the
    evaluation's default placement; at most 1000 actions in one schedule (the cluster holds
    384 tasks); the measured departures on. No warm start (teacher None: random weights, as
    the paper), measured: with the paper's 64-32-4 network the arena's 41 actions clone
    poorly (held-out accuracy 0.60-0.77, the sampled clone's validation ACT 4,500-11,243 s
    over 5 seeds against 4,860-5,306 s from scratch after 6 iterations), and 6 iterations
    do not repair a bad clone: against Optimus 1.730 [1.542, 1.919] (Chic) and 1.907
    [1.669, 2.145] (Chic-Pair) with it, 1.534 [1.481, 1.588] and 1.564 [1.516, 1.613]
    without (docs/chic.md). 0 iterations: no arena training."""
    train_sequences: int | None = None
    """At most this many train sequences of the set (lowest numbers; None: all)."""
    val_sequences: int | None = 2
    """At most this many validation sequences (whole), every `cem.val_every` iterations."""
    jobs_per_episode: int | None = 30
    """Training episodes are the train sequences cut into runs of this many jobs, each
    starting at time 0 (Chic's W = 30; the sets' sequences have 60); None: whole."""
    init: str = "latest"
    """Start from: "latest" (the newest "<variant>-arena" policy whose network fits, else
    scratch), "scratch", or a policy id."""
    seed: int = 0
    """Root of initialization, dropout, minibatch order, episode choice and actions."""

    def __post_init__(self) -> None:
        unknown = set(self.variants) - {"chic", "chic-pair"}
        if unknown:
            raise ValueError(f"unknown Chic variant(s) {sorted(unknown)}")
        if not isinstance(self.cem.scenario, ChicArenaScenario):
            raise ValueError("the arena's CEM runs in a ChicArenaScenario")
        if self.jobs_per_episode is not None and self.jobs_per_episode < 1:
            raise ValueError("jobs_per_episode must be positive (or None)")

    @property
    def iterations(self) -> int:
        """The CEM's iterations (0: no arena training)."""
        return self.cem.iterations

    def as_published(self) -> ChicArenaConfig:
        """This config with Chic's MDP and update as the paper writes them."""
        return replace(self, cem=self.cem.as_published())

    # What the stage hands the trainer: its config with the run-level values (variant,
    # simulator, seed) filled in, here and nowhere else.

    def scenario(self) -> ChicArenaScenario:
        """The CEM's scenario in this config's simulator."""
        return replace(self.cem.scenario, sim=self.sim)

    def cem_config(self, variant: str) -> CEMConfig:
        """The trainer's config for one variant."""
        cem = self.cem
        return replace(
            cem,
            variant=variant,
            scenario=self.scenario(),
            val_every=max(min(cem.val_every, cem.iterations), 1),
            env=None if cem.env is None else replace(cem.env, variant=variant),
            seed=self.seed,
        )


def _resume_fitting(con, parent: str | None, cem: CEMConfig) -> Resumed:
    """The policy to start from if its network has the training's shape; else scratch,
    with a note saying why."""
    resumed = resume_from(con, parent, policy_from_checkpoint)
    if resumed.policy is not None and resumed.policy.net.cfg != cem.net_config:
        note = (
            f"{resumed.policy_id} has network {resumed.policy.net.cfg}, the training "
            f"{cem.net_config}: trained from scratch"
        )
        return Resumed(None, None, "; ".join(filter(None, [resumed.note, note])))
    return resumed


def train_chic_arena_stage(
    warehouse: str | Path | None,
    cfg: ChicArenaConfig,
    variant: str = "chic",
    progress: Reporter = QUIET,
) -> TrainResult:
    """Train one variant in the arena with the modified CEM; register the best validated
    policy as system "<variant>-arena" (child of the policy it started from)."""
    system = variant + ARENA
    cem = cfg.cem_config(variant)
    train_jobs, val_jobs = arena_splits(warehouse, cfg)
    train = arena_sequences(train_jobs, cfg.jobs_per_episode)
    validation = arena_sequences(val_jobs, None)
    name = ("Chic" if variant == "chic" else "Chic-Pair") + " (arena)"

    return train_and_register(
        warehouse,
        system=system,
        key=input_key(cfg.init, cem, f"episode:{cfg.jobs_per_episode}", train_jobs, val_jobs),
        config=cfg,
        start=lambda con: _resume_fitting(
            con, parent_of(cfg.init, lambda: newest_policy(con, system, cfg.workload_set)), cem
        ),
        train=_cem_training(train, validation, cem, name, progress),
        bar=f"{system} CEM iterations",
        steps=cem.iterations,
        progress=progress,
        workloads=train_jobs["workload_id"].unique().to_list(),
        metrics={"workload_set": cfg.workload_set, "episodes": len(train)},
        curves=ChicLearningCurves,
    )
