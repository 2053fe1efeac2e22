"""The run report: one self-contained HTML file from what the warehouse holds.

Written at the end of every `schedlab run` (`reports/report-<run id>.html` and
`reports/latest.html` beside the warehouse) and on demand by `schedlab report`. It reads
only the SQL surface users query themselves (`leaderboard`, `policy_lineage`, the curve and
metric tables), so the report and an analyst's SQL never disagree. Sections whose tables
are empty (a run without training, a system not yet run) say so instead of disappearing.

Plots are matplotlib PNGs embedded as base64 data URIs: the file can be mailed or archived
on its own.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import jinja2
import numpy as np
import polars as pl

from models.evaluation import jct_cdf_figure
from pipelines.sections import Figure, Plots, Section, Table, exists, fmt, frame_table
from pipelines.system import LearnedSystem
from tracelib.provenance import code_version
from warehouse import connect, files_dir, read_frame, resolve_path

# -- sections --------------------------------------------------------------------------------


def leaderboard_section(con: duckdb.DuckDBPyConnection, plots: Plots | None = None) -> Section:
    """Each workload set's newest evaluation, ranked: every family side by side, each
    scheduler's ratio to the set's best non-oracle heuristic and whether it is significant."""
    board = read_frame(
        con,
        "SELECT kind AS workload_kind, workload_set, rank, scheduler, family, "
        "avg_jct_s / 3600 AS avg_jct_h, avg_jct_ci_low / 3600 AS ci_low_h, "
        "avg_jct_ci_high / 3600 AS ci_high_h, mean_slowdown, best_heuristic, "
        "best_heuristic_chosen_on AS chosen_on, "
        "ratio_to_best_heuristic AS ratio_to_best, ratio_ci_low, ratio_ci_high, "
        "CASE WHEN significantly_better THEN 'better' WHEN significantly_worse THEN 'worse' "
        "WHEN ratio_ci_low IS NULL THEN 'no interval' ELSE 'not significant' END "
        "AS significance, teacher, ratio_to_teacher, teacher_ci_low, teacher_ci_high, "
        "CASE WHEN better_than_teacher THEN 'better' WHEN teacher_ci_low > 1 THEN 'worse' "
        "WHEN ratio_to_teacher IS NOT NULL THEN 'not shown better' END AS vs_teacher, "
        "n_runs, CASE WHEN smaller_than_largest THEN largest_n_runs || "
        "' runs in ' || largest_eval_id END AS larger_evaluation, eval_id "
        "FROM leaderboard WHERE latest "
        "ORDER BY workload_kind DESC, workload_set, rank, scheduler",
    )
    section = Section(
        "Leaderboard",
        "Every scheduler family on each workload set's held-out sequences: average job "
        "completion time (95% confidence interval over sequences x seeds; RL-TAPS rows: mean "
        "slowdown) and the ratio to the set's best heuristic (never an oracle), paired by "
        "sequence and seed (RL-TAPS rows: of mean slowdown). The best heuristic is the "
        "baseline with the lowest mean on the set's validation sequences (`chosen_on`), run "
        "apart from the test sequences the ratios are taken on; `test` where a set has none "
        "(a choice that favours the heuristic). `significance` says whether "
        "the ratio's 95% interval excludes 1. A learned policy's `teacher` is what it "
        "imitated or searched with, run as a baseline in the same evaluation (DL2's searched "
        "table `dl2-table`), and `ratio_to_teacher` says what the learning adds over it "
        "(`vs_teacher`: 'not shown better' when the interval includes 1). Paper scenarios "
        "(kind `paper`) are each "
        "system's own evaluation. `n_runs` is each row's sample size; where an older "
        "evaluation of the same set and scheduler had more runs, `larger_evaluation` names "
        "it (`schedlab sql \"SELECT * FROM leaderboard WHERE eval_id = '...'\"`). "
        'Query it yourself: `schedlab sql "SELECT * FROM leaderboard WHERE latest"`.',
        empty="No evaluation has been stored yet.",
    )
    plots = plots or Plots()
    for (kind, workload_set), rows in board.group_by(
        "workload_kind", "workload_set", maintain_order=True
    ):
        # Columns an evaluation does not fill (e.g. no interval with a single run).
        shown = rows.drop([c for c in rows.columns if rows[c].null_count() == rows.height])
        section.tables.append(
            frame_table(f"{workload_set} ({kind})", shown.drop("workload_kind", "workload_set"))
        )
        if rows["avg_jct_h"].null_count() < rows.height:
            shown_rows = rows.drop_nulls("avg_jct_h")
            drawn = plots.png(_bar_figure, shown_rows, workload_set)
            section.figures.append(Figure(f"Average JCT: {workload_set}", drawn))
    return section


def _bar_figure(rows: pl.DataFrame, workload_set: str):
    from matplotlib.figure import Figure as MplFigure

    fig = MplFigure(figsize=(7, 0.35 * rows.height + 1.2), dpi=100)
    ax = fig.add_subplot()
    names = rows["scheduler"].to_list()[::-1]
    mean = rows["avg_jct_h"].to_numpy()[::-1]
    low = rows["ci_low_h"].fill_null(strategy="zero").to_numpy()[::-1]
    high = rows["ci_high_h"].fill_null(strategy="zero").to_numpy()[::-1]
    has_ci = (low > 0) & (high > 0)
    err = np.where(has_ci, np.vstack([mean - low, high - mean]), 0.0)
    ax.barh(names, mean, xerr=err, color="#4878a8", ecolor="#333333")
    ax.set_xlabel("average JCT (hours)")
    ax.set_title(workload_set)
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def cdf_section(con: duckdb.DuckDBPyConnection, plots: Plots | None = None) -> Section:
    """JCT CDFs of each workload set's newest evaluation."""
    section = Section(
        "JCT distributions",
        "Empirical CDF of job completion time over every job of every run of the newest "
        "evaluation of each workload set.",
        empty="No evaluation has been stored yet.",
    )
    latest = read_frame(
        con, "SELECT DISTINCT workload_set, eval_id FROM leaderboard WHERE latest ORDER BY ALL"
    )
    for workload_set, eval_id in latest.iter_rows():
        jobs = read_frame(
            con,
            "SELECT r.scheduler, j.jct_s FROM eval_jobs j JOIN eval_runs r USING (run_id) "
            "WHERE r.eval_id = ? AND r.workload_set = ?",
            [eval_id, workload_set],
        )
        if jobs.height == 0:  # a paper scenario's own evaluation keeps no per-job rows
            continue
        order = read_frame(
            con,
            "SELECT scheduler FROM leaderboard WHERE eval_id = ? AND workload_set = ? "
            "ORDER BY rank, scheduler",
            [eval_id, workload_set],
        )["scheduler"].to_list()
        title = f"JCT CDF: {workload_set} ({eval_id})"
        drawn = (plots or Plots()).png(jct_cdf_figure, jobs, order, title)
        section.figures.append(Figure(f"JCT CDF: {workload_set}", drawn))
    return section


