"""Prefect flows: thin glue over the stage functions in pipelines/stages.py.

Flows run locally without a server (Prefect starts a temporary API per process). Only
warehouse I/O is retried: a busy warehouse file is worth another try, bad input is not.
"""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.task_runners import ThreadPoolTaskRunner

from models.fidelity import FidelityConfig
from pipelines.config import TraceInput, run_config
from pipelines.evaluation import EvalConfig, eval_config
from pipelines.progress import QUIET, Reporter
from pipelines.report import write_report
from pipelines.stages import (
    derive_stage,
    evaluate_stage,
    fidelity_stage,
    finish_run,
    ingest_stage,
    interference_stage,
    learned_policies,
    start_run,
    synthetic_stage,
)
from pipelines.stages_chic import (
    ChicEvalConfig,
    ChicTrainConfig,
    evaluate_chic_stage,
    train_chic_stage,
)
from pipelines.stages_dl2 import DL2StageConfig, finetune_stage, record_stage, warmup_stage
from pipelines.stages_harmony import (
    HarmonyStageConfig,
    evaluate_harmony_stage,
    fit_reward_model_stage,
    online_update_stage,
    train_placement_stage,
)
from pipelines.stages_rltaps import RLTapsStageConfig, evaluate_rltaps_stage, train_rltaps_stage
from tracelib.ingest import IngestError
from tracelib.interference import InterferenceConfig
from tracelib.synthetic import DiurnalConfig
from tracelib.workloads import DeriveConfig
from warehouse import WarehouseBusy


def _retry_on_io(task, task_run, state) -> bool:
    try:
        state.result()
    except (WarehouseBusy, OSError):
        return True
    except Exception:
        return False
    return False


_io_retries = {"retries": 3, "retry_delay_seconds": 5, "retry_condition_fn": _retry_on_io}


@task(name="ingest-trace", **_io_retries)
def ingest_task(warehouse: str | None, trace: TraceInput, progress: Reporter = QUIET) -> dict:
    with progress.stage(f"ingest {trace.format} trace {Path(trace.path).name}"):
        result = ingest_stage(
            warehouse,
            trace.path,
            trace.format,
            mapping=trace.mapping,
            source_id=trace.source_id,
            progress=progress,
        )
    return asdict(result)


@task(name="synthetic-trace", **_io_retries)
def synthetic_task(warehouse: str | None, cfg: DiurnalConfig, progress: Reporter = QUIET) -> dict:
    with progress.stage(f"synthetic trace ({cfg.n_jobs} jobs)"):
        return asdict(synthetic_stage(warehouse, "dl2-diurnal", cfg))


@task(name="derive-workloads", **_io_retries)
def derive_task(
    warehouse: str | None, source_ids: list[str], cfg: DeriveConfig, progress: Reporter = QUIET
) -> dict:
    with progress.stage(f"derive workloads {cfg.name}"):
        return asdict(derive_stage(warehouse, source_ids, cfg))


@task(name="interference-samples", **_io_retries)
def interference_task(
    warehouse: str | None, cfg: InterferenceConfig, progress: Reporter = QUIET
) -> dict:
    with progress.stage(f"interference samples ({cfg.n_samples:,})"):
        return asdict(interference_stage(warehouse, cfg, progress))


@task(name="fidelity-checks", **_io_retries)
def fidelity_task(
    warehouse: str | None, cfg: FidelityConfig, run_id: str, progress: Reporter = QUIET
) -> dict:
    with progress.stage("simulator fidelity checks"):
        return asdict(fidelity_stage(warehouse, cfg, run_id))


@task(name="evaluate-schedulers", **_io_retries)
def evaluate_task(
    warehouse: str | None,
    cfg: EvalConfig,
    out_dir: str | None = None,
    progress: Reporter = QUIET,
) -> dict:
    with progress.stage(f"evaluate schedulers on {', '.join(cfg.workload_sets) or 'every set'}"):
        return asdict(evaluate_stage(warehouse, cfg, out_dir, progress))


@task(name="dl2-record-decisions", **_io_retries)
def dl2_record_task(warehouse: str | None, cfg: DL2StageConfig, progress: Reporter = QUIET) -> dict:
    with progress.stage(f"DL2 record {cfg.teacher} decisions"):
        return asdict(record_stage(warehouse, cfg, progress))


