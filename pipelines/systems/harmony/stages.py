"""Harmony's pipeline stages: reward predictor, placement DRL, evaluation, online update.

    fit_reward_model_stage   the reward predictor on `interference_samples` (90/10 split by
                             sample set), compared with LIF-Line, LIF-Quad and gradient
                             boosting on the same split -> `reward_model_metrics`; with a
                             Gavel throughputs file, its measured pairs are ingested into
                             `interference_samples` (source gavel:<gpu>) and a predictor is
                             fitted and measured on each GPU type too (every key of the file
                             by default; `_unconsolidated` keys without pairs of their own
                             are skipped with the reason), each printed beside LIF's and
                             gradient boosting's held-out error
    train_placement_stage    actor-critic placement policies (Harmony and its Table II
                             ablations) on rollouts scored by the latest reward predictor
    evaluate_harmony_stage   every newest Harmony policy and the baselines in the simulator
                             with the true speed model -> eval_runs / eval_jobs /
                             eval_summary (sets harmony-<pattern>; the view
                             `harmony_evaluation` keeps the old columns); the speeds
                             Harmony observed there are appended to `interference_samples`
                             (source harmony-online)
    online_update_stage      the paper's online model update: re-fit the reward predictor
                             with those observed speeds appended, then the placement
                             policies, each from its last checkpoint (the three stages above
                             read only `sample_sources`, so re-running them on unchanged
                             inputs trains nothing; the online update is the step that
                             consumes what evaluations observed)
    train_arena_stage        the placement policy for the evaluation on every workload set
                             (system harmony-arena): the DL2 setting's cluster and window,
                             the run's synthetic set's train split, from the newest
                             harmony-arena policy or the own-scenario policy's pair head

Inputs are read first; each training hands its pure parts to
`pipelines.trained.train_and_register` (skip, resume, save, register), starting from the
latest registered policy of the same system (cfg.init = "latest"), recorded as its parent.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

import polars as pl

from models.checkpoints import Resumed, load_registered, resume_from
from models.evaluation import (
    ARENA_SUFFIX,
    EvalTables,
)
from models.harmony.contracts import HarmonyLearningCurves, RewardModelMetrics
from models.harmony.evaluate import harmony_tables, observed_samples
from models.harmony.placement import (
    HarmonyNetConfig,
    policy_from_checkpoint,
)
from models.harmony.reward import (
    SYSTEM as REWARD_SYSTEM,
)
from models.harmony.reward import (
    compare_estimators,
    fit_reward_model,
    metric_rows,
    predictor_from_checkpoint,
)
from models.harmony.stage_config import HarmonyArenaConfig, HarmonyStageConfig
from models.harmony.train import (
    PlacementTrainConfig,
    WarmStart,
    train_placement,
    warm_key,
    warm_start,
)
from models.torch_scope import scoped_torch
from pipelines.progress import QUIET, Reporter
from pipelines.systems.harmony.lines import gavel_line, skipped_line
from pipelines.trained import (
    SCRATCH,
    Trained,
    TrainResult,
    already_trained,
    arena_splits,
    evaluate_once,
    input_key,
    job_sequences_of,
    newest_policy,
    newest_usable,
    parent_of,
    replace_policy_rows,
    train_and_register,
)
from tracelib.contracts import InterferenceSamples
from tracelib.gavel import GavelConfig, read_gavel
from tracelib.interference import store_samples
from tracelib.progress import ProgressFn
from tracelib.scenarios.harmony import sequences, split_seed
from tracelib.sim import SimResult
from warehouse import connect, read_frame
from warehouse.io import validate, write_frame

ONLINE_SOURCE = "harmony-online"
PLACEMENT_PHASE = {"phase": "placement"}
"""`harmony_learning_curves.phase` of a placement policy's curve."""
GAVEL_SYSTEM = "harmony-reward-model-gavel"


@dataclass(frozen=True)
class RewardResult:
    reward_model: TrainResult
    gavel: dict[str, TrainResult]
    """GPU type -> predictor fitted on Gavel's measurements."""
    gavel_errors: dict[str, dict[str, float]] = field(default_factory=dict)
    """GPU type -> held-out mean relative error by estimator (harmony-nn, lif-line,
    lif-quad, gradient-boosting; absent when not measured) and `test_samples`."""
    gavel_skipped: dict[str, str] = field(default_factory=dict)
    """Gavel key -> why it gave no samples (e.g. a `_unconsolidated` key repeating its GPU
    type's pairs)."""


_EVALUATION_ONLY = ("eval_id", "eval_config", "seed", "evaluated_at", "code_version")
"""harmony_evaluation columns that are not part of an evaluation's summary frame."""