def replay_headline_section(con: duckdb.DuckDBPyConnection, plots: Plots | None = None) -> Section:
    """One sentence per replayed trace (`pipelines.replay.headline`), from the newest replay
    at the rule's own cluster size."""
    section = Section(
        "Replayed traces",
        "Each replayed trace in one sentence: its jobs, the cluster it was replayed on and the "
        "load, the best heuristic that needs no run-time estimate with its ratio to FIFO, "
        "the best of each learned family against both, and what the rules that read the "
        "recorded run times reach. Intervals: a paired block bootstrap over the trace's days "
        "(docs/traces.md).",
        empty="No trace has been replayed (`schedlab replay SOURCE`).",
    )
    summary = read_frame(
        con,
        "WITH newest AS (SELECT workload_set, arg_max(eval_id, evaluated_at) AS eval_id "
        "FROM eval_summary WHERE workload_set LIKE 'replay:%' AND "
        "coalesce(json_extract(config, '$.capacity')::DOUBLE, 1.0) = 1.0 GROUP BY ALL) "
        "SELECT s.* FROM eval_summary s JOIN newest USING (workload_set, eval_id) "
        "ORDER BY s.workload_set",
    )
    if summary.height == 0:
        return section
    from pipelines.replay import headline

    rows = [
        [
            str(workload_set),
            headline(
                str(workload_set).removeprefix("replay:"), part, json.loads(part["config"][0])
            ),
        ]
        for (workload_set,), part in summary.group_by("workload_set", maintain_order=True)
    ]
    section.tables.append(Table("per trace", ["workload set", "headline"], rows))
    return section


