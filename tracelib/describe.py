"""What a trace is, at a glance: `describe_trace(jobs, quarantine)` summarizes one source.

Pure (frames in, a `TraceDescription` out, no DuckDB, no plotting): `schedlab describe`
prints it (`describe_text`) and the report draws it (pipelines/describe.py). It answers
the questions an operator asks of a new trace before training on it: how many jobs over
what span, how they arrive hour by hour, how long they run, how many GPUs they ask for,
how they ended, who submitted them (users, virtual clusters), the peak GPU demand running
at once, what was quarantined and why, and how many jobs workload derivation can use.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np
import polars as pl

from tracelib.ingest.base import Bounds, bound_checks, printable

GPU_BINS = ((0, 0), (1, 1), (2, 2), (3, 4), (5, 8), (9, 16), (17, 32), (33, 64), (65, None))
"""GPU-demand histogram bins (inclusive bounds; None: no upper bound). Fractional GPUs
(a share of one GPU) fall in the bin of their ceiling."""

DERIVABLE_STATUSES = ("completed", "failed", "killed")
"""Statuses workload derivation keeps by default (tracelib.workloads.DeriveConfig)."""

_SPARK = " ▁▂▃▄▅▆▇█"

READABLE = Bounds(
    earliest=datetime(1970, 1, 1),
    latest=datetime(2262, 1, 1),
    num_gpus=10_000_000.0,
    num_cpus=1e9,
    mem_gb=1e10,
    num_workers=10_000_000,
    num_ps=10_000_000,
    epochs=1e9,
    duration_s=100 * 365 * 24 * 3600.0,
)
"""What a stored job may hold for `describe`, `replay` and `report` to use it: wider than
any ingest's bounds (`tracelib.ingest.base.Bounds`, which a mapping may widen), so only a
row no ingest accepts (one stored by a version without these checks, or written by hand)
is left out. Times beyond it do not convert to Python dates and would stretch a timeline over
centuries; a GPU count beyond it would size a replay cluster that no memory holds."""

MAX_DENSE_HOURS = 100_000
"""Arrivals are listed hour by hour, zeros included, over a span of at most this many
hours (11 years); over a longer one only the hours with arrivals are listed, so the
listing never has more rows than the source has jobs."""


def readable_jobs(jobs: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """The `jobs` rows within `READABLE` (for each column the frame has), and how many
    were left out."""
    fails = [c.fails.fill_null(False) for c in bound_checks(READABLE) if c.field in jobs.columns]
    if not fails or jobs.height == 0:
        return jobs, 0
    kept = jobs.filter(~pl.any_horizontal(fails))
    return kept, jobs.height - kept.height


def left_out_note(n: int) -> str:
    """What a command says about stored rows `readable_jobs` left out."""
    return (
        f"{n:,} stored job(s) hold impossible values (a time outside "
        f"{READABLE.earliest:%Y}-{READABLE.latest:%Y}, or a quantity that is not finite, "
        "subnormal or beyond any job's size) and are left out; ingest the source again "
        "to quarantine them with the reason"
    )


@dataclass(frozen=True)
class TraceDescription:
    """One source's summary (see the module docstring). Frames are small: at most one row
    per hour of the span, per GPU bin, per status, per top user/VC, per quarantine reason."""

    source_id: str
    n_jobs: int
    first_submit: datetime | None
    last_submit: datetime | None
    arrivals_per_hour: pl.DataFrame
    """hour (datetime), jobs: every hour of the span, zeros included (over a span of more
    than `MAX_DENSE_HOURS`, only the hours with arrivals)."""
    duration_quantiles: dict[str, float]
    """p10, p50, p90, p99, max and mean of duration_s (seconds) over jobs that have one."""
    duration_cdf: pl.DataFrame
    """duration_s, fraction: the empirical CDF (at most 200 points)."""
    jobs_with_duration: int
    gpu_histogram: pl.DataFrame
    """gpus (bin label), jobs, gpu_share (fraction of requested GPUs in the bin)."""
    total_gpu_hours: float
    status_mix: pl.DataFrame
    """status, jobs, fraction."""
    n_users: int
    top_users: pl.DataFrame
    """user_name, jobs, gpu_hours (top 10 by jobs)."""
    n_vcs: int
    top_vcs: pl.DataFrame
    """vc, jobs, gpu_hours (top 10 by jobs)."""
    peak_gpus: float
    """Most GPUs held at once by running jobs (start to end; submit + duration when the
    trace has no start time)."""
    peak_at: datetime | None
    concurrent_gpus: pl.DataFrame
    """time, gpus: GPUs held after each start or end; past 2,000 events, the most held
    within each of 2,000 equal time buckets."""
    n_quarantined: int
    quarantine_reasons: pl.DataFrame
    """field, reason, records, first_record (top 10 by records)."""
    derivable_jobs: int
    """Jobs workload derivation keeps by default (a final status and a duration >= 1 s)."""
    n_unreadable: int = 0
    """Stored jobs left out for impossible values (`readable_jobs`)."""

    @property
    def span(self) -> timedelta | None:
        if self.first_submit is None or self.last_submit is None:
            return None
        return self.last_submit - self.first_submit


def _hours(jobs: pl.DataFrame) -> pl.DataFrame:
    if jobs.height == 0:
        return pl.DataFrame(schema={"hour": pl.Datetime("us"), "jobs": pl.UInt32})
    counts = jobs.group_by(pl.col("submit_time").dt.truncate("1h").alias("hour")).agg(
        pl.len().alias("jobs")
    )
    first, last = counts["hour"].min(), counts["hour"].max()
    if (last - first) > timedelta(hours=MAX_DENSE_HOURS):
        return counts.with_columns(pl.col("jobs").cast(pl.UInt32)).sort("hour")
    every = pl.DataFrame({"hour": pl.datetime_range(first, last, "1h", eager=True, time_unit="us")})
    return (
        every.join(counts, on="hour", how="left")
        .with_columns(pl.col("jobs").fill_null(0).cast(pl.UInt32))
        .sort("hour")
    )


def _cdf(values: np.ndarray, points: int = 200) -> pl.DataFrame:
    if values.size == 0:
        return pl.DataFrame(schema={"duration_s": pl.Float64, "fraction": pl.Float64})
    x = np.sort(values)
    frac = np.arange(1, x.size + 1) / x.size
    if x.size > points:
        idx = np.unique(np.linspace(0, x.size - 1, points).round().astype(int))
        x, frac = x[idx], frac[idx]
    return pl.DataFrame({"duration_s": x.astype(float), "fraction": frac})


def _gpu_bins(gpus: np.ndarray) -> pl.DataFrame:
    need = np.ceil(gpus)
    labels, counts, shares = [], [], []
    total = float(gpus.sum()) or 1.0
    for low, high in GPU_BINS:
        sel = (need >= low) & ((need <= high) if high is not None else True)
        labels.append(
            f"{low}" if low == high else (f"{low}-{high}" if high is not None else f">={low}")
        )
        counts.append(int(sel.sum()))
        shares.append(float(gpus[sel].sum()) / total)
    return pl.DataFrame({"gpus": labels, "jobs": counts, "gpu_share": shares})


def _intervals(jobs: pl.DataFrame) -> pl.DataFrame:
    """start, end, gpus of every job that ran (start or submit; end or start + duration)."""
    start = pl.coalesce("start_time", "submit_time")
    end = pl.coalesce(
        "end_time", start + pl.duration(microseconds=(pl.col("duration_s") * 1e6).cast(pl.Int64))
    )
    return jobs.select(start.alias("start"), end.alias("end"), "num_gpus").filter(
        pl.col("end").is_not_null() & (pl.col("end") > pl.col("start"))
    )


def peak_gpu_demand(jobs: pl.DataFrame) -> float:
    """Most GPUs the jobs held at once over their recorded run intervals (start or submit to
    end or start + duration), as `schedlab describe` reports it."""
    return _concurrency(_intervals(jobs))[0]


def _concurrency(
    runs: pl.DataFrame, points: int = 2000
) -> tuple[float, datetime | None, pl.DataFrame]:
    if runs.height == 0:
        return 0.0, None, pl.DataFrame(schema={"time": pl.Datetime("us"), "gpus": pl.Float64})
    # Ends sort before starts at the same instant: a job ending as another starts does not
    # count twice.
    events = pl.concat(
        [
            runs.select(
                pl.col("start").alias("time"),
                pl.col("num_gpus").alias("delta"),
                pl.lit(1).alias("o"),
            ),
            runs.select(
                pl.col("end").alias("time"),
                (-pl.col("num_gpus")).alias("delta"),
                pl.lit(0).alias("o"),
            ),
        ]
    ).sort("time", "o")
    held = events.select("time", pl.col("delta").cum_sum().alias("gpus"))
    peak_row = held["gpus"].arg_max()
    peak = float(held["gpus"][peak_row]) if peak_row is not None else 0.0
    at = held["time"][peak_row] if peak_row is not None else None
    if held.height > points:
        # The most held within each of `points` equal time buckets: every peak stays, and
        # a sparse stretch (the tail after the last submission) keeps its every event
        # (thinning by row count drew it as one long flat step).
        t = held["time"].to_numpy().astype("datetime64[us]").astype(np.int64)
        g = held["gpus"].to_numpy()
        edges = np.linspace(t[0], t[-1], points + 1)
        bucket = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, points - 1)
        first = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]])
        held = pl.DataFrame(
            {
                "time": pl.Series(t[first].astype("datetime64[us]")),
                "gpus": np.maximum.reduceat(g, first).astype(float),
            }
        )
    return peak, at, held


def _top(jobs: pl.DataFrame, column: str, gpu_h: pl.Expr) -> tuple[int, pl.DataFrame]:
    known = jobs.filter(pl.col(column).is_not_null())
    top = (
        known.group_by(column)
        .agg(pl.len().alias("jobs"), gpu_h.sum().alias("gpu_hours"))
        .sort(["jobs", column], descending=[True, False])
        .head(10)
    )
    return known[column].n_unique(), top


def describe_trace(
    jobs: pl.DataFrame, quarantine: pl.DataFrame, source_id: str = ""
) -> TraceDescription:
    """Summarize one source's `jobs` rows and its `quarantine` rows (the tables' columns).
    Rows outside `READABLE` are left out and counted (`n_unreadable`)."""
    jobs, unreadable = readable_jobs(jobs)
    durations = jobs["duration_s"].drop_nulls().to_numpy().astype(float)
    quantiles = (
        {
            "p10": float(np.quantile(durations, 0.1)),
            "p50": float(np.quantile(durations, 0.5)),
            "p90": float(np.quantile(durations, 0.9)),
            "p99": float(np.quantile(durations, 0.99)),
            "max": float(durations.max()),
            "mean": float(durations.mean()),
        }
        if durations.size
        else {}
    )
    gpu_h = pl.col("num_gpus") * pl.col("duration_s").fill_null(0.0) / 3600.0
    total = jobs.height or 1
    status = (
        jobs.group_by("status")
        .agg(pl.len().alias("jobs"))
        .with_columns((pl.col("jobs") / total).alias("fraction"))
        .sort(["jobs", "status"], descending=[True, False])
    )
    n_users, users = _top(jobs, "user_name", gpu_h)
    n_vcs, vcs = _top(jobs, "vc", gpu_h)
    peak, peak_at, concurrent = _concurrency(_intervals(jobs))
    reasons = (
        quarantine.group_by("field", "reason")
        .agg(pl.len().alias("records"), pl.col("record_no").min().alias("first_record"))
        .sort(["records", "field", "reason"], descending=[True, False, False])
        .head(10)
        if quarantine.height
        else pl.DataFrame(
            schema={
                "field": pl.Utf8,
                "reason": pl.Utf8,
                "records": pl.UInt32,
                "first_record": pl.Int64,
            }
        )
    )
    derivable = jobs.filter(
        pl.col("status").is_in(list(DERIVABLE_STATUSES)) & (pl.col("duration_s") >= 1.0)
    ).height
    return TraceDescription(
        source_id=source_id,
        n_jobs=jobs.height,
        first_submit=jobs["submit_time"].min() if jobs.height else None,
        last_submit=jobs["submit_time"].max() if jobs.height else None,
        arrivals_per_hour=_hours(jobs),
        duration_quantiles=quantiles,
        duration_cdf=_cdf(durations),
        jobs_with_duration=int(durations.size),
        gpu_histogram=_gpu_bins(jobs["num_gpus"].to_numpy().astype(float)),
        total_gpu_hours=float(jobs.select(gpu_h.sum()).item() or 0.0),
        status_mix=status,
        n_users=n_users,
        top_users=users,
        n_vcs=n_vcs,
        top_vcs=vcs,
        peak_gpus=peak,
        peak_at=peak_at,
        concurrent_gpus=concurrent,
        n_quarantined=quarantine.height,
        quarantine_reasons=reasons,
        derivable_jobs=derivable,
        n_unreadable=unreadable,
    )


def human_duration(seconds: float) -> str:
    """1.5 s, 12 min, 3.2 h, 4.1 d."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    if seconds < 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def sparkline(values: np.ndarray, width: int = 60) -> str:
    """`values` as a line of block characters, averaged into at most `width` buckets."""
    if values.size == 0:
        return ""
    buckets = np.array_split(values.astype(float), min(width, values.size))
    means = np.array([b.mean() for b in buckets])
    top = means.max()
    if top <= 0:
        return _SPARK[0] * len(means)
    return "".join(_SPARK[round(m / top * (len(_SPARK) - 1))] for m in means)


