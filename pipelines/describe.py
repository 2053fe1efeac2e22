"""`schedlab describe SOURCE_ID` and the report's trace section: what a trace is.

`describe_source` reads one source's jobs and quarantined records from the warehouse and
summarizes them with `tracelib.describe.describe_trace`; `trace_figure` draws the summary
(arrivals per hour, duration CDF, GPU-demand histogram, GPUs held over time) as one
matplotlib figure (Agg canvas, no pyplot state).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pipelines.sources import require_source
from tracelib.describe import TraceDescription, describe_trace
from warehouse import connect, read_frame


def describe_from(con, source_id: str) -> TraceDescription:
    """The description of `source_id` from an open warehouse connection."""
    require_source(con, source_id)
    jobs = read_frame(con, "SELECT * FROM jobs WHERE source_id = ?", [source_id])
    quarantine = read_frame(
        con,
        "SELECT source_id, record_no, field, reason FROM quarantine WHERE source_id = ?",
        [source_id],
    )
    return describe_trace(jobs, quarantine, source_id)


def describe_source(warehouse: str | Path | None, source_id: str) -> TraceDescription:
    """The description of one ingested source (read-only)."""
    with connect(warehouse, read_only=True) as con:
        return describe_from(con, source_id)


def trace_figure(d: TraceDescription):
    """Four panels: arrivals per hour over the span, the duration CDF (log scale), the
    GPU-demand histogram and the GPUs held by running jobs over time."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 6.4), dpi=100)
    axes = fig.subplots(2, 2)
    ax = axes[0][0]
    hours = d.arrivals_per_hour
    if hours.height:
        ax.fill_between(
            hours["hour"].to_numpy(), hours["jobs"].to_numpy(), step="post", color="#4878a8"
        )
    ax.set_title("arrivals per hour")
    ax.set_ylabel("jobs submitted")
    ax.tick_params(axis="x", labelrotation=20, labelsize="small")
    ax.grid(True, alpha=0.3)

    ax = axes[0][1]
    cdf = d.duration_cdf
    if cdf.height:
        x = np.maximum(cdf["duration_s"].to_numpy() / 3600.0, 1e-4)
        ax.step(x, cdf["fraction"].to_numpy(), where="post", color="#4878a8")
        ax.set_xscale("log")
    ax.set_title(f"duration CDF ({d.jobs_with_duration:,} jobs)")
    ax.set_xlabel("duration (hours, log scale)")
    ax.set_ylabel("fraction of jobs")
    ax.set_ylim(0, 1.0)
    ax.grid(True, which="both", alpha=0.3)

    ax = axes[1][0]
    hist = d.gpu_histogram
    ax.bar(hist["gpus"].to_list(), hist["jobs"].to_numpy(), color="#4878a8")
    ax.set_title("GPU demand per job")
    ax.set_xlabel("GPUs requested")
    ax.set_ylabel("jobs")
    ax.grid(True, axis="y", alpha=0.3)

    ax = axes[1][1]
    held = d.concurrent_gpus
    if held.height:
        ax.step(held["time"].to_numpy(), held["gpus"].to_numpy(), where="post", color="#4878a8")
        ax.axhline(d.peak_gpus, color="#c44e52", lw=0.8, ls="--", label="peak")
    # The peak goes in the title (an annotation on the curve hides under it), short enough
    # for the panel; its time is in the summary table.
    ax.set_title(f"GPUs held by running jobs (peak {d.peak_gpus:,.0f})")
    ax.set_ylabel("GPUs")
    ax.tick_params(axis="x", labelrotation=20, labelsize="small")
    ax.grid(True, alpha=0.3)
    fig.suptitle(f"{d.source_id}: {d.n_jobs:,} jobs", fontsize="medium")
    fig.tight_layout()
    return fig