@dataclass(frozen=True)
class HarmonyEvalResult:
    eval_id: str
    summary: pl.DataFrame
    online_samples: int


def _samples(con, sources: tuple[str, ...]) -> pl.DataFrame:
    marks = ", ".join("?" for _ in sources)
    return read_frame(
        con,
        f"SELECT * FROM interference_samples WHERE source IN ({marks}) "
        "ORDER BY source, seed, sample_set, job_in_set",
        list(sources),
    )


def _fit_and_register(
    warehouse,
    frame: pl.DataFrame,
    cfg: HarmonyStageConfig,
    system: str,
    lif: bool,
    progress: Reporter = QUIET,
    lif_profile: str = "catalogue",
) -> TrainResult:
    """Fit (or skip, if done) one reward predictor on `frame`; register it with its
    comparison rows and curve."""
    source = "+".join(sorted(frame["source"].unique().to_list()))

    def train(resumed: Resumed, advance: ProgressFn) -> Trained:
        try:
            fit = fit_reward_model(frame, cfg.reward, init=resumed.policy, progress=advance)
            restarted = False
        except ValueError:
            # The previous network cannot read these samples (new job types or a larger
            # cluster): train a new one (no parent).
            fit, restarted = fit_reward_model(frame, cfg.reward, progress=advance), True
        comparison = compare_estimators(
            frame, fit, seed=cfg.reward.seed, lif=lif, lif_profile=lif_profile
        )
        return Trained(fit.predictor, fit.curve, fit.metrics, comparison, restarted)

    def write(con, policy_id: str, trained: Trained) -> None:
        metrics = metric_rows(trained.detail, source, cfg.reward.seed)
        replace_policy_rows(con, RewardModelMetrics, metrics, reward_model_id=policy_id)

    return train_and_register(
        warehouse,
        system=system,
        key=input_key(cfg.reward, frame, system),
        config=cfg,
        start=lambda con: resume_from(
            con, parent_of(cfg.init, lambda: newest_policy(con, system)), predictor_from_checkpoint
        ),
        train=train,
        bar=f"{system} epochs",
        steps=cfg.reward.epochs,
        progress=progress,
        workloads=[f"interference_samples:{s}" for s in source.split("+")],
        metrics={"source": source},
        write=write,
        curves=HarmonyLearningCurves,
        curve_keys={"phase": "reward_model"},
    )


def fit_reward_model_stage(
    warehouse: str | Path | None, cfg: HarmonyStageConfig, progress: Reporter = QUIET
) -> RewardResult:
    """Fit the reward predictor on `cfg.sample_sources` (and on Gavel's measurements if
    `cfg.gavel_path` is set), each compared with LIF and gradient boosting on its split."""
    with connect(warehouse) as con:
        frame = _samples(con, cfg.sample_sources)
    if frame.height == 0:
        raise ValueError(
            f"no interference samples of sources {list(cfg.sample_sources)}; run the "
            "interference stage first"
        )
    main = _fit_and_register(warehouse, frame, cfg, REWARD_SYSTEM, lif=True, progress=progress)
    if not cfg.gavel_path:
        return RewardResult(main, {})
    read = read_gavel(cfg.gavel_path, GavelConfig(gpu_types=cfg.gavel_gpu_types))
    samples = validate(read.samples, InterferenceSamples)
    with connect(warehouse) as con:
        store_samples(con, samples)
    for key, reason in read.skipped.items():
        progress.line(skipped_line(key, reason))
    gavel: dict[str, TrainResult] = {}
    errors: dict[str, dict[str, float]] = {}
    for gpu in read.gpu_types:
        part = samples.filter(pl.col("source") == f"gavel:{gpu}")
        # Gavel's job types are not catalogue models: LIF reads a usage profile measured on
        # the training pairs instead of the catalogue's.
        gavel[gpu] = _fit_and_register(
            warehouse,
            part,
            replace(cfg, init="scratch"),
            GAVEL_SYSTEM,
            lif=True,
            progress=progress,
            lif_profile="measured",
        )
        with connect(warehouse) as con:
            errors[gpu] = held_out_errors(con, gavel[gpu].policy_id)
        progress.line(gavel_line(gpu, errors[gpu]))
    return RewardResult(main, gavel, errors, dict(read.skipped))


def held_out_errors(con, reward_model_id: str) -> dict[str, float]:
    """A predictor's held-out comparison as written in `reward_model_metrics`: mean relative
    error by estimator over all job types, and `test_samples` (the split's rows)."""
    rows = read_frame(
        con,
        "SELECT estimator, n_samples, mean_relative_error FROM reward_model_metrics "
        "WHERE reward_model_id = ? AND split = 'test' AND job_type = 'all' ORDER BY estimator",
        [reward_model_id],
    )
    out = {e: float(v) for e, _, v in rows.iter_rows()}
    if rows.height:
        out["test_samples"] = float(rows["n_samples"].max())
    return out