@task(name="dl2-warmup", **_io_retries)
def dl2_warmup_task(
    warehouse: str | None, cfg: DL2StageConfig, recorded: dict, progress: Reporter = QUIET
) -> dict:
    with progress.stage("DL2 supervised warm-up"):
        return asdict(warmup_stage(warehouse, cfg, recorded["run_id"], progress))


@task(name="dl2-finetune", **_io_retries)
def dl2_finetune_task(
    warehouse: str | None,
    cfg: DL2StageConfig,
    warm: dict,
    variant: str = "dl2",
    progress: Reporter = QUIET,
) -> dict:
    with progress.stage(f"DL2 fine-tuning {variant}"):
        return asdict(finetune_stage(warehouse, cfg, warm["policy_id"], variant, progress))


@task(name="report", **_io_retries)
def report_task(warehouse: str | None, run_id: str, progress: Reporter = QUIET) -> str:
    with progress.stage("HTML report"):
        return str(write_report(warehouse, run_id))


@task(name="harmony-fit-reward-model", **_io_retries)
def harmony_reward_task(
    warehouse: str | None, cfg: HarmonyStageConfig, progress: Reporter = QUIET
) -> dict:
    with progress.stage("Harmony reward predictor"):
        return asdict(fit_reward_model_stage(warehouse, cfg, progress))


@task(name="harmony-train-placement", **_io_retries)
def harmony_train_task(
    warehouse: str | None,
    cfg: HarmonyStageConfig,
    variant: str,
    reward: dict,
    progress: Reporter = QUIET,
) -> dict:
    one = replace(cfg, variants=(variant,))
    with progress.stage(f"Harmony placement {variant}"):
        trained = train_placement_stage(
            warehouse, one, reward["reward_model"]["policy_id"], progress
        )
    return asdict(trained[variant])


@task(name="harmony-evaluate", **_io_retries)
def harmony_evaluate_task(
    warehouse: str | None, cfg: HarmonyStageConfig, progress: Reporter = QUIET
) -> dict:
    with progress.stage("Harmony evaluation"):
        result = evaluate_harmony_stage(warehouse, cfg, progress)
    return {
        "eval_id": result.eval_id,
        "online_samples": result.online_samples,
        "summary": result.summary.to_dicts(),
    }


@task(name="harmony-online-update", **_io_retries)
def harmony_online_task(
    warehouse: str | None, cfg: HarmonyStageConfig, progress: Reporter = QUIET
) -> dict:
    with progress.stage("Harmony online update"):
        reward, placed = online_update_stage(warehouse, cfg, progress)
    return {"reward": asdict(reward), "placement": {k: asdict(v) for k, v in placed.items()}}


@task(name="chic-train", **_io_retries)
def chic_train_task(
    warehouse: str | None, cfg: ChicTrainConfig, progress: Reporter = QUIET
) -> dict:
    with progress.stage(f"{cfg.variant} CEM training at {cfg.rate_per_hour:g}/h"):
        return asdict(train_chic_stage(warehouse, cfg, progress))


@task(name="chic-evaluate", **_io_retries)
def chic_evaluate_task(
    warehouse: str | None, cfg: ChicEvalConfig, progress: Reporter = QUIET
) -> dict:
    with progress.stage("Chic evaluation"):
        return asdict(evaluate_chic_stage(warehouse, cfg, progress))


@task(name="rltaps-train", **_io_retries)
def rltaps_train_task(
    warehouse: str | None, cfg: RLTapsStageConfig, progress: Reporter = QUIET
) -> dict:
    with progress.stage(f"RL-TAPS training {cfg.mode}"):
        return asdict(train_rltaps_stage(warehouse, cfg, progress))


@task(name="rltaps-evaluate", **_io_retries)
def rltaps_evaluate_task(
    warehouse: str | None, cfg: RLTapsStageConfig, progress: Reporter = QUIET
) -> dict:
    with progress.stage("RL-TAPS evaluation"):
        return asdict(evaluate_rltaps_stage(warehouse, cfg, progress))