def replay_capacity_section(con: duckdb.DuckDBPyConnection, plots: Plots | None = None) -> Section:
    """Each replayed source's what-if: the newest replay of every scheduler at every cluster
    size stored (`schedlab replay --capacity`), average JCT and mean queueing delay per
    size; the rules in the replay's simulator, the learned families and the heuristics
    beside them in the arena's (`replay-arena:` sets), each its own table and plot."""
    section = Section(
        "Replay capacity what-if",
        "Whole-trace replays (`schedlab replay SOURCE --capacity 0.5,0.75,1,1.25`) at several "
        "cluster sizes: each scheduler's average JCT and mean queueing delay (first start - "
        "submit), newest replay per scheduler and size. Capacity 1 is the size the replay's "
        "rule gave (docs/traces.md); the sizes are read from each evaluation's `config`. "
        "The rules run in the replay's simulator (`replay:` sets); learned families asked "
        "for with `--scheduler` run in the arena's simulator beside its heuristics "
        "(`replay-arena:` sets).",
        empty="No source has been replayed at more than one cluster size.",
    )
    # A replay's run config holds its cluster and capacity; an arena replay's evaluation
    # config holds its cluster (a node list's as server groups) and its what-if capacity.
    arena_gpus = (
        "coalesce(list_sum(list_transform(json_extract(s.config, '$.cluster.groups[*]'), "
        "lambda g: json_extract(g, '$.n_servers')::DOUBLE * json_extract(g, '$.gpus')::DOUBLE)), "
        "json_extract(s.config, '$.cluster.n_servers')::DOUBLE "
        "* json_extract(s.config, '$.cluster.gpus')::DOUBLE)"
    )
    rows = read_frame(
        con,
        "WITH runs AS (SELECT r.workload_set, r.scheduler, r.eval_id, r.run_id, "
        "json_extract(r.config, '$.cluster.n_servers')::INTEGER AS servers, "
        "servers * json_extract(r.config, '$.cluster.gpus_per_server')::DOUBLE AS gpus, "
        "json_extract(r.config, '$.capacity')::DOUBLE AS capacity, r.avg_jct_s, "
        "r.mean_slowdown, r.utilization, s.evaluated_at FROM eval_runs r "
        "JOIN eval_summary s ON s.eval_id = r.eval_id AND s.scheduler = r.scheduler "
        "WHERE r.workload_set LIKE 'replay:%' "
        "UNION ALL BY NAME SELECT r.workload_set, r.scheduler, r.eval_id, r.run_id, "
        "json_extract(s.config, '$.cluster.n_servers')::INTEGER AS servers, "
        f"{arena_gpus} AS gpus, "
        "json_extract(s.config, '$.capacity')::DOUBLE AS capacity, r.avg_jct_s, "
        "r.mean_slowdown, r.utilization, s.evaluated_at FROM eval_runs r "
        "JOIN eval_summary s ON s.eval_id = r.eval_id AND s.scheduler = r.scheduler "
        "WHERE r.workload_set LIKE 'replay-arena:%' "
        "AND json_extract(s.config, '$.capacity') IS NOT NULL), "
        "newest AS (SELECT * FROM runs QUALIFY row_number() OVER (PARTITION BY workload_set, "
        "servers, scheduler ORDER BY evaluated_at DESC, eval_id) = 1) "
        "SELECT n.workload_set, n.scheduler, n.capacity, n.servers, n.gpus, "
        "n.avg_jct_s / 3600 AS avg_jct_h, "
        "avg(j.start_s - j.arrival_s) / 3600 AS queueing_h, n.mean_slowdown, n.utilization "
        "FROM newest n JOIN eval_jobs j ON j.run_id = n.run_id "
        "GROUP BY ALL ORDER BY n.workload_set, n.servers, n.scheduler",
    )
    plots = plots or Plots()
    for (workload_set,), part in rows.group_by("workload_set", maintain_order=True):
        if part["servers"].n_unique() < 2:
            continue
        section.tables.append(frame_table(str(workload_set), part.drop("workload_set")))
        # Drawn by the same function `schedlab replay --capacity` writes its PNG with.
        from pipelines.replay import capacity_figure

        drawn = plots.png(capacity_figure, part, f"{workload_set}: capacity what-if")
        section.figures.append(Figure(f"Capacity what-if: {workload_set}", drawn))
    return section