def describe_text(d: TraceDescription) -> str:
    """The description as plain text (what `schedlab describe` prints)."""
    out = [f"trace {d.source_id}: {d.n_jobs:,} jobs"]
    if d.n_unreadable:
        out.append(f"  ({left_out_note(d.n_unreadable)})")
    if d.span is not None:
        out.append(
            f"  submitted {d.first_submit:%Y-%m-%d %H:%M} .. {d.last_submit:%Y-%m-%d %H:%M} "
            f"(span {human_duration(d.span.total_seconds())})"
        )
    hours = d.arrivals_per_hour["jobs"].to_numpy()
    if hours.size:
        busiest = d.arrivals_per_hour.sort("jobs", descending=True).row(0)
        sparse = d.span is not None and d.span > timedelta(hours=MAX_DENSE_HOURS)
        out.append(
            f"  arrivals per hour: mean {hours.mean():.1f}, max {hours.max()} "
            f"(at {busiest[0]:%Y-%m-%d %H:00}), "
            + (
                f"listed for the {hours.size} hours with arrivals only (the span is over "
                f"{MAX_DENSE_HOURS:,} hours)"
                if sparse
                else f"{int((hours == 0).sum())} of {hours.size} hours without any"
            )
        )
        out.append(f"    |{sparkline(hours)}| ({hours.size} hours, left to right)")
    q = d.duration_quantiles
    if q:
        out.append(
            f"  duration ({d.jobs_with_duration:,} jobs with one): p10 {human_duration(q['p10'])}, "
            f"median {human_duration(q['p50'])}, p90 {human_duration(q['p90'])}, "
            f"p99 {human_duration(q['p99'])}, max {human_duration(q['max'])}"
        )
    else:
        out.append("  duration: none recorded")
    out.append(f"  GPU demand ({d.total_gpu_hours:,.0f} GPU-hours in all):")
    for label, jobs, share in d.gpu_histogram.iter_rows():
        if jobs:
            out.append(f"    {label:>6} GPUs  {jobs:>9,} jobs  {share:6.1%} of GPUs requested")
    out.append(
        f"  peak concurrent GPU demand: {d.peak_gpus:,.0f} GPUs"
        + (f" at {d.peak_at:%Y-%m-%d %H:%M}" if d.peak_at is not None else "")
    )
    mix = ", ".join(f"{s} {n:,} ({f:.0%})" for s, n, f in d.status_mix.iter_rows())
    out.append(f"  status: {mix}")
    for what, n, top, column in (
        ("users", d.n_users, d.top_users, "user_name"),
        ("virtual clusters", d.n_vcs, d.top_vcs, "vc"),
    ):
        names = ", ".join(f"{r[column]} ({r['jobs']:,})" for r in top.head(5).iter_rows(named=True))
        out.append(f"  {what}: {n:,}" + (f"; most jobs: {names}" if n else " (not recorded)"))
    out.append(f"  quarantined: {d.n_quarantined:,} records")
    for field, reason, records, first in d.quarantine_reasons.iter_rows():
        out.append(f"    {records:>7,} x {field}: {reason} (first: record {first})")
    share = d.derivable_jobs / d.n_jobs if d.n_jobs else 0.0
    out.append(
        f"  usable for workloads: {d.derivable_jobs:,} jobs ({share:.0%}) have a final status "
        f"({', '.join(DERIVABLE_STATUSES)}) and a duration of at least 1 s"
    )
    # User names, VCs, job ids in reasons come from the trace: never raw control codes.
    return "\n".join(printable(line) for line in out)