@flow(name="schedlab-ingest")
def ingest_flow(
    paths: list[str],
    format: str,
    mapping: str | None = None,
    warehouse: str | None = None,
) -> list[dict]:
    """Ingest trace files of one format."""
    return [ingest_task(warehouse, TraceInput(p, format, mapping)) for p in paths]


@flow(name="schedlab-derive")
def derive_flow(
    source_ids: list[str],
    name: str = "default",
    seed: int = 0,
    jobs_per_sequence: int = 60,
    warehouse: str | None = None,
) -> dict:
    """Derive train/validation/test workloads from ingested trace sources."""
    cfg = DeriveConfig(name=name, seed=seed, jobs_per_sequence=jobs_per_sequence)
    return derive_task(warehouse, source_ids, cfg)


@flow(name="schedlab-evaluate")
def evaluate_flow(
    workload_sets: list[str] | None = None,
    schedulers: list[str] | None = None,
    n_seeds: int = 3,
    seed: int = 0,
    max_sequences: int | None = None,
    n_servers: int | None = None,
    window: int | None = 20,
    warehouse: str | None = None,
    out_dir: str | None = None,
) -> dict:
    """Evaluate schedulers on the test workloads of `workload_sets` (default: every set)."""
    cfg = eval_config(workload_sets, schedulers, n_seeds, seed, max_sequences, n_servers, window)
    run_id = start_run(warehouse, "schedlab-evaluate", seed, {"evaluation": cfg.to_dict()})
    try:
        result = evaluate_task(warehouse, cfg, out_dir)
    except BaseException:
        finish_run(warehouse, run_id, "failed", {"run_id": run_id})
        raise
    summary = {"run_id": run_id, **result}
    finish_run(warehouse, run_id, "completed", summary)
    return summary