def learning_section(con: duckdb.DuckDBPyConnection, plots: Plots | None = None) -> Section:
    """Each learned system's newest policy: its training curve."""
    section = Section(
        "Learning curves",
        "The newest registered policy of each learned system: validation metric against "
        "training progress (the best checkpoint is the one kept).",
        empty="No learned policy has been trained yet.",
    )
    if not exists(con, "learning_curves"):
        return section
    curves = read_frame(
        con,
        # Per system and phase (DL2's warm-up and fine-tuning are different policies).
        "WITH newest AS (SELECT c.system, c.phase, arg_max(c.policy_id, p.created_at) "
        "AS policy_id FROM learning_curves c JOIN policies p USING (policy_id) GROUP BY ALL) "
        "SELECT c.system, c.policy_id, c.phase, c.step, c.metric, c.value "
        "FROM learning_curves c JOIN newest n USING (system, phase, policy_id) "
        "WHERE c.value IS NOT NULL ORDER BY ALL",
    )
    plots = plots or Plots()
    for (system, policy_id, phase), rows in curves.group_by(
        "system", "policy_id", "phase", maintain_order=True
    ):
        title = f"{system} ({phase}): {policy_id}"
        drawn = plots.png(_curve_figure, rows, title)
        section.figures.append(Figure(f"{system} {phase}", drawn))
    return section


def _curve_figure(rows: pl.DataFrame, title: str):
    """One panel per metric of one policy's learning curve."""
    from matplotlib.figure import Figure as MplFigure

    metrics = sorted(set(rows["metric"].to_list()))
    fig = MplFigure(figsize=(7, 2.2 * len(metrics) + 0.6), dpi=100)
    for k, metric in enumerate(metrics, start=1):
        ax = fig.add_subplot(len(metrics), 1, k)
        one = rows.filter(pl.col("metric") == metric).sort("step")
        ax.plot(one["step"].to_numpy(), one["value"].to_numpy(), marker=".", lw=1)
        ax.set_ylabel(metric, fontsize="small")
        ax.grid(True, alpha=0.3)
    fig.axes[-1].set_xlabel("step")
    fig.suptitle(title, fontsize="medium")
    fig.tight_layout()
    return fig


def fidelity_section(con: duckdb.DuckDBPyConnection, plots: Plots | None = None) -> Section:
    """The newest fidelity checks of the simulator's ground truth."""
    section = Section(
        "Simulator fidelity",
        "The simulator's ground truth against measurements and published figures "
        "(models/fidelity.py): each figure must lie in [low, high]. A failed check means "
        "the simulator no longer reproduces what was measured; read its results with care.",
        empty="No fidelity check has been run yet.",
    )
    if exists(con, "fidelity_checks"):
        checks = read_frame(
            con,
            "SELECT check_name, measured, low, high, passed, source, code_version "
            "FROM fidelity_checks WHERE created_at = (SELECT max(created_at) "
            "FROM fidelity_checks) ORDER BY passed, check_name",
        )
        if checks.height:
            failed = checks.filter(~pl.col("passed")).height
            title = f"{checks.height - failed} of {checks.height} checks pass"
            section.tables.append(frame_table(title, checks))
    return section


