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


def _minor_labels(axis):
    """A log axis' minor tick labels: the values at 2 and 5 times a power of ten while the
    axis spans at most three decades (beyond that they would crowd), else none."""

    def label(value: float, _pos) -> str:
        lo, hi = axis.get_view_interval()
        if lo <= 0 or hi / lo > 1e3:
            return ""
        mantissa = value / 10 ** np.floor(np.log10(value))
        return f"{value:g}" if np.isclose(mantissa, 2) or np.isclose(mantissa, 5) else ""

    return label


def trace_figure(d: TraceDescription):
    """Four panels: arrivals per hour over the span, the duration CDF (log scale), the
    GPU-demand histogram and the GPUs held by running jobs over time."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    fig = Figure(figsize=(11, 6.4), dpi=100)
    axes = fig.subplots(2, 2)
    ax = axes[0][0]
    hours = d.arrivals_per_hour
    if hours.height:
        # Each hour's count is drawn up to the next hour's start, so the last hour needs an
        # end of its own; the axis is the span itself (with one hour of arrivals matplotlib
        # would otherwise pick a date range of years around a zero-width area).
        x = hours["hour"].to_numpy()  # (H,) datetime64
        y = hours["jobs"].to_numpy()  # (H,)
        end = x[-1] + np.timedelta64(1, "h")
        ax.fill_between(np.append(x, end), np.append(y, y[-1]), step="post", color="#4878a8")
        ax.set_xlim(x[0], end)
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
        # Plain numbers, minor ticks labelled at 2 and 5 only: matplotlib labels every minor
        # tick of a span under a decade, and its 4x10^-1 6x10^-1 ... overlap.
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(FuncFormatter(_minor_labels(ax.xaxis)))
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