# One task at a time unless the caller picks a runner (pipelines/runners.py): threads of
# one process would share torch's seeding and matplotlib's text layout, neither thread-safe.
@flow(name="schedlab-nightly", task_runner=ThreadPoolTaskRunner(max_workers=1))
def nightly_flow(
    warehouse: str | None = None,
    seed: int = 0,
    n_jobs: int = 600,
    jobs_per_sequence: int = 60,
    incoming: str | None = None,
    eval_seeds: int | None = None,
    eval_sequences: int | None = None,
    budget: str = "default",
    systems: list[str] | None = None,
    dl2_updates: int | None = None,
    dl2_warmup_epochs: int | None = None,
    dl2_teacher: str = "drf",
    dl2_baselines: bool = True,
    harmony_updates: int | None = None,
    harmony_gavel: str | None = None,
    harmony_online_update: bool = False,
    chic_iterations: int | None = None,
    chic_deviations: bool = False,
    rltaps_epochs: int | None = None,
    progress: Reporter | None = None,
) -> dict:
    """The nightly job: ingest new traces, generate the synthetic trace, derive workloads,
    collect interference samples, train every learned system (DL2: decision logs, warm-up,
    fine-tuning; Harmony: reward predictor, placement DRL; Chic and Chic-Pair; RL-TAPS),
    each from its latest registered policy, evaluate the heuristics and DL2's policies on
    each derived set's test workloads and every other system in its own paper's scenario,
    and write the HTML report (`reports/` beside the warehouse).

    A trace that cannot be ingested is reported and skipped; the rest of the run proceeds.
    `budget` (smoke, default, large) sizes every system's training and evaluation; the
    per-system arguments override it (`dl2_updates`, `dl2_warmup_epochs`,
    `harmony_updates`, `chic_iterations`, `rltaps_epochs`; 0 skips that system), and
    `systems` names the learned systems to train (default all: dl2, harmony, chic,
    rl-taps). With `dl2_baselines`, DL2's OfflineRL baseline and three ablations train
    too; `harmony_gavel` is a Gavel throughputs file for the reward predictor;
    `harmony_online_update` re-fits Harmony on the speeds its evaluation observed;
    `chic_deviations` trains Chic with the four measured departures from its paper. The
    DL2-setting evaluation (one per derived set with test workloads) runs `eval_seeds`
    seeds on at most `eval_sequences` test sequences per set (None: the budget's, 3 seeds
    and 4 sequences by default, 1 and 1 with smoke; `eval_sequences=0`: all;
    `eval_seeds=0` skips it). `progress` (made by the command line) prints a line per
    stage and draws progress bars; None prints nothing.
    """
    logger = get_run_logger()
    progress = progress or QUIET
    cfg = run_config(
        seed=seed,
        n_jobs=n_jobs,
        jobs_per_sequence=jobs_per_sequence,
        incoming=incoming,
        budget=budget,
        systems=systems,
        dl2_updates=dl2_updates,
        dl2_warmup_epochs=dl2_warmup_epochs,
        dl2_teacher=dl2_teacher,
        dl2_baselines=dl2_baselines,
        harmony_updates=harmony_updates,
        harmony_gavel=harmony_gavel,
        chic_iterations=chic_iterations,
        chic_deviations=chic_deviations,
        rltaps_epochs=rltaps_epochs,
        eval_seeds=eval_seeds,
        eval_sequences=eval_sequences,
    )
    evaluation = (
        eval_config(n_seeds=cfg.eval_seeds, seed=cfg.seed, max_sequences=cfg.eval_sequences)
        if cfg.eval_seeds > 0
        else None
    )
    config = {
        **cfg.to_dict(),
        "budget": budget,
        "evaluation": evaluation.to_dict() if evaluation else None,
    }
    run_id = start_run(warehouse, "schedlab-nightly", cfg.seed, config)
    progress.line(
        f"run {run_id} started: budget {budget}, {len(cfg.traces)} production trace(s), "
        f"systems {', '.join(s for s in ('dl2', 'harmony', 'chic', 'rltaps') if getattr(cfg, s))}"
    )
    summary: dict = {
        "run_id": run_id,
        "ingested": [],
        "rejected": [],
        "derived": [],
        "interference": None,
        "fidelity": None,
        "dl2": None,
        "harmony": None,
        "chic": None,
        "rltaps": None,
        "evaluated": [],
        "report": None,
    }
    try:
        production = []
        for trace in cfg.traces:
            try:
                result = ingest_task(warehouse, trace, progress)
            except IngestError as exc:
                logger.error("trace rejected: %s", exc)
                summary["rejected"].append({"path": trace.path, "error": str(exc)})
                continue
            summary["ingested"].append(result)
            production.append(result["source_id"])
        synthetic = synthetic_task(warehouse, cfg.synthetic, progress)
        summary["ingested"].append(synthetic)
        summary["derived"].append(
            derive_task(warehouse, [synthetic["source_id"]], cfg.derive, progress)
        )
        for source_id in production:
            named = replace(cfg.derive, name=source_id.replace(":", "-"))
            summary["derived"].append(derive_task(warehouse, [source_id], named, progress))
        # Every task from here on is submitted as a future, in dependency order (futures as
        # arguments), so a parallel task runner overlaps the systems, DL2's and Harmony's
        # variants and the interference sampling, while the sequential one runs them in
        # this order.
        interference = interference_task.submit(warehouse, cfg.interference, progress)
        fidelity = fidelity_task.submit(warehouse, cfg.fidelity, run_id, progress)
        pending: dict = {}
        if cfg.dl2 is not None:
            # Fine-tuning also learns from every production trace's workloads: a new trace
            # changes its inputs, so each variant retrains from its latest policy.
            sets = tuple(d["derivation"] for d in summary["derived"][1:])
            dl2 = replace(cfg.dl2, finetune_sets=sets)
            recorded = dl2_record_task.submit(warehouse, dl2, progress)
        if cfg.harmony is not None:
            reward = harmony_reward_task.submit(
                warehouse, cfg.harmony, progress, wait_for=[interference]
            )
            pending["harmony-reward"] = reward
        if cfg.dl2 is not None:
            # DL2's chain (recording, warm-up, five fine-tunings) is the longest: its warm-up
            # is submitted as soon as the recording ends, ahead of the other systems' work.
            # (Prefect's process runner dispatches in submission order once a task's inputs
            # are ready, from as many resolver threads as workers: submitting it at the
            # start would park a thread on it while a worker idles.)
            recorded.wait()
            warm = dl2_warmup_task.submit(warehouse, dl2, recorded, progress)
            pending["dl2-chain"] = (recorded, warm)
        if cfg.chic is not None:
            pending["chic"] = {
                f"{t.variant}@{t.rate_per_hour:g}": chic_train_task.submit(warehouse, t, progress)
                for t in cfg.chic.train_configs()
            }
        if cfg.rltaps is not None:
            pending["rltaps"] = {
                t.mode: rltaps_train_task.submit(warehouse, t, progress)
                for t in cfg.rltaps.train_configs()
            }
        if cfg.dl2 is not None:
            pending["dl2"] = {
                name: dl2_finetune_task.submit(warehouse, dl2, warm, name, progress)
                for name in ("dl2", *dl2.variants)
            }
        if cfg.harmony is not None:
            pending["harmony"] = {
                v: harmony_train_task.submit(warehouse, cfg.harmony, v, reward, progress)
                for v in cfg.harmony.variants
            }
        # Each system's own evaluation waits for its training only.
        if cfg.harmony is not None:
            pending["harmony-eval"] = harmony_evaluate_task.submit(
                warehouse, cfg.harmony, progress, wait_for=list(pending["harmony"].values())
            )
        if cfg.chic is not None:
            pending["chic-eval"] = chic_evaluate_task.submit(
                warehouse, cfg.chic.eval, progress, wait_for=list(pending["chic"].values())
            )
        if cfg.rltaps is not None:
            pending["rltaps-eval"] = rltaps_evaluate_task.submit(
                warehouse, cfg.rltaps.stage, progress, wait_for=list(pending["rltaps"].values())
            )

        submitted = ", ".join(
            f"{name} ({len(pending[name])})"
            for name in ("dl2", "harmony", "chic", "rltaps")
            if name in pending
        )
        progress.line(
            f"training submitted: {submitted or 'nothing'}; each stage prints a line as it "
            "starts and ends"
        )
        learned = {}
        if cfg.dl2 is not None:
            recorded, warm = (f.result() for f in pending["dl2-chain"])
            summary["dl2"] = {"record": recorded, "warmup": warm}
            trained = {name: f.result() for name, f in pending["dl2"].items()}
            summary["dl2"]["finetune"] = trained.pop("dl2")
            summary["dl2"]["variants"] = trained
            learned = {"dl2-warmup": warm["policy_id"], "dl2": summary["dl2"]["finetune"]}
            learned["dl2"] = learned["dl2"]["policy_id"]
            learned |= {name: result["policy_id"] for name, result in trained.items()}
        refs = learned_policies(warehouse, learned)
        evaluations = []
        for derived in summary["derived"] if evaluation else ():
            if not derived["splits"].get(evaluation.split):
                logger.warning(
                    "no %s workloads in %s: not evaluated", evaluation.split, derived["derivation"]
                )
                continue
            one_set = replace(evaluation, workload_sets=(derived["derivation"],), learned=refs)
            evaluations.append(evaluate_task.submit(warehouse, one_set, progress=progress))
        summary["evaluated"] = [future.result() for future in evaluations]
        summary["interference"] = interference.result()
        summary["fidelity"] = fidelity.result()
        if summary["fidelity"]["failed"]:
            logger.warning("fidelity checks failed: %s", ", ".join(summary["fidelity"]["failed"]))

        if cfg.harmony is not None:
            summary["harmony"] = {
                "reward": pending["harmony-reward"].result(),
                "placement": {v: f.result() for v, f in pending["harmony"].items()},
                "evaluation": pending["harmony-eval"].result(),
            }
            if harmony_online_update:
                summary["harmony"]["online_update"] = harmony_online_task(
                    warehouse, cfg.harmony, progress
                )
        if cfg.chic is not None:
            summary["chic"] = {
                "train": {k: f.result() for k, f in pending["chic"].items()},
                "evaluation": pending["chic-eval"].result(),
            }
        if cfg.rltaps is not None:
            summary["rltaps"] = {
                "train": {k: f.result() for k, f in pending["rltaps"].items()},
                "evaluation": pending["rltaps-eval"].result(),
            }
        summary["report"] = report_task(warehouse, run_id, progress)
    except BaseException:
        finish_run(warehouse, run_id, "failed", summary)
        raise
    finish_run(warehouse, run_id, "completed", summary)
    return summary