def traces_section(con: duckdb.DuckDBPyConnection, plots: Plots | None = None) -> list[Section]:
    """What each ingested trace is (`schedlab describe SOURCE_ID` prints the same): an
    overview row per source, then one section per source with its tables and plots."""
    from pipelines.describe import describe_from, trace_figure
    from pipelines.sources import source_ids
    from tracelib.describe import human_duration, left_out_note

    section = Section(
        "Traces",
        "Each ingested trace at a glance: size and span, arrivals per hour, durations, GPU "
        "demand, how jobs ended, who submitted them, the peak GPU demand running at once, "
        "what was quarantined and why, and how many jobs workload derivation can use. "
        "`schedlab describe SOURCE_ID` prints the same.",
        empty="No trace has been ingested yet.",
    )
    sections = [section]
    overview = []
    for source_id in source_ids(con):
        d = describe_from(con, source_id)
        q = d.duration_quantiles
        overview.append(
            [
                source_id,
                f"{d.n_jobs:,}",
                human_duration(d.span.total_seconds()) if d.span is not None else "",
                f"{d.peak_gpus:,.0f}",
                f"{d.n_quarantined:,}",
                f"{d.derivable_jobs / max(d.n_jobs, 1):.0%}",
            ]
        )
        one = Section(f"Trace {source_id}")
        sections.append(one)
        facts = [
            ["jobs", f"{d.n_jobs:,}"],
            [
                "submitted",
                f"{d.first_submit:%Y-%m-%d %H:%M} .. {d.last_submit:%Y-%m-%d %H:%M} "
                f"({human_duration(d.span.total_seconds())})"
                if d.span is not None
                else "",
            ],
            [
                "arrivals per hour",
                f"mean {d.arrivals_per_hour['jobs'].mean():.1f}, "
                f"max {d.arrivals_per_hour['jobs'].max()}"
                if d.arrivals_per_hour.height
                else "",
            ],
            [
                "duration",
                f"median {human_duration(q['p50'])}, p90 {human_duration(q['p90'])}, "
                f"max {human_duration(q['max'])}"
                if q
                else "none recorded",
            ],
            ["GPU-hours", f"{d.total_gpu_hours:,.0f}"],
            [
                "peak concurrent GPUs",
                f"{d.peak_gpus:,.0f}"
                + (f" at {d.peak_at:%Y-%m-%d %H:%M}" if d.peak_at is not None else ""),
            ],
            [
                "status",
                ", ".join(f"{s} {n:,} ({f:.0%})" for s, n, f in d.status_mix.iter_rows()),
            ],
            ["users", f"{d.n_users:,}"],
            ["virtual clusters", f"{d.n_vcs:,}"],
            ["quarantined records", f"{d.n_quarantined:,}"],
            [
                "usable for workloads",
                f"{d.derivable_jobs:,} ({d.derivable_jobs / max(d.n_jobs, 1):.0%}): a final "
                "status and a duration of at least 1 s",
            ],
        ]
        if d.n_unreadable:
            facts.append(["left out", left_out_note(d.n_unreadable)])
        one.tables.append(Table("summary", ["", "value"], facts))
        drawn = (plots or Plots()).png(trace_figure, d)
        one.figures.append(Figure(f"{source_id}", drawn))
        if d.top_users.height or d.top_vcs.height:
            who = [
                [kind, name, f"{jobs:,}", f"{gpu_h:,.0f}"]
                for kind, frame in (("user", d.top_users), ("vc", d.top_vcs))
                for name, jobs, gpu_h in frame.head(5).iter_rows()
            ]
            one.tables.append(Table("most jobs", ["who", "name", "jobs", "GPU-hours"], who))
        if d.quarantine_reasons.height:
            one.tables.append(frame_table("quarantined, by reason", d.quarantine_reasons))
    if overview:
        columns = ["source", "jobs", "span", "peak GPUs", "quarantined", "usable"]
        section.tables.append(Table("every source", columns, overview))
    return sections