def _reward_model_id(con, reward_model_id: str | None) -> str:
    rid = reward_model_id or newest_policy(con, REWARD_SYSTEM)
    if rid is None:
        raise ValueError("no registered Harmony reward model; run fit_reward_model_stage first")
    return rid


def _placement_key(cfg: HarmonyStageConfig, variant: str, rid: str) -> str:
    """The inputs of one variant's placement training: its config, the sequences and the
    reward model."""
    tcfg = cfg.train_config(variant)
    return input_key(tcfg, cfg.arrivals, rid, f"{cfg.n_train_sequences}/{cfg.seed}")


def _placement_start(con, cfg: HarmonyStageConfig, variant: str) -> Resumed:
    """Where one variant's placement training starts: its newest policy (cfg.init
    "latest") if its network is the training's, else a fresh network (warm-started when
    the config names a teacher)."""
    parent = parent_of(cfg.init, lambda: newest_policy(con, variant))
    resumed = resume_from(con, parent, policy_from_checkpoint)
    if resumed.policy is not None and resumed.policy.cfg != cfg.train_config(variant).net:
        return Resumed(None, None, resumed.note)
    return resumed


def _train_sequences(cfg: HarmonyStageConfig):
    return sequences(cfg.arrivals, cfg.n_train_sequences, split_seed(cfg.seed, "train"))


def warm_start_stage(
    warehouse: str | Path | None,
    cfg: HarmonyStageConfig,
    reward_model_id: str | None = None,
    progress: Reporter = QUIET,
) -> dict[tuple, WarmStart]:
    """The warm starts (`models.harmony.train.warm_start`, one per `warm_key`) that the
    variants of `cfg` about to train afresh need, made once for all of them; nothing when
    every variant is trained already or continues from a policy. `schedlab run` makes them
    in one task ahead of the variants' trainings, which run in separate worker processes
    and would otherwise each clone the same teacher."""
    with connect(warehouse) as con:
        rid = _reward_model_id(con, reward_model_id)
        fresh = [
            cfg.train_config(v)
            for v in cfg.variants
            if already_trained(con, _placement_key(cfg, v, rid), v) is None
            and _placement_start(con, cfg, v).policy is None
            and cfg.train_config(v).teacher is not None
        ]
        predictor = predictor_from_checkpoint(load_registered(con, rid)) if fresh else None
    made: dict[tuple, WarmStart] = {}
    for tcfg in fresh:
        if warm_key(tcfg) not in made:
            made[warm_key(tcfg)] = _warm_start(_train_sequences(cfg), predictor, tcfg, progress)
    return made


def _warm_start(train_seqs, predictor, tcfg: PlacementTrainConfig, progress: Reporter) -> WarmStart:
    searched = tcfg.teacher == "searched"
    label = "Harmony teacher search (sequences)" if searched else "Harmony warm start"
    with scoped_torch(threads=1), progress.bar(label, len(train_seqs)) as advance:
        made = warm_start(train_seqs, predictor, tcfg, advance)
    found = ""
    if searched:
        found = (
            f" (on the training sequences {made.metrics['teacher_train_ratio_to_lif_quad']:.3f}"
            " times LIF-Quad's average JCT)"
        )
    progress.line(
        f"Harmony warm start: {tcfg.teacher}'s {made.metrics['imitation_steps']} "
        f"placements{found} cloned, held-out accuracy "
        f"{made.metrics['imitation_held_out_accuracy']:.2f}"
    )
    return made


