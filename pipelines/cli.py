"""`schedlab`: the command line over the flows and the warehouse.

Exit status: 0 success, 1 a failed query or stage (a `sql` query past its --timeout or
--memory-limit included), 2 bad input (unreadable, empty or malformed trace file, bad
mapping, bad arguments, SQL that `sql` refuses, a warehouse file that is damaged or not a
DuckDB file), 3 the warehouse is busy.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pipelines.system import Registry

EXIT_FAILED, EXIT_BAD_INPUT, EXIT_BUSY = 1, 2, 3


def _prefect_env() -> None:
    """Local Prefect defaults: state under ./var/prefect and a patient temporary API.

    Set here, before Prefect is imported, rather than at module import; explicit settings
    in the environment win.
    """
    home = Path(os.environ.setdefault("PREFECT_HOME", str(Path("var/prefect").resolve())))
    home.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")


def _print_frame(frame, fmt: str) -> None:
    import polars as pl

    if fmt == "csv":
        sys.stdout.write(_flat(frame).write_csv())
        return
    with pl.Config(
        tbl_rows=200,
        tbl_cols=-1,
        tbl_width_chars=200,
        fmt_str_lengths=60,
        tbl_hide_dataframe_shape=True,
    ):
        print(frame)
    print(f"({frame.height} rows)")


def _flat(frame):
    """The frame with every value CSV can hold: lists, structs, maps and arrays as JSON text,
    binary as text with its bytes escaped (CSV has no nested values; polars refuses them)."""
    import json

    import polars as pl

    def text(value):
        if value is None:
            return None
        if isinstance(value, bytes):
            return value.decode("utf-8", errors="backslashreplace")
        return json.dumps(value, default=str, ensure_ascii=False)

    flat = []
    for name, dtype in frame.schema.items():
        column = frame.get_column(name)
        if dtype.is_nested() or dtype in (pl.Binary, pl.Object):
            column = pl.Series(name, [text(v) for v in column.to_list()], dtype=pl.Utf8)
        flat.append(column)
    return pl.DataFrame(flat)


def _display(args):
    """The command's progress display: bars on a terminal, stage lines otherwise, nothing
    with --quiet (pipelines/progress.py)."""
    from pipelines.progress import ProgressDisplay, choose_mode

    return ProgressDisplay(choose_mode(args.quiet))


def _stop_at_once(*_hook_args: object) -> None:
    """From now on, end this process at once on Ctrl-C (SIGINT) or SIGTERM, saying so.

    Ctrl-C sends SIGINT to the terminal's whole process group, and a service manager's stop
    sends SIGTERM: Prefect's temporary API server, in the same group, ends at once, and the
    run, whose tasks' states go through that server, then waited on them for good (measured:
    still waiting minutes later). Ending as SIGKILL would is what the run is built for: a
    stage commits in one transaction or not at all, the watchdog (pipelines/lifeline.py)
    stops the run's other processes, and the next run resumes from the stages that
    completed (tests/test_tiny_run_restart.py). Prefect's flow engine puts a SIGTERM
    handler of its own in place while a flow runs, so this is called again from the flow's
    `on_running` hook (hence the ignored arguments: flow, flow run, state)."""
    import signal

    def stop(signum: int, frame: object) -> None:
        name = signal.Signals(signum).name
        os.write(
            2,
            f"\nschedlab run: interrupted ({name}): stopped; every stage that completed is "
            "in the warehouse, and the next run resumes from there\n".encode(),
        )
        os._exit(128 + signum)

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, stop)


def cmd_run(args) -> int:
    _stop_at_once()
    _prefect_env()
    from pipelines.lifeline import start_lifeline

    # Before Prefect starts its temporary API server: the server (and any worker) must end
    # with this process even if it is killed with SIGKILL (pipelines/lifeline.py).
    start_lifeline()
    from pipelines.runners import available_cores, default_runner

    args.task_runner = args.task_runner or default_runner(args.budget)
    with _display(args) as display:
        workers = (
            f" ({args.workers or available_cores()} workers)"
            if args.task_runner == "processes"
            else ""
        )
        display.reporter.line(
            f"schedlab run: task runner {args.task_runner}{workers}; starting Prefect (its "
            "temporary local API takes 10-20 s)"
            + (
                " and the worker processes (each imports torch, Prefect and the pipeline)"
                if workers
                else ""
            )
        )
        try:
            summary = _run_flow(args, display.reporter)
        except RuntimeError as exc:
            # Prefect's own temporary API (a Ray run, or a worker's) failed to start: the
            # environment's problem, said in one line, as `shared_api` says it.
            from pipelines.api import (
                ApiUnavailable,
                api_failure_reason,
                unavailable_message,
            )

            if "ephemeral Prefect API server" not in str(exc) or isinstance(exc, ApiUnavailable):
                raise
            raise ApiUnavailable(
                unavailable_message(api_failure_reason(exc), _startup_timeout())
            ) from None
    _print_run_summary(args, summary)
    return 0


def _startup_timeout() -> float:
    from prefect.settings import PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS

    return float(PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS.value())


def _run_flow(args, progress) -> dict:
    from importlib import import_module

    from pipelines.api import shared_api
    from pipelines.prestart import PrestartedPool, WarmUp
    from pipelines.runners import RunnerConfig, task_runner

    runner = task_runner(RunnerConfig(args.task_runner, args.workers, args.ray_address))
    with contextlib.ExitStack() as stack:
        if isinstance(runner, PrestartedPool):
            # The workers import torch and the pipeline while Prefect's API server starts and
            # this process imports the flow, instead of after, at the first submitted task;
            # they use this process's API server instead of starting one each.
            runner.start(
                WarmUp(("pipelines.flows",), tuple(s.steps for s in args.registry), progress)
            )
            stack.callback(runner.stop)
        if args.task_runner != "ray":
            # The temporary API server is started here, bounded and retried (Prefect's own
            # start, inside the flow, has one try); this process imports the flow meanwhile.
            # A Ray cluster's workers may be on other machines: they keep Prefect's own.
            stack.enter_context(shared_api(progress, lambda: import_module("pipelines.flows")))
        from pipelines.flows import nightly_flow

        return nightly_flow.with_options(task_runner=runner, on_running=[_stop_at_once])(
            warehouse=args.warehouse,
            seed=args.seed,
            # The embedded default's size lives with the run's config, not in the parser.
            **({} if args.jobs is None else {"n_jobs": args.jobs}),
            jobs_per_sequence=args.jobs_per_sequence,
            incoming=args.incoming,
            eval_seeds=args.eval_seeds,
            eval_sequences=args.eval_sequences,
            budget=args.budget,
            arena_training=args.arena_training,
            systems=args.systems.split(",") if args.systems else None,
            options={
                flag.dest: getattr(args, flag.dest) for s in args.registry for flag in s.flags()
            },
            registry=args.registry,
            progress=progress,
            shadow_spool=args.shadow_spool,
        )


def _print_run_summary(args, summary: dict) -> None:
    """The end summary of `schedlab run` (always printed, --quiet too)."""
    print(f"run {summary['run_id']} completed")
    for item in summary["ingested"]:
        print(
            f"  source {item['source_id']}: {item['outcome']}, {item['rows_accepted']} jobs, "
            f"{item['rows_quarantined']} quarantined"
            + (f" ({item['note']})" if item.get("note") else "")
        )
    for item in summary["rejected"]:
        print(f"  REJECTED {item['error']}")
    for item in summary.get("shadow", []):
        print(
            f"  shadow day {item['source_id']}: {item['outcome']}, {item['rows_accepted']} jobs, "
            f"{item['rows_quarantined']} quarantined, {item['decisions']} decision rows"
            + (f" ({item['note']})" if item.get("note") else "")
        )
    for item in summary.get("shadow_replays", []):
        print(
            f"  counterfactual {item['source_id']} under {item['policy']}: "
            + (f"evaluation {item['eval_id']}" if item["eval_id"] else f"none ({item['note']})")
        )
    for item in summary["derived"]:
        print(f"  workloads {item['derivation']}: {item['splits']} ({item['jobs']} jobs)")
    if item := summary.get("interference"):
        print(
            f"  interference samples ({item['source']}, seed {item['seed']}): {item['samples']} "
            f"in {item['sample_sets']} saturated sets, mean slowdown {item['mean_slowdown']:.1%}"
        )
    if item := summary.get("fidelity"):
        failed = ", ".join(item["failed"]) or "none"
        how = "stored" if item["cached"] else "run"
        print(f"  simulator fidelity checks: {item['checks']} ({how}), failed: {failed}")
    for system in args.registry:
        if item := summary.get(system.key):
            print("\n".join(system.summary_lines(item)))
    for item in summary["evaluated"]:
        _print_evaluation(item)
    for note in sorted(set(_resume_notes(summary))):
        print(f"  NOTE {note}")
    from warehouse import resolve_path

    print(f"report: {summary['report']}")
    print(f"warehouse: {resolve_path(args.warehouse)}")


def _resume_notes(value):
    """Every `resume_note` in a run summary: policies that could not continue from their
    parent because its checkpoint was lost or refused (see models.checkpoints.resume_from)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "resume_note" and isinstance(item, str):
                yield item
            else:
                yield from _resume_notes(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _resume_notes(item)


def _print_evaluation(result: dict) -> None:
    print(f"  evaluation {result['eval_id']}: {result['runs']} runs, {result['jobs']} jobs")
    for row in result["summary"]:
        low, high = row["avg_jct_ci_low"], row["avg_jct_ci_high"]
        ci = f"[{low:,.0f}, {high:,.0f}]" if low is not None else "(one run: no interval)"
        ratio = f"x{row['jct_ratio']:.2f}"
        if row["jct_ratio_ci_low"] is not None:
            ratio += f" [{row['jct_ratio_ci_low']:.2f}, {row['jct_ratio_ci_high']:.2f}]"
        print(
            f"    {row['workload_set']} {row['scheduler']:<16} avg JCT {row['avg_jct_s']:>9,.0f} s "
            f"{row['confidence']:.0%} CI {ci} ({row['avg_jct_slots']:.2f} slots); "
            f"vs {row['reference']} {ratio}"
        )
    for workload_set, path in result["plots"].items():
        print(f"    JCT CDF {workload_set}: {path}")


def cmd_evaluate(args) -> int:
    from dataclasses import asdict

    from models.evaluation import eval_config
    from pipelines.registry import SYSTEMS
    from pipelines.stages import evaluate_stage, finish_run, learned_policies, start_run

    cfg = eval_config(
        workload_sets=args.set,
        schedulers=args.scheduler,
        n_seeds=args.seeds,
        seed=args.seed,
        max_sequences=args.sequences or None,
        n_servers=args.servers,
        window=args.window or None,
        split=args.split,
        learned=learned_policies(
            args.warehouse, _policy_args(args.policy or []), SYSTEMS.loaders()
        ),
    )
    run_id = start_run(args.warehouse, "schedlab-evaluate", cfg.seed, {"evaluation": cfg.to_dict()})
    try:
        with _display(args) as display, display.reporter.stage("evaluate schedulers"):
            result = evaluate_stage(args.warehouse, cfg, args.out_dir, display.reporter)
    except BaseException:
        finish_run(args.warehouse, run_id, "failed", {"run_id": run_id})
        raise
    finish_run(args.warehouse, run_id, "completed", {"run_id": run_id, **asdict(result)})
    _print_evaluation(asdict(result))
    return 0


def _policy_args(values: list[str]) -> dict[str, str]:
    """`--policy` values: "NAME=POLICY_ID", or a system ("dl2": its newest policy)."""
    out = {}
    for value in values:
        name, _, key = value.partition("=")
        out[name] = key or name
    return out


def cmd_ingest(args) -> int:
    from pipelines.stages import ingest_stage

    with _display(args) as display, display.reporter.stage(f"ingest {args.path}"):
        result = ingest_stage(
            args.warehouse,
            args.path,
            args.format,
            mapping=args.mapping,
            source_id=args.source_id,
            progress=display.reporter,
        )
    print(
        f"{result.source_id}: {result.outcome}; {result.rows_accepted} jobs accepted, "
        f"{result.rows_quarantined} quarantined"
    )
    if result.note:
        print(f"  ({result.note})")
    if result.rows_quarantined:
        print(f"  see: {_quarantine_hint(result.source_id)}")
    return 0


def _quarantine_hint(source_id: str) -> str:
    """A command that lists a source's quarantined records, safe to paste into a shell:
    the id is a SQL string literal (quotes doubled) inside one shell-quoted argument, so
    an id holding quotes, `$` or backticks neither breaks the query nor runs anything."""
    import shlex

    literal = "'" + source_id.replace("'", "''") + "'"
    query = f"SELECT record_no, field, reason FROM quarantine WHERE source_id = {literal}"
    # Double quotes read best and are safe when nothing inside is special to the shell.
    if not any(c in query for c in '"$`\\!'):
        return f'schedlab sql "{query}"'
    return f"schedlab sql {shlex.quote(query)}"


def cmd_derive(args) -> int:
    from pipelines.stages import derive_stage
    from tracelib.workloads import DeriveConfig, set_name

    cfg = DeriveConfig(
        name=args.name or set_name(args.sources),
        seed=args.seed,
        jobs_per_sequence=args.jobs_per_sequence,
        epoch_basis=args.epoch_basis,
        time_scale=args.time_scale,
        arrival_scale=args.arrival_scale,
    )
    with _display(args) as display, display.reporter.stage(f"derive workloads {cfg.name}"):
        result = derive_stage(args.warehouse, args.sources, cfg)
    print(f"{result.derivation}: {result.workloads} workloads {result.splits}, {result.jobs} jobs")
    return 0


def cmd_sql(args) -> int:
    import duckdb

    from warehouse import (
        QueryLimitExceeded,
        WarehouseCorrupt,
        classify_error,
        connect,
        resolve_path,
        run_user_query,
    )

    # The query is whatever the user typed: it runs on a connection that can read the
    # warehouse and nothing else, within a time and memory bound (warehouse/query.py).
    with connect(args.warehouse, query_only=True, memory_limit=args.memory_limit) as con:
        try:
            result = run_user_query(
                con, args.query, timeout_s=args.timeout or None, max_rows=args.max_rows or None
            )
        except QueryLimitExceeded as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_FAILED
        except duckdb.PermissionException as exc:
            print(f"error: refused: {_first_line(exc)}; {SQL_ALLOWS}", file=sys.stderr)
            return EXIT_BAD_INPUT
        except duckdb.Error as exc:
            problem = classify_error(resolve_path(args.warehouse), exc)
            if isinstance(problem, WarehouseCorrupt):
                raise problem from None
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_FAILED
    _print_frame(result.frame, args.format)
    if result.truncated:
        print(
            f"(output stopped at {args.max_rows:,} rows: --max-rows; aggregate, filter or "
            "raise it)",
            file=sys.stderr,
        )
    return 0


def _memory_size(text: str) -> str:
    """An argparse type: a size DuckDB's memory_limit reads (500MB, 2GB, 1.5GiB)."""
    import re

    if not re.fullmatch(r"\d+(\.\d+)?\s*([KMGT]i?B|B)", text.strip(), re.IGNORECASE):
        raise argparse.ArgumentTypeError(f"not a size like 500MB or 2GB: {text!r}")
    return text.strip()


SQL_ALLOWS = (
    "`schedlab sql` runs one SELECT on the warehouse and nothing else (no file access, "
    "ATTACH, COPY, extensions or settings)"
)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def cmd_tables(args) -> int:
    from warehouse import connect, table_counts

    with connect(args.warehouse, query_only=True) as con:
        _print_frame(table_counts(con), args.format)
    return 0


def cmd_describe(args) -> int:
    from pipelines.describe import describe_source
    from tracelib.describe import describe_text

    print(describe_text(describe_source(args.warehouse, args.source_id)))
    return 0


def cmd_delete_source(args) -> int:
    from pipelines.sources import delete_source
    from pipelines.stages import evaluation_dir

    result = delete_source(
        args.warehouse,
        args.source_id,
        dry_run=not args.yes,
        evaluations_dir=evaluation_dir(args.warehouse),
        purge=not args.no_purge,
    )
    verb = "deleted" if result.done else "would delete"
    print(f"{verb} source {result.source_id}:")
    for table, n in result.rows.items():
        if n:
            print(f"  {table:<16} {n:>10,} rows")
    if result.derivations:
        print(f"  workload sets: {', '.join(result.derivations)}")
    if result.evaluations:
        print(f"  evaluations: {', '.join(result.evaluations)}")
    if not result.done:
        print("nothing deleted yet: run again with --yes to delete")
    elif not args.no_purge:
        print("warehouse file rewritten: no byte of the deleted rows is left in it")
    return 0


def cmd_backup(args) -> int:
    from warehouse.maintenance import backup

    path = backup(args.warehouse, args.to)
    print(f"backup written: {path}")
    print(f"restore it with: schedlab restore {path}")
    return 0


def cmd_restore(args) -> int:
    from warehouse import resolve_path
    from warehouse.maintenance import restore

    result = restore(args.warehouse, args.backup)
    total = sum(result.rows.values())
    print(f"restored {args.backup} to {result.path} ({total:,} rows in {len(result.rows)} tables)")
    print(f"the replaced file is kept as {resolve_path(args.warehouse)}.before-restore")
    return 0


def cmd_check(args) -> int:
    from warehouse.maintenance import check

    result = check(args.warehouse)
    total, tables = sum(result.rows.values()), len(result.rows)
    print(f"{result.path}: every block read and verified ({total:,} rows in {tables} tables)")
    return 0


def cmd_replay(args) -> int:
    from pipelines.replay import (
        ReplayConfig,
        ReplayInputError,
        at_end_text,
        ratio_text,
        replay_stage,
    )
    from pipelines.replay_learned import BASELINES, FAMILIES, check_baselines
    from tracelib.sim.replay import Unplaceable

    named = tuple(args.scheduler or ())
    # Learned families run in the arena's simulator after the rules (pipelines.replay_learned);
    # "all" names every rule and every family that has a policy.
    learned = tuple(n for n in named if n in FAMILIES)
    rules = tuple(n for n in named if n not in FAMILIES)

    try:
        baselines = BASELINES
        if args.arena_baseline:
            if not learned and "all" not in named:
                raise ReplayInputError(
                    "--arena-baseline names the heuristics a learned family is compared with: "
                    f"name a family with --scheduler ({', '.join(FAMILIES)})"
                )
            # Before the rules run: a misspelt name is said at once, not after them.
            baselines = check_baselines(args.arena_baseline)
        window = None
        if args.window:
            start, _, end = args.window.partition(",")
            try:
                window = (datetime.fromisoformat(start), datetime.fromisoformat(end))
            except ValueError:
                raise ReplayInputError(
                    f"--window {args.window!r}: expected START,END as ISO dates or times "
                    "(e.g. 2017-10-01,2017-10-08)"
                ) from None
        capacity = (1.0,)
        if args.capacity:
            try:
                capacity = tuple(float(c) for c in args.capacity.split(","))
            except ValueError:
                raise ReplayInputError(
                    f"--capacity {args.capacity!r}: expected numbers, e.g. 0.5,0.75,1,1.25"
                ) from None
        cfg = ReplayConfig(
            source_id=args.source_id,
            schedulers=rules or ReplayConfig.schedulers,
            servers=args.servers,
            gpus=args.gpus,
            gpus_per_server=args.gpus_per_server,
            window=window,
            preempt_cost_s=args.preempt_cost,
            nodes=args.nodes,
            capacity=capacity,
            utilization=args.utilization,
            workers=args.workers,
            runner=args.task_runner,
            ray_address=args.ray_address,
            block=args.block,
            seed=args.seed,
        )
        with _display(args) as display, display.reporter.stage(f"replay {args.source_id}"):
            outcome = replay_stage(args.warehouse, cfg, display.reporter)
        clusters = [(run.factor, run.cluster) for run in outcome.capacities]
        arenas = _learned_replay(args, learned, "all" in named, clusters, window, baselines)
    except (ReplayInputError, Unplaceable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    c = outcome.sizing.cluster
    print(outcome.headline)
    if arenas:
        # The sized cluster's sentence, as for the rules (`ReplayOutcome.headline`).
        print(next((a for f, a in arenas if f == 1.0), arenas[0][1]).headline)
    print(
        f"{outcome.n_jobs:,} jobs replayed; cluster "
        + (
            outcome.shape
            or f"{c.n_servers:,} servers x {c.gpus_per_server:g} GPUs ({c.total_gpus:,.0f} GPUs)"
        )
        + f", {outcome.sizing.statement}"
    )
    print(f"replayed: {outcome.replayed}")
    if outcome.left_out:
        print("left out: " + ", ".join(f"{n:,} {r}" for r, n in outcome.left_out.items()))
    for run in outcome.capacities:
        k = run.cluster
        print(
            f"{run.eval_id}: capacity {run.factor:g} ({k.n_servers:,} servers, "
            f"{k.total_gpus:,.0f} GPUs)"
        )
        for row in run.summary.iter_rows(named=True):
            name = row["scheduler"]
            end = run.at_end[name]
            print(
                f"  {name:14} average JCT {row['avg_jct_s'] / 3600:8.2f} h  median "
                f"{row['median_jct_s'] / 3600:7.2f} h  queueing {run.queueing_s[name] / 3600:8.2f}"
                f" h  slowdown {row['mean_slowdown']:8.2f}  JCT / {row['reference']} "
                f"{ratio_text(row['jct_ratio'], row['jct_ratio_ci_low'], row['jct_ratio_ci_high'])}"
                f"  ({run.seconds[name]:.1f} s)"
            )
            if outcome.shape:
                # Beside JCT, what a pod list of long-running services is judged by (FGD).
                print(f"  {'':14} {at_end_text(end)}")
    if outcome.plot is not None:
        print(f"plot: {outcome.plot}")
    arena_plot = None
    if len(arenas) > 1:
        from pipelines.replay import write_capacity_plot
        from pipelines.replay_learned import arena_capacity_frame

        arena_plot = write_capacity_plot(
            args.warehouse, f"replay-arena:{args.source_id}", arena_capacity_frame(arenas)
        )
    for factor, arena in arenas:
        print(
            f"{arena.eval_id}: the arena's simulator at capacity {factor:g}, "
            f"{arena.seconds:.1f} s; policies "
            + ", ".join(f"{f} {p}" for f, p in arena.policies.items())
        )
        for family, why in arena.refused.items():
            print(f"  {family:16} not replayed: {why}")
        for row in arena.summary.iter_rows(named=True):
            print(
                f"  {row['scheduler']:16} average JCT {row['avg_jct_s'] / 3600:8.2f} h  "
                f"/ {row['best_heuristic']} "
                + ratio_text(
                    row["ratio_to_best_heuristic"], row["ratio_ci_low"], row["ratio_ci_high"]
                )
                + f"  ({arena.scheduler_seconds[row['scheduler']]:,.1f} s)"
            )
    if arena_plot is not None:
        print(f"plot: {arena_plot}")
    return 0


def _learned_replay(
    args, learned: tuple[str, ...], every: bool, clusters, window, baselines: tuple[str, ...]
) -> list:
    """The learned families' whole-trace runs, one per (capacity, replay cluster) of
    `clusters`, beside the arena heuristics `baselines`, as [(capacity,
    LearnedReplayOutcome)] (empty when none is asked for); with "all", every family that has
    a policy for the source."""
    from pipelines.replay_learned import (
        FAMILIES,
        LearnedReplayConfig,
        learned_replays,
        newest_policies,
    )
    from warehouse import connect

    if every:
        with connect(args.warehouse, read_only=True) as con:
            found = newest_policies(con, args.source_id, tuple(FAMILIES))
        learned = tuple(dict.fromkeys((*learned, *(f for f, p in found.items() if p))))
    if not learned:
        return []
    cfgs = [
        LearnedReplayConfig(
            args.source_id,
            learned,
            gpus=cluster.total_gpus,
            servers=cluster,
            baselines=baselines,
            seed=args.seed,
            block=args.block,
            window=window,
            skip_refused=every,  # "all": the families that can run here
            capacity=factor if len(clusters) > 1 else None,
        )
        for factor, cluster in clusters
    ]
    with _display(args) as display:
        outcomes = learned_replays(
            args.warehouse,
            cfgs,
            runner=args.task_runner,
            workers=args.workers,
            ray_address=args.ray_address,
            progress=display.reporter,
        )
    return [(factor, o) for (factor, _), o in zip(clusters, outcomes, strict=True)]


def cmd_collect(args) -> int:
    """`schedlab collect slurm|k8s`: a snapshot and observations from the scheduler's JSON,
    written as JSON (`--out`, default stdout) or sent to a decision service (`--post`)."""
    from pipelines.collect import (
        TOKEN_ENV,
        PostFailed,
        collect_k8s_files,
        collect_slurm_files,
        post,
    )
    from tracelib.ingest.base import printable
    from tracelib.shadow.collect import CollectError

    times = {}
    for flag in ("time", "since"):
        text = getattr(args, flag)
        try:
            times[flag] = datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None
        except ValueError:
            times[flag] = datetime.min
        if text and times[flag].tzinfo is None:
            shown = printable(repr(text), 80)
            print(
                f"error: --{flag} {shown}: expected an RFC 3339 time with a zone", file=sys.stderr
            )
            return EXIT_BAD_INPUT
    now = times["time"]
    try:
        if args.scheduler == "slurm":
            collected = collect_slurm_files(
                args.squeue, args.sinfo, args.sacct, cluster=args.cluster, now=now
            )
        else:
            collected = collect_k8s_files(args.pods, args.nodes, cluster=args.cluster, now=now)
    except CollectError as exc:
        print(printable(f"error: {exc}", 600), file=sys.stderr)
        return EXIT_BAD_INPUT
    for item in collected.skipped:
        print(printable(f"skipped {item}", 600), file=sys.stderr)
    if times["since"] is not None:
        # What happened before the previous collection was sent then: not again.
        collected.observations = [o for o in collected.observations if o.time >= times["since"]]
    snapshot = collected.snapshot
    said = (
        f"{snapshot.cluster} at {snapshot.time:%Y-%m-%d %H:%M:%S %Z}: {len(snapshot.servers)} "
        f"servers, {len(snapshot.running)} running, {len(snapshot.pending)} pending, "
        f"{len(collected.observations)} observations, {len(collected.skipped)} skipped"
    )
    if args.post:
        try:
            token = args.token or os.environ.get(TOKEN_ENV) or None
            posted = post(collected, args.post, token)
        except PostFailed as exc:
            print(printable(f"error: not sent: {exc}", 600), file=sys.stderr)
            return EXIT_FAILED
        started = posted.decision.get("start", [])
        print(
            f"{said}; sent to {args.post}: decision {posted.decision.get('decision_id', '?')} "
            f"starts {len(started)} job(s), {posted.observations} observation(s) recorded",
            file=sys.stderr,
        )
        return 0
    text = json.dumps(collected.to_json(), indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    else:
        print(text)
    print(said, file=sys.stderr)
    return 0


def cmd_report(args) -> int:
    from pipelines.report import write_report
    from tracelib.ingest.base import printable

    if args.out is not None:
        problem = _unwritable(Path(args.out))
        if problem:
            print(
                printable(f"error: --out {args.out}: {problem}; nothing written", 400),
                file=sys.stderr,
            )
            return EXIT_BAD_INPUT
    try:
        print(write_report(args.warehouse, out=args.out))
    except OSError as exc:
        if args.out is None or exc.filename is None:
            raise
        reason = exc.strerror or type(exc).__name__
        print(
            printable(f"error: --out {args.out}: cannot write it ({reason})", 400), file=sys.stderr
        )
        return EXIT_BAD_INPUT
    return 0


def _unwritable(target: Path) -> str | None:
    """Why a file cannot be written at `target` (checked before a long job writes it), or
    None: it names a folder, a component of its folder is a file, or the first existing
    folder above it does not let this user create files."""
    if target.is_dir():
        return "it is a folder; name a file (e.g. report.html)"
    parent = target.parent
    while not parent.exists():
        if parent.is_symlink():  # a dangling link: creating under it fails
            return f"{parent} is a broken link"
        parent = parent.parent
    if not parent.is_dir():
        return f"{parent} is a file, not a folder"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"no permission to write in {parent}"
    if target.exists() and not os.access(target, os.W_OK):
        return "no permission to overwrite it"
    return None


def nightly_deployment(args):
    """The nightly flow as a Prefect deployment on a cron schedule (not yet served)."""
    from pipelines.flows import nightly_flow
    from warehouse import resolve_path

    return nightly_flow.to_deployment(
        name=args.name,
        cron=args.cron,
        parameters={
            "warehouse": str(resolve_path(args.warehouse).resolve()),
            "seed": args.seed,
            "incoming": str(Path(args.incoming).resolve()) if args.incoming else None,
            "shadow_spool": str(Path(args.shadow_spool).resolve()) if args.shadow_spool else None,
        },
    )


def cmd_serve(args) -> int:
    _prefect_env()
    from pipelines.lifeline import start_lifeline

    start_lifeline()  # as in cmd_run: the temporary API server ends with this process
    from prefect import serve

    deployment = nightly_deployment(args)
    print(f"serving {deployment.name} on cron {args.cron!r}; Ctrl-C stops it")
    serve(deployment)
    return 0


def cmd_serve_policy(args) -> int:
    from pipelines.shadow.policies import PolicyUnavailable
    from pipelines.shadow.serve import ServeConfig, serve_policy
    from tracelib.shadow.spool import SpoolError

    try:
        cfg = ServeConfig(
            policy=args.policy,
            host=args.host,
            port=args.port,
            spool=Path(args.spool) if args.spool else None,
            token=args.token,
            max_body_bytes=args.max_body_bytes,
            warehouse=args.warehouse,
            cluster=args.cluster,
            seed=args.seed,
            workers=args.workers,
        )
        return serve_policy(cfg)
    except (PolicyUnavailable, SpoolError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


def build_parser(registry: Registry | None = None) -> argparse.ArgumentParser:
    """The command line; `schedlab run` has the flags of every system of `registry`
    (default: `pipelines.registry.SYSTEMS`)."""
    if registry is None:
        from pipelines.registry import SYSTEMS

        registry = SYSTEMS
    from pipelines.system import at_least

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--quiet",
        action="store_true",
        help="no progress lines or bars (the end summary is still printed)",
    )
    common.add_argument(
        "--warehouse",
        default=None,
        help="DuckDB file (default: $SCHEDLAB_WAREHOUSE, else ./var/schedlab.duckdb)",
    )
    parser = argparse.ArgumentParser(
        prog="schedlab",
        description="Learned scheduling for deep-learning GPU clusters: traces in, "
        "schedulers trained and evaluated, results in DuckDB.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def command(
        name: str, func: Callable[[argparse.Namespace], int], **kwargs: Any
    ) -> argparse.ArgumentParser:
        """Subcommand `name` with the common options, run by `func`."""
        each = sub.add_parser(name, parents=[common], **kwargs)
        each.set_defaults(func=func)
        return each

    run = sub.add_parser("run", parents=[common], help="run the nightly flow once")
    run.add_argument("--seed", type=int, default=0, help="the run's seed (default 0)")
    run.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="synthetic jobs (default: pipelines.config.SYNTHETIC_JOBS, 1,080)",
    )
    run.add_argument("--jobs-per-sequence", type=int, default=60, help="jobs per workload")
    run.add_argument("--incoming", default=None, help="folder of production traces to ingest")
    run.add_argument(
        "--shadow-spool",
        default=None,
        help="shadow spool whose closed days to ingest (default: shadow-spool/ beside the "
        "warehouse, when it exists)",
    )
    run.add_argument(
        "--eval-seeds",
        type=int,
        default=None,
        help="evaluation seeds per test workload (0: skip; default: the budget's, 3, smoke 1)",
    )
    run.add_argument(
        "--eval-sequences",
        type=int,
        default=None,
        help="at most this many test sequences per workload set are evaluated (0: all; "
        "default: the budget's, 9, smoke 1, large 16)",
    )
    run.add_argument(
        "--budget",
        choices=["smoke", "default", "large"],
        default="default",
        help="training and evaluation sizes of every learned system: smoke (about a minute, "
        "numbers meaningless), default, large (hours); the flags below override it",
    )
    run.add_argument(
        "--arena-training",
        choices=["synthetic", "every-set"],
        default=None,
        help="which workload sets each learned system trains its arena policy on: the "
        "synthetic set only, or every derived set, each set then evaluated with its own "
        "policy (default: the budget's: every-set, smoke synthetic)",
    )
    run.add_argument(
        "--systems",
        default=None,
        help="comma-separated learned systems to train (default all: "
        f"{','.join(s.name for s in registry)})",
    )
    # Each system's own flags, from its options dataclass (pipelines/system.py).
    for system in registry:
        for flag in system.flags():
            flag.add_to(run)
    run.add_argument(
        "--task-runner",
        choices=["sequential", "processes", "ray"],
        default=None,
        help="run independent tasks in local worker processes (default with more than one "
        "core, except for the smoke budget: one per core), one at a time, or on Ray; the "
        "tables are the same whichever runs them",
    )
    run.add_argument(
        "--workers", type=int, default=None, help="worker processes (--task-runner processes)"
    )
    run.add_argument(
        "--ray-address",
        default=None,
        help="Ray cluster to use (--task-runner ray), e.g. auto or ray://head:10001; "
        "default: start a local Ray instance",
    )
    run.set_defaults(func=cmd_run, registry=registry)

    ingest = command("ingest", cmd_ingest, help="ingest one trace file")
    ingest.add_argument("path", help="trace file (PAI: folder or pai_job_table.csv)")
    ingest.add_argument("--format", required=True, choices=["philly", "pai", "helios", "generic"])
    ingest.add_argument(
        "--mapping",
        default=None,
        help="mapping file (TOML) for --format generic, or a shipped mapping: "
        "helios, alibaba-gpu-2023",
    )
    ingest.add_argument("--source-id", default=None, help="source id (default format:file-stem)")

    derive = command("derive", cmd_derive, help="derive workloads from sources")
    derive.add_argument("sources", nargs="+", help="trace source ids")
    derive.add_argument(
        "--name",
        default=None,
        help="workload set name (default: from the sources', e.g. helios:night2 -> helios-night2)",
    )
    derive.add_argument("--seed", type=int, default=0)
    derive.add_argument("--jobs-per-sequence", type=int, default=60)
    derive.add_argument(
        "--epoch-basis", choices=["single_worker", "requested"], default="single_worker"
    )
    derive.add_argument("--time-scale", type=float, default=1.0, help="multiply run times")
    derive.add_argument("--arrival-scale", type=float, default=1.0, help="multiply inter-arrivals")

    evaluate = command("evaluate", cmd_evaluate, help="evaluate schedulers on the test workloads")
    evaluate.add_argument(
        "--set",
        action="append",
        help="workload set (derivation name); repeat for several (default: every set)",
    )
    evaluate.add_argument(
        "--scheduler",
        action="append",
        help="registry name (allocation, placement or allocation+placement); repeat for "
        "several (default: every DL2 heuristic)",
    )
    evaluate.add_argument(
        "--policy",
        action="append",
        help="a registered learned policy: NAME=POLICY_ID, or a system (e.g. dl2) for its "
        "newest policy; repeat for several",
    )
    evaluate.add_argument("--seeds", type=int, default=3, help="seeds per workload (default 3)")
    evaluate.add_argument("--seed", type=int, default=0, help="root seed (default 0)")
    evaluate.add_argument(
        "--sequences", type=int, default=0, help="at most this many sequences per set (0: all)"
    )
    evaluate.add_argument("--split", choices=["train", "validation", "test"], default="test")
    evaluate.add_argument("--servers", type=int, default=96, help="servers of 2 GPUs (default 96)")
    evaluate.add_argument(
        "--window", type=int, default=20, help="jobs visible per decision (default 20; 0: all)"
    )
    evaluate.add_argument(
        "--out-dir",
        default=None,
        help="plot folder (default: evaluations/<warehouse name>/ beside the warehouse)",
    )

    sql = command("sql", cmd_sql, help="run a SQL query on the warehouse")
    sql.add_argument("query")
    sql.add_argument("--format", choices=["table", "csv"], default="table")
    sql.add_argument(
        "--timeout",
        type=at_least(float, 0),
        default=60.0,
        help="stop the query after this many seconds (default 60; 0: no limit)",
    )
    sql.add_argument(
        "--memory-limit",
        type=_memory_size,
        default="2GB",
        help="DuckDB memory limit for the query, e.g. 500MB, 4GB (default 2GB; nothing is "
        "spilled to disk)",
    )
    sql.add_argument(
        "--max-rows",
        type=at_least(int, 0),
        default=1_000_000,
        help="fetch and print at most this many rows (default 1,000,000; 0: all)",
    )

    tables = command("tables", cmd_tables, help="tables and row counts")
    tables.add_argument("--format", choices=["table", "csv"], default="table")

    describe = command(
        "describe",
        cmd_describe,
        help="what an ingested trace is: jobs, span, arrivals, durations, GPU demand, status, "
        "users, peak concurrent GPUs, quarantine",
    )
    describe.add_argument("source_id", help="an ingested source (see `schedlab tables`)")

    delete = command(
        "delete-source",
        cmd_delete_source,
        help="delete an ingested trace and everything derived from it (its jobs and "
        "quarantine, the workload sets drawn from it, their evaluations); without --yes, "
        "print what would go",
    )
    delete.add_argument("source_id", help="an ingested source (see `schedlab tables`)")
    delete.add_argument("--yes", action="store_true", help="delete (default: only show)")
    delete.add_argument(
        "--no-purge",
        action="store_true",
        help="skip rewriting the warehouse file afterwards (faster on a large warehouse, but "
        "the deleted rows' bytes stay readable in the file until it is rewritten)",
    )

    backup = command(
        "backup",
        cmd_backup,
        help="copy the warehouse, verified, to backups/ beside it (or --to PATH)",
    )
    backup.add_argument("--to", default=None, help="file to write (must not exist)")

    restore = command(
        "restore",
        cmd_restore,
        help="put a backup in place of the warehouse (verified first; the replaced file is "
        "kept as <warehouse>.before-restore)",
    )
    restore.add_argument("backup", help="a file written by `schedlab backup` or the nightly run")

    command(
        "check",
        cmd_check,
        help="read the whole warehouse so every block's checksum is verified (and put back an "
        "interrupted write's blocks first)",
    )

    replay = command(
        "replay",
        cmd_replay,
        help="replay a whole ingested trace (jobs keep their GPUs, submit and run times) "
        "under replay rules; rows go to eval_runs/eval_jobs/eval_summary",
    )
    replay.add_argument("source_id", help="an ingested source (see `schedlab tables`)")
    replay.add_argument(
        "--scheduler",
        action="append",
        help="replay rule (`models.heuristics.REPLAYS`): fifo, fifo-backfill, sjf, srtf, drf, "
        "tetris, tiresias-las, tiresias-gittins, fifo-fgd, fifo-gpu-best-fit; or a learned "
        "family, run over the whole trace in the arena's simulator beside its heuristics: "
        "dl2, harmony, chic, chic-pair, rl-taps; or all (every rule and every family with a "
        "policy); repeat for several (default: fifo, sjf, srtf, drf, tetris, tiresias-las, "
        "fifo-fgd)",
    )
    replay.add_argument(
        "--arena-baseline",
        action="append",
        metavar="SCHEDULER",
        help="arena heuristic the learned families are compared with, on the same simulator "
        "(repeat for several; default: optimus-events, drf, fifo). Optimus at every event is "
        "the arena's best and, on a long trace, its slowest: e.g. --arena-baseline drf for a "
        "quicker first answer",
    )
    replay.add_argument(
        "--servers",
        type=int,
        default=None,
        help="servers (default: sized from the trace: calibrated to its observed queueing "
        "delay where it records start times, else to --utilization; docs/traces.md)",
    )
    replay.add_argument(
        "--gpus", type=float, default=None, help="total GPUs, in whole servers (like --servers)"
    )
    replay.add_argument(
        "--capacity",
        default=None,
        help="what-if: replay every rule, and every learned family asked for, at these "
        "multiples of the cluster's servers, e.g. 0.5,0.75,1,1.25 (a table and a plot of "
        "JCT and queueing delay per capacity)",
    )
    replay.add_argument(
        "--utilization",
        type=float,
        default=0.7,
        help="mean GPU utilization that sizes the cluster of a trace without start times "
        "(default 0.7, a choice: docs/traces.md)",
    )
    replay.add_argument(
        "--workers",
        type=int,
        default=None,
        help="processes the replays run in (default: one per available core; 1: sequential)",
    )
    replay.add_argument(
        "--task-runner",
        choices=("processes", "sequential", "ray"),
        default="processes",
        help="where the independent replays (rules x capacities, and the learned families' "
        "runs at each capacity) run: local processes (default), this process one after "
        "another, or a Ray cluster",
    )
    replay.add_argument(
        "--block",
        choices=("day", "week"),
        default="day",
        help="block of the paired block bootstrap behind the ratios' 95%% intervals: jobs by "
        "the day (default) or week they were submitted in (docs/traces.md)",
    )
    replay.add_argument(
        "--seed", type=int, default=0, help="seed of the bootstrap's draws (default 0)"
    )
    replay.add_argument(
        "--ray-address",
        default=None,
        help="Ray cluster for --task-runner ray, e.g. auto or ray://head:10001 (default: a "
        "local Ray instance started for the replay)",
    )
    replay.add_argument(
        "--gpus-per-server", type=float, default=8.0, help="GPUs per server (default 8)"
    )
    replay.add_argument(
        "--window", default=None, help="START,END: only jobs submitted in [START, END) (ISO)"
    )
    replay.add_argument(
        "--nodes",
        default=None,
        metavar="FILE",
        help="node list that is the cluster (Alibaba 2023 openb_node_list_*.csv: sn, "
        "cpu_milli, memory_mib, gpu, model): each server's GPUs, GPU type, CPU and memory; "
        "a pod starts only where all of them fit",
    )
    replay.add_argument(
        "--preempt-cost",
        type=float,
        default=30.0,
        help="seconds a preempted job loses when it resumes (srtf, tiresias-las, "
        "tiresias-gittins; default 30)",
    )

    collect = sub.add_parser(
        "collect",
        help="turn a scheduler's JSON (Slurm, Kubernetes) into a shadow snapshot and observations",
    )
    schedulers = collect.add_subparsers(dest="scheduler", required=True)
    slurm = schedulers.add_parser(
        "slurm", help="from squeue --json, sinfo --json and, optionally, sacct --json"
    )
    slurm.add_argument("--squeue", required=True, help="file of `squeue --json` output")
    slurm.add_argument(
        "--sinfo", required=True, help="file of `sinfo --json` (or `scontrol show nodes --json`)"
    )
    slurm.add_argument("--sacct", default=None, help="file of `sacct --json` output (optional)")
    k8s = schedulers.add_parser("k8s", help="from kubectl get pods,nodes -o json")
    k8s.add_argument(
        "--pods",
        required=True,
        help="file of `kubectl get pods -A -o json` output (or of `kubectl get pods,nodes -A "
        "-o json`)",
    )
    k8s.add_argument(
        "--nodes",
        default=None,
        help="file of `kubectl get nodes -o json` output (default: the nodes of the --pods "
        "file, e.g. `kubectl get pods,nodes -A -o json`)",
    )
    for each in (slurm, k8s):
        each.add_argument(
            "--cluster",
            default=None,
            help="the cluster's name (default: the one Slurm reports; Kubernetes: kubernetes)",
        )
        each.add_argument(
            "--time",
            default=None,
            help="the snapshot's time, RFC 3339 (default: squeue's last_update, else now)",
        )
        each.add_argument(
            "--since",
            default=None,
            help="only observations at or after this RFC 3339 time (e.g. the previous "
            "collection's), so a collector run every minute does not resend a job's history",
        )
        each.add_argument("--out", default=None, help="write the JSON here (default: stdout)")
        each.add_argument(
            "--post",
            default=None,
            help="send to a decision service instead, e.g. http://127.0.0.1:8790",
        )
        each.add_argument(
            "--token",
            default=None,
            help="the service's token, if it has one (default: $SCHEDLAB_SHADOW_TOKEN, which "
            "keeps it out of the process list)",
        )
        each.set_defaults(func=cmd_collect)

    report = command("report", cmd_report, help="write the HTML report")
    report.add_argument(
        "--out", default=None, help="file to write (default: reports/ beside the warehouse)"
    )

    serve = command("serve", cmd_serve, help="serve the nightly run on a cron")
    serve.add_argument("--cron", default="0 2 * * *", help="cron schedule (default 02:00 daily)")
    serve.add_argument("--name", default="schedlab-nightly", help="deployment name")
    serve.add_argument("--seed", type=int, default=0)
    serve.add_argument("--incoming", default=None, help="folder of production traces")
    serve.add_argument(
        "--shadow-spool", default=None, help="shadow spool (default: beside the warehouse)"
    )

    shadow = command(
        "serve-policy",
        cmd_serve_policy,
        help="answer a live cluster's snapshots with a policy's decisions (shadow mode)",
        description="Shadow mode (docs/shadow.md): HTTP decisions, Kubernetes extender "
        "calls and observations, each logged to the spool before it is answered. It never "
        "acts on the cluster.",
    )
    shadow.add_argument(
        "--policy",
        default="fifo",
        help="heuristic (fifo, drf, optimus-events, srtf, ...), learned family (dl2, "
        "harmony, chic, ...: its newest registered policy) or a policy id (default fifo)",
    )
    shadow.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    shadow.add_argument("--port", type=int, default=8790, help="port (default 8790)")
    shadow.add_argument(
        "--spool",
        default=None,
        help="spool directory (default: shadow-spool/ beside the warehouse)",
    )
    shadow.add_argument(
        "--token",
        default=None,
        help="bearer token required on every endpoint but /healthz (or $SCHEDLAB_SHADOW_TOKEN)",
    )
    shadow.add_argument(
        "--max-body-bytes", type=int, default=8 * 2**20, help="largest request body (default 8 MiB)"
    )
    shadow.add_argument(
        "--cluster",
        default="kubernetes",
        help="cluster name the extender's decisions are logged under",
    )
    shadow.add_argument("--seed", type=int, default=0, help="placement tie-break seed (default 0)")
    shadow.add_argument(
        "--workers",
        type=int,
        default=1,
        help="processes answering requests, sharing the port, the spool and the metrics "
        "(default 1; one per core for throughput)",
    )
    return parser


# OS errors that mean the environment refuses the work (a full disk, a read-only file
# system, no permission): the user fixes them, retrying does not; exit as bad input.
_ENVIRONMENT_ERRNOS = {
    errno.ENOSPC,
    errno.EDQUOT,
    errno.EFBIG,
    errno.EROFS,
    errno.EACCES,
    errno.EPERM,
    errno.EISDIR,
    errno.ENOTDIR,
}


def main(argv: list[str] | None = None, registry: Registry | None = None) -> int:
    import duckdb

    from pipelines.api import ApiUnavailable
    from pipelines.sources import UnknownSource
    from tracelib.ingest import IngestError
    from warehouse import (
        ContractViolation,
        MigrationError,
        QueryRefused,
        WarehouseBusy,
        WarehouseUnusable,
    )

    args = build_parser(registry).parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        # Ctrl-C: whatever was writing rolled back with its transaction; no traceback.
        print("\ninterrupted", file=sys.stderr)
        return 128 + 2
    except BrokenPipeError:
        # The reader of our output went away (`schedlab sql ... | head`): not an error. Point
        # stdout at /dev/null so the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (IngestError, QueryRefused, WarehouseUnusable, UnknownSource, ApiUnavailable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except WarehouseBusy as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BUSY
    except FileExistsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (ContractViolation, MigrationError, ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except OSError as exc:
        if exc.errno not in _ENVIRONMENT_ERRNOS:
            raise
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"error: cannot write or read {where}{exc.strerror or exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except duckdb.Error as exc:
        # A stage's query failed for a reason of its own: report it, no traceback.
        print(f"error: {_first_line(exc)}", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