def shadow_section(con: duckdb.DuckDBPyConnection, plots: Plots | None = None) -> Section:
    """Shadow mode: per shadow day, how often the shadowed policy agreed with the real
    scheduler, and its counterfactual replay beside what really happened."""
    section = Section(
        "Shadow mode",
        "A policy answered the live cluster's snapshots without acting on them "
        "(docs/shadow.md). Per shadow day (source `shadow:<cluster>:<date>`): over the jobs "
        "pending at each decision, the share on which the policy and the real scheduler did "
        "the same (both started the job at that snapshot, or both held it), the jobs the "
        "policy would have started that the real scheduler held and the converse, and how "
        "often both put a job on the same servers. Then the day's jobs replayed under the "
        "shadowed policy on the cluster its snapshots saw, beside what really happened: "
        "mean JCT over the jobs that ended within the day, mean queueing delay over those "
        'that started. `schedlab sql "SELECT * FROM shadow_agreement"` and '
        "`shadow_decisions` hold every row.",
        empty="No shadow day has been ingested (the spool's closed days are read by "
        "`schedlab run`).",
    )
    if not exists(con, "shadow_agreement"):
        return section
    agreement = read_frame(
        con,
        "SELECT source_id, policy, decisions, pending_rows, agreement, "
        "policy_started_real_held, real_started_policy_held, both_started, "
        "same_servers_rate, median_latency_ms FROM shadow_agreement ORDER BY source_id, policy",
    )
    if agreement.height == 0:
        return section
    section.tables.append(frame_table("agreement per day", agreement))
    from pipelines.shadow_replay import compare

    rows = []
    for source_id in agreement["source_id"].unique(maintain_order=True).to_list():
        found = compare(con, source_id)
        if found.height:
            rows.append(found.insert_column(0, pl.lit(source_id).alias("source_id")))
    if rows:
        section.tables.append(
            frame_table(
                "counterfactual replay beside what happened",
                pl.concat(rows, how="vertical_relaxed"),
                "Hours. `observed_*`: the real scheduler, from the day's observations; "
                "`replayed_*`: the same jobs replayed under the shadowed policy "
                "(workload set `replay:<source>` for a replay rule, `replay-arena:<source>` "
                "for a learned family).",
            )
        )
    return section


def lineage_section(con: duckdb.DuckDBPyConnection, plots: Plots | None = None) -> Section:
    section = Section(
        "Policies",
        "Registered policies, newest first, with their lineage (generation 0 was trained "
        "from scratch or from a heuristic's decisions; each retraining adds a generation).",
        empty="No policy is registered.",
    )
    lineage = read_frame(
        con,
        "SELECT policy_id, system, generation, parent_policy_id, created_at "
        "FROM policy_lineage ORDER BY created_at DESC, policy_id LIMIT 40",
    )
    if lineage.height:
        section.tables.append(frame_table("policy_lineage", lineage))
    return section


SECTIONS_BEFORE_SYSTEMS = (
    replay_headline_section,
    fidelity_section,
    traces_section,
    leaderboard_section,
    cdf_section,
    replay_capacity_section,
    learning_section,
    shadow_section,
)
SECTIONS_AFTER_SYSTEMS = (lineage_section,)
"""The report's own sections; each learned system's (its `report`) stand between them."""


# -- rendering ---------------------------------------------------------------------------------