def train_placement_stage(
    warehouse: str | Path | None,
    cfg: HarmonyStageConfig,
    reward_model_id: str | None = None,
    progress: Reporter = QUIET,
    warm: Mapping[tuple, WarmStart] | None = None,
) -> dict[str, TrainResult]:
    """Train every `cfg.variants` system on rollouts scored by the reward model
    (`reward_model_id`, default the newest), each from its newest registered policy, or
    from a warm start when there is none: from `warm` (`warm_start_stage`) when it holds
    one for the variant's config, else made here, once for the variants that share it."""
    train_seqs = _train_sequences(cfg)
    val_seqs = sequences(cfg.arrivals, cfg.n_val_sequences, split_seed(cfg.seed, "validation"))
    workloads = [
        f"harmony-{cfg.arrivals.pattern}:seed={split_seed(cfg.seed, 'train')}:n={len(train_seqs)}"
    ]
    # Variants starting afresh share one warm start (it reads no actor-critic switch).
    warm = dict(warm or {})

    def train(variant: str, rid: str, resumed: Resumed, advance: ProgressFn) -> Trained:
        # The reward model is read only by a variant that trains (a read, then closed).
        with connect(warehouse) as con:
            predictor = predictor_from_checkpoint(load_registered(con, rid))
        tcfg = cfg.train_config(variant)
        start = None
        if resumed.policy is None and tcfg.teacher is not None:
            if warm_key(tcfg) not in warm:
                warm[warm_key(tcfg)] = _warm_start(train_seqs, predictor, tcfg, progress)
            start = warm[warm_key(tcfg)]
        return Trained(
            *train_placement(
                train_seqs, val_seqs, predictor, tcfg, resumed.policy, progress=advance, warm=start
            )
        )

    out: dict[str, TrainResult] = {}
    for variant in cfg.variants:
        with connect(warehouse) as con:
            rid = _reward_model_id(con, reward_model_id)
        out[variant] = train_and_register(
            warehouse,
            system=variant,
            key=_placement_key(cfg, variant, rid),
            config=cfg,
            start=lambda con, variant=variant: _placement_start(con, cfg, variant),
            train=partial(train, variant, rid),
            bar=f"{variant} updates",
            steps=cfg.train_config(variant).updates,
            progress=progress,
            workloads=workloads,
            metrics={"reward_model_id": rid},
            curves=HarmonyLearningCurves,
            curve_keys=PLACEMENT_PHASE,
        )
    return out


def _stored_summary(con, eval_id: str) -> pl.DataFrame:
    frame = read_frame(
        con, "SELECT * FROM harmony_evaluation WHERE eval_id = ? ORDER BY ALL", [eval_id]
    )
    return frame.select([c for c in frame.columns if c not in _EVALUATION_ONLY])


def evaluate_harmony_stage(
    warehouse: str | Path | None, cfg: HarmonyStageConfig, progress: Reporter = QUIET
) -> HarmonyEvalResult:
    """Evaluate the newest policy of every `cfg.variants` system and the baselines in the
    true simulator (eval_runs, eval_jobs, eval_summary; the `harmony_evaluation` view), and
    append the speeds Harmony observed to `interference_samples` (source harmony-online)
    for the online update."""
    with connect(warehouse) as con:
        usable = newest_usable(
            con,
            (
                (
                    variant,
                    lambda v=variant: newest_policy(con, v),
                    lambda ckpt, v=variant: policy_from_checkpoint(ckpt, name=v),
                )
                for variant in cfg.variants
            ),
        )
    learned = {name: (r.policy, r.policy_id) for name, r in usable.items()}
    digest = hashlib.sha256(cfg.eval.to_json().encode())
    for name in sorted(learned):
        digest.update(f"{name}={learned[name][1]}".encode())
    eval_id = f"harmony-{digest.hexdigest()[:16]}"
    seed = int(digest.hexdigest()[:12], 16)
    observed: dict[str, list[SimResult]] = {}

    def stored(con) -> HarmonyEvalResult | None:
        summary = _stored_summary(con, eval_id)
        [(online_rows,)] = con.sql(
            "SELECT count(*) FROM interference_samples WHERE source = ? AND seed = ?",
            params=[ONLINE_SOURCE, seed],
        ).fetchall()
        return HarmonyEvalResult(eval_id, summary, online_rows) if summary.height else None

    def tables(advance: ProgressFn) -> EvalTables:
        made, results = harmony_tables(learned, cfg.eval, eval_id, progress=advance)
        observed.update(results)
        return made

    def result(con, _tables: EvalTables) -> HarmonyEvalResult:
        online = pl.DataFrame()
        if "harmony" in observed:
            online = validate(
                observed_samples(observed["harmony"], ONLINE_SOURCE, seed, cfg.online_max_sets),
                InterferenceSamples,
            )
        if online.height:
            con.execute(
                "DELETE FROM interference_samples WHERE source = ? AND seed = ?",
                [ONLINE_SOURCE, seed],
            )
            write_frame(con, online, InterferenceSamples)
        return HarmonyEvalResult(eval_id, _stored_summary(con, eval_id), online.height)

    return evaluate_once(
        warehouse,
        stored=stored,
        tables=tables,
        result=result,
        bar="Harmony evaluation runs",
        progress=progress,
    )