_TEMPLATE = jinja2.Environment(autoescape=True).from_string(
    """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{ title }}</title>
<style>
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em;
        display: block; max-width: 100%; overflow-x: auto; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th { background: #f0f0f0; } td:first-child, th:first-child { text-align: left; }
figure { margin: 1em 0; } img { max-width: 100%; }
.meta { color: #666; font-size: 0.9em; } .empty { color: #888; font-style: italic; }
</style></head><body>
<h1>{{ title }}</h1>
<p class="meta">{% for k, v in meta %}<b>{{ k }}</b>: {{ v }}{% if not loop.last %} &middot;
{% endif %}{% endfor %}</p>
<nav><ol>{% for s in sections %}<li><a href="#s{{ loop.index }}">{{ s.title }}</a></li>
{% endfor %}</ol></nav>
{% for s in sections %}
<h2 id="s{{ loop.index }}">{{ s.title }}</h2>
{% if s.intro %}<p>{{ s.intro }}</p>{% endif %}
{% if not s.tables and not s.figures %}<p class="empty">{{ s.empty }}</p>{% endif %}
{% for t in s.tables %}
<h3>{{ t.title }}</h3>
<table><tr>{% for c in t.columns %}<th>{{ c }}</th>{% endfor %}</tr>
{% for row in t.rows %}<tr>{% for v in row %}<td>{{ v }}</td>{% endfor %}</tr>
{% endfor %}</table>
{% if t.caption %}<p>{{ t.caption }}</p>{% endif %}
{% endfor %}
{% for f in s.figures %}
<figure><img alt="{{ f.title }}" src="data:image/png;base64,{{ f.png_base64 }}">
{% if f.caption %}<figcaption>{{ f.caption }}</figcaption>{% endif %}</figure>
{% endfor %}
{% endfor %}
</body></html>
"""
)


def render_report(
    con: duckdb.DuckDBPyConnection,
    meta: dict[str, Any] | None = None,
    systems: Iterable[LearnedSystem] = (),
    plots: Plots | None = None,
) -> str:
    """The report's HTML from the warehouse behind `con`, with the sections of `systems`;
    figures through `plots` (default: every one drawn)."""
    plots = plots or Plots()
    sections = []
    for build in SECTIONS_BEFORE_SYSTEMS:
        built = build(con, plots)
        sections.extend(built if isinstance(built, list) else [built])
    for system in systems:
        sections.extend(system.steps().report(con))
    for build in SECTIONS_AFTER_SYSTEMS:
        sections.append(build(con, plots))
    pairs = [(k, fmt(v)) for k, v in (meta or {}).items()]
    return _TEMPLATE.render(title="schedlab report", meta=pairs, sections=sections)


def reports_dir(warehouse: str | Path | None) -> Path:
    """Where reports go: `reports/<warehouse stem>/` beside the warehouse
    (./var/reports/schedlab/ by default)."""
    return files_dir(warehouse, "reports")


def write_report(
    warehouse: str | Path | None,
    run_id: str | None = None,
    out: str | Path | None = None,
    systems: Iterable[LearnedSystem] | None = None,
) -> Path:
    """Write the report (to `out`, or `reports/report-<run_id>.html` plus `latest.html`)
    with the sections of `systems` (default: every registered system); returns the path
    written."""
    if systems is None:
        # Here, not at module import: the registry imports every system (and torch).
        from pipelines.registry import SYSTEMS

        systems = SYSTEMS
    meta: dict[str, Any] = {
        "warehouse": str(resolve_path(warehouse)),
        "generated": datetime.now(UTC).replace(tzinfo=None),
        "code version": code_version(),
    }
    if run_id:
        meta = {"run": run_id, **meta}
    folder = reports_dir(warehouse)
    # Figures whose data did not change since an earlier report are read back, not drawn.
    plots = Plots(folder / "plots")
    with connect(warehouse, read_only=True) as con:
        html = render_report(con, meta, systems, plots)
    plots.prune()
    if out is not None:
        target = Path(out)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(html)
        return target
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"report-{run_id or 'adhoc'}.html"
    target.write_text(html)
    (folder / "latest.html").write_text(html)
    return target