def online_update_stage(
    warehouse: str | Path | None, cfg: HarmonyStageConfig, progress: Reporter = QUIET
) -> tuple[RewardResult, dict[str, TrainResult]]:
    """Harmony's online model update: re-fit the reward predictor with the observed speeds
    appended (`harmony-online` samples), then the placement policies on it, each from its
    last checkpoint."""
    sources = tuple(dict.fromkeys((*cfg.sample_sources, ONLINE_SOURCE)))
    reward = fit_reward_model_stage(
        warehouse,
        replace(cfg, init="latest", gavel_path=None, sample_sources=sources),
        progress,
    )
    placed = train_placement_stage(
        warehouse, replace(cfg, init="latest"), reward.reward_model.policy_id, progress
    )
    return reward, placed


# -- the arena: Harmony placing in the evaluation on every workload set --------------------

ARENA_SYSTEM = f"harmony{ARENA_SUFFIX}"
"""`policies.system` of the placement policies trained for the arena."""


def _arena_start(
    con, cfg: HarmonyArenaConfig, net: HarmonyNetConfig, own_policy_id: str | None
) -> tuple[Resumed, str]:
    """Where arena training starts (the policy sized to `net`), and how ("latest",
    "transfer" or "scratch"). The newest `harmony-arena` policy whose network is `net`;
    else the pair head of the own-scenario policy `own_policy_id` (default: the newest
    `harmony`), resized to the arena's cluster and window (its value network is sized for
    the own scenario and is left behind); else nothing (from scratch)."""
    if cfg.init == "scratch":
        return SCRATCH, "scratch"
    resumed = resume_from(
        con, newest_policy(con, ARENA_SYSTEM, cfg.workload_set), policy_from_checkpoint
    )
    if resumed.policy is not None and resumed.policy.cfg == net:
        return resumed, "latest"
    own = resume_from(con, own_policy_id or newest_policy(con, "harmony"), policy_from_checkpoint)
    note = own.note or resumed.note
    if own.policy is not None:
        try:
            sized = own.policy.resized(net.n_servers, net.window)
        except ValueError:
            sized = None
        if sized is not None and sized.cfg == net:
            return Resumed(own.policy_id, sized, note), "transfer"
    return Resumed(None, None, note), "scratch"


def train_arena_stage(
    warehouse: str | Path | None,
    cfg: HarmonyArenaConfig,
    reward_model_id: str | None = None,
    own_policy_id: str | None = None,
    progress: Reporter = QUIET,
) -> TrainResult:
    """Train Harmony's placement policy for the arena on `cfg.workload_set` (train split;
    best weights on its validation split) from where `_arena_start` says, credit shared
    by the reward model `reward_model_id` (default the newest); register it as system
    `harmony-arena`, its parent the policy it started from. Unchanged inputs (config,
    workloads, reward model) return the policy already trained on them."""
    tcfg = cfg.train_config()
    train_jobs, val_jobs = arena_splits(warehouse, cfg)
    with connect(warehouse) as con:
        rid = _reward_model_id(con, reward_model_id)
        predictor = predictor_from_checkpoint(load_registered(con, rid))
    key = input_key(cfg.init, tcfg, rid, train_jobs, val_jobs)
    how: list[str] = []  # how training starts (`_arena_start`)

    def start(con) -> Resumed:
        resumed, way = _arena_start(con, cfg, tcfg.net, own_policy_id)
        how.append(way)
        return resumed

    def train(resumed: Resumed, advance: ProgressFn) -> Trained:
        m = tcfg.net.n_servers
        # A DL2-setting job holds at least two tasks, so 2M jobs hold every job of the
        # cluster in one input: the predictor sees every co-located job at once.
        credit = predictor.for_cluster(m, max(2 * m, predictor.cfg.max_jobs))
        policy, curve, metrics = train_placement(
            job_sequences_of(train_jobs),
            job_sequences_of(val_jobs),
            credit,
            tcfg,
            resumed.policy,
            progress=advance,
        )
        policy.name = ARENA_SYSTEM
        # The input key in the checkpoint's config: weights kept from the start
        # (keep_start) on new inputs still make a new checkpoint that records them.
        policy.train_config = {**policy.train_config, "system": ARENA_SYSTEM, "input_key": key}
        return Trained(policy, curve, {**metrics, "start": how[0]})

    return train_and_register(
        warehouse,
        system=ARENA_SYSTEM,
        key=key,
        config=cfg,
        start=start,
        train=train,
        bar=f"{ARENA_SYSTEM} updates",
        steps=tcfg.updates,
        progress=progress,
        workloads=train_jobs["workload_id"].unique().to_list(),
        metrics={"workload_set": cfg.workload_set, "reward_model_id": rid},
        curves=HarmonyLearningCurves,
        curve_keys=PLACEMENT_PHASE,
    )
