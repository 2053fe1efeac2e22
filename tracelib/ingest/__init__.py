"""Trace ingestion: parse a file in one of the supported formats, quarantine bad records,
and load the rest into the warehouse in one transaction.

    read_trace(path, "philly")          -> TraceFile (bytes read, identity known, not parsed)
    load_trace(path, "philly")          -> LoadedTrace (pure: no warehouse access)
    find_source(con, trace)             -> SourceMatch (which source a file is, if unchanged)
    store_trace(con, loaded)            -> StoreResult (one transaction, idempotent)
    ingest_trace(con, trace)            -> StoreResult (load + store; a plain CSV by DuckDB)

What a source is: a trace file is identified by its path and its content. Ingesting the
same path again updates that source (its jobs are replaced when the content, the mapping or
a format option changed; nothing happens when none did). A file at another path is another
source, even with the same name: it gets its own source id and never replaces an unrelated
one. Only a source id the user names explicitly (`--source-id`) replaces whatever holds it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import duckdb
import polars as pl

from tracelib.contracts import Jobs, Quarantine, TraceSources
from tracelib.ingest.base import (
    MAX_DURATION_S,
    PAI_BOUNDS,
    Bounds,
    IngestError,
    ParsedTrace,
    normalize,
    printable,
)
from tracelib.ingest.generic import Mapping
from tracelib.provenance import canonical_json, code_version, sha256_hex

FORMATS = ("philly", "pai", "helios", "generic")

__all__ = [
    "FORMATS",
    "IngestError",
    "LoadedTrace",
    "Mapping",
    "SourceMatch",
    "StoreResult",
    "TraceFile",
    "bulk_plan",
    "check_source_id",
    "default_source_id",
    "find_source",
    "find_source_of",
    "ingest_notes",
    "ingest_trace",
    "load_trace",
    "parse_trace",
    "read_trace",
    "resolve_mapping",
    "store_trace",
]


@dataclass(frozen=True)
class TraceFile:
    """A trace file read into memory but not parsed: everything that identifies an ingest."""

    path: Path
    """The path as given (PAI: the folder or the job table)."""
    format: str
    content_hash: str
    """sha256 of the bytes (PAI: the job table's, then the task table's)."""
    params: dict[str, Any]
    """The mapping and format options that decide the jobs (part of the identity)."""
    data: Any = field(repr=False)
    """The bytes (PAI: job path, job bytes, task path, task bytes)."""
    mapping: Mapping | None = None

    @property
    def resolved_path(self) -> str:
        return str(self.path.resolve())

    @property
    def params_json(self) -> str:
        return canonical_json(self.params)


@dataclass
class LoadedTrace:
    """A trace ready to store: accepted jobs, quarantined records and its source row."""

    source: pl.DataFrame  # one `trace_sources` row
    jobs: pl.DataFrame
    quarantine: pl.DataFrame
    named: bool = True
    """The source id was given by the user (or the code, for synthetic traces): store it
    under that id whatever holds it. False: the id is `default_source_id`, a proposal that
    `store_trace` changes rather than replace an unrelated source."""
    notes: tuple[str, ...] = ()
    """What the ingest should tell the user (`ingest_notes`)."""

    @property
    def source_id(self) -> str:
        return self.source.item(0, "source_id")

    @property
    def content_hash(self) -> str:
        return self.source.item(0, "content_hash")

    def with_source_id(self, source_id: str) -> LoadedTrace:
        """The same trace under another source id."""
        relabel = pl.lit(source_id, dtype=pl.Utf8).alias("source_id")
        return replace(
            self,
            source=self.source.with_columns(relabel),
            jobs=self.jobs.with_columns(relabel),
            quarantine=self.quarantine.with_columns(relabel),
        )


@dataclass(frozen=True)
class StoreResult:
    source_id: str
    outcome: Literal["new", "replaced", "unchanged"]
    rows_accepted: int
    rows_quarantined: int
    note: str = ""
    """Why the source got this id or outcome, when it is not obvious."""


@dataclass(frozen=True)
class SourceMatch:
    """Which source a trace file is stored as, decided before it is parsed."""

    source_id: str
    unchanged: bool
    """The warehouse already holds exactly this ingest (same bytes, mapping and options)."""
    exists: bool
    note: str = ""


MAX_SOURCE_ID_CHARS = 200
"""Longest source id: ids are typed into commands and printed in every summary line."""


def default_source_id(path: str | Path, fmt: str) -> str:
    """`format:name`, name the file (or, for PAI, the directory) without its extension;
    control characters in the name are escaped (`\\x1b`), so the id is always printable."""
    path = Path(path)
    return printable(f"{fmt}:{path.stem if path.suffix else path.name}", MAX_SOURCE_ID_CHARS)


def check_source_id(source_id: str | None, path: str | Path) -> None:
    """IngestError (naming the trace `path`) unless `source_id` is None or a usable id:
    not empty or blank, at most `MAX_SOURCE_ID_CHARS` characters, printable characters
    only (no control characters, which would act on the terminal of whoever lists it)."""
    if source_id is None:
        return
    shown = printable(repr(source_id), 60)
    if not source_id.strip():
        raise IngestError(path, f"--source-id {shown} is empty: name the source or leave it out")
    if len(source_id) > MAX_SOURCE_ID_CHARS:
        raise IngestError(
            path,
            f"--source-id {shown} has {len(source_id):,} characters; at most "
            f"{MAX_SOURCE_ID_CHARS} are allowed",
        )
    if not source_id.isprintable():
        raise IngestError(
            path,
            f"--source-id {shown} holds control characters; use printable characters only",
        )


def read_trace(
    path: str | Path,
    fmt: str,
    mapping: Mapping | str | Path | None = None,
    *,
    max_duration_s: float = MAX_DURATION_S,
) -> TraceFile:
    """Read a trace file's bytes and work out its identity, without parsing it (cheap: an
    unchanged file is recognized by hashing alone). Raises IngestError for a file or
    mapping that cannot be read."""
    path = Path(path)
    if fmt == "pai":
        from tracelib.ingest.pai import ingest_params, read_pai_bytes

        tables = read_pai_bytes(path)
        return TraceFile(
            path,
            fmt,
            sha256_hex(tables[1], tables[3]),
            {**ingest_params(), "max_duration_s": max_duration_s},
            tables,
        )
    from tracelib.ingest.generic import HELIOS_MAPPING, ingest_params, read_bytes

    if fmt == "philly":
        from tracelib.ingest.philly import TIME_FORMAT

        params = {"time_format": TIME_FORMAT}
    elif fmt == "helios":
        mapping = HELIOS_MAPPING
        params = ingest_params(mapping)
    elif fmt == "generic":
        if mapping is None:
            raise IngestError(path, "the generic format needs a mapping file (--mapping)")
        if not isinstance(mapping, Mapping):
            mapping = resolve_mapping(mapping)
        params = ingest_params(mapping)
    else:
        raise ValueError(f"unknown trace format {fmt!r}; known: {', '.join(FORMATS)}")
    data = read_bytes(path)
    return TraceFile(
        path, fmt, sha256_hex(data), {**params, "max_duration_s": max_duration_s}, data, mapping
    )


def resolve_mapping(mapping: str | Path) -> Mapping:
    """A mapping file, or the name of a shipped mapping (`SHIPPED_MAPPINGS`) when no file of
    that name exists."""
    from tracelib.ingest.generic import SHIPPED_MAPPINGS, shipped_mapping

    if str(mapping) in SHIPPED_MAPPINGS and not Path(mapping).exists():
        return shipped_mapping(str(mapping))
    return Mapping.from_toml(mapping)


def parse_trace(
    path: str | Path | TraceFile,
    fmt: str | None = None,
    mapping: Mapping | str | Path | None = None,
) -> ParsedTrace:
    """Run the adapter for `fmt` on `path` (or on a TraceFile already read)."""
    trace = path if isinstance(path, TraceFile) else read_trace(path, fmt, mapping)
    if trace.format == "philly":
        from tracelib.ingest.philly import parse_philly

        return parse_philly(trace.path, data=trace.data)
    if trace.format == "pai":
        from tracelib.ingest.pai import parse_pai

        return parse_pai(trace.path, tables=trace.data)
    from tracelib.ingest.generic import parse_generic

    return parse_generic(trace.path, trace.mapping, fmt=trace.format, data=trace.data)


def load_trace(
    path: str | Path | TraceFile,
    fmt: str | None = None,
    *,
    mapping: Mapping | str | Path | None = None,
    source_id: str | None = None,
    max_duration_s: float = MAX_DURATION_S,
) -> LoadedTrace:
    """Parse and normalize a trace file. Raises IngestError if the file as a whole is unusable.

    Without `source_id` the trace is proposed under `default_source_id`; `store_trace`
    decides the final id (see the module docstring).
    """
    check_source_id(source_id, path.path if isinstance(path, TraceFile) else path)
    trace = (
        path
        if isinstance(path, TraceFile)
        else read_trace(path, fmt, mapping, max_duration_s=max_duration_s)
    )
    parsed = parse_trace(trace)
    proposed = source_id or default_source_id(trace.path, trace.format)
    jobs, quarantine = normalize(
        parsed,
        proposed,
        max_duration_s=trace.params.get("max_duration_s", max_duration_s),
        bounds=trace_bounds(trace),
    )
    notes = (*parsed.notes, *ingest_notes(jobs))
    return LoadedTrace(
        source=source_row(
            proposed,
            trace.format,
            trace.resolved_path,
            trace.content_hash,
            rows_accepted=jobs.height,
            rows_quarantined=quarantine.height,
            params=trace.params,
        ),
        jobs=jobs,
        quarantine=quarantine,
        named=source_id is not None,
        notes=notes,
    )


def trace_bounds(trace: TraceFile) -> Bounds:
    """What the trace's fields may hold: its mapping's [bounds], else the format's."""
    if trace.mapping is not None:
        return trace.mapping.bounds
    return PAI_BOUNDS if trace.format == "pai" else Bounds()


def ingest_notes(jobs: pl.DataFrame) -> list[str]:
    """What derive will do with these jobs that a user would not guess: the jobs it leaves
    out for their status, and the wide jobs it replays narrower (never silently)."""
    cap = _wide_cap()
    wide = jobs.filter(pl.col("num_gpus") > cap).get_column("num_gpus")
    return _notes(jobs.group_by("status").len(), wide.len(), wide.max())


def _wide_cap() -> float:
    """GPUs beyond which derive replays a job narrower: the catalogue's widest job."""
    from tracelib.catalogue import DL2_CATALOGUE

    return max(jt.max_workers * max(jt.worker_gpu, 1.0) for jt in DL2_CATALOGUE)


def _notes(statuses: pl.DataFrame, n_wide: int, widest: float | None) -> list[str]:
    """`ingest_notes` from the jobs' status counts (status, len) and their wide jobs."""
    from tracelib.workloads import DeriveConfig

    notes = []
    kept = DeriveConfig().statuses
    left = statuses.filter(~pl.col("status").is_in(list(kept))).sort(
        "len", "status", descending=[True, False]
    )
    if left.height:
        counts = ", ".join(f"{n} {status}" for status, n in left.iter_rows())
        notes.append(f"derive keeps {', '.join(kept)} jobs by default; left out: {counts}")
    cap = _wide_cap()
    if n_wide:
        notes.append(
            f"{n_wide} job(s) ask for more than {cap:g} GPUs (up to "
            f"{widest:g}): derive replays each with at most "
            f"{cap:g} workers, the catalogue's max_workers"
        )
    return notes


def source_row(
    source_id: str,
    fmt: str,
    path: str,
    content_hash: str,
    *,
    rows_accepted: int,
    rows_quarantined: int,
    params: dict,
) -> pl.DataFrame:
    """One `trace_sources` row."""
    return pl.DataFrame(
        {
            "source_id": [source_id],
            "format": [fmt],
            "path": [path],
            "content_hash": [content_hash],
            "ingested_at": [datetime.now(UTC).replace(tzinfo=None)],
            "rows_accepted": [rows_accepted],
            "rows_quarantined": [rows_quarantined],
            "params": [canonical_json(params)],
            "code_version": [code_version()],
        }
    )


def find_source(
    con: duckdb.DuckDBPyConnection,
    *,
    fmt: str,
    path: str,
    content_hash: str,
    params_json: str,
    source_id: str | None = None,
    proposed: str | None = None,
) -> SourceMatch:
    """The source a trace is stored as (only reads the warehouse).

    `source_id` named by the user: that one. Otherwise the source ingested from the same
    path; else a source holding exactly this ingest from another path (nothing to do);
    else a new source, `proposed` if that id is free, else `proposed` plus a hash of the
    path (two clusters' `cluster_log.csv` never share an id).
    """
    from warehouse import read_frame

    def lookup(where: str, params: list) -> pl.DataFrame:
        return read_frame(
            con,
            "SELECT source_id, path, content_hash, params FROM trace_sources "
            f"WHERE {where} ORDER BY ingested_at DESC, source_id",
            params,
        )

    def same(row: dict) -> bool:
        return row["content_hash"] == content_hash and row["params"] == params_json

    if source_id is not None:
        rows = lookup("source_id = ?", [source_id])
        if rows.height == 0:
            return SourceMatch(source_id, unchanged=False, exists=False)
        row = rows.row(0, named=True)
        note = "" if row["path"] == path else f"named explicitly; it held {row['path']}"
        return SourceMatch(source_id, unchanged=same(row), exists=True, note=note)

    proposed = proposed or default_source_id(path, fmt)
    by_path = lookup("format = ? AND path = ?", [fmt, path])
    if by_path.height:
        rows = by_path.sort(pl.col("source_id") != proposed)  # its default id first
        row = rows.row(0, named=True)
        return SourceMatch(row["source_id"], unchanged=same(row), exists=True)
    by_content = lookup(
        "format = ? AND content_hash = ? AND params = ?", [fmt, content_hash, params_json]
    )
    if by_content.height:
        row = by_content.row(0, named=True)
        return SourceMatch(
            row["source_id"],
            unchanged=True,
            exists=True,
            note=f"the same content was already ingested from {row['path']}",
        )
    candidate = proposed
    if lookup("source_id = ?", [candidate]).height:
        suffix = hashlib.sha256(path.encode()).hexdigest()
        for length in (8, 16, 64):
            candidate = f"{proposed}-{suffix[:length]}"
            if not lookup("source_id = ?", [candidate]).height:
                break
        note = f"{proposed} is another file's source; this one is {candidate}"
        return SourceMatch(candidate, unchanged=False, exists=False, note=note)
    return SourceMatch(candidate, unchanged=False, exists=False)


def find_source_of(
    con: duckdb.DuckDBPyConnection, trace: TraceFile, source_id: str | None
) -> SourceMatch:
    """`find_source` for a TraceFile read with `read_trace`. A source stored from the same
    bytes and mapping whose jobs break the bounds (stored by a version without them)
    is not unchanged: reading it again quarantines those jobs."""
    match = find_source(
        con,
        fmt=trace.format,
        path=trace.resolved_path,
        content_hash=trace.content_hash,
        params_json=trace.params_json,
        source_id=source_id,
        proposed=default_source_id(trace.path, trace.format),
    )
    if match.unchanged and _breaks_bounds(con, match.source_id, trace_bounds(trace)):
        note = "its stored jobs include values outside the bounds: read again"
        return replace(match, unchanged=False, note="; ".join(n for n in (match.note, note) if n))
    return match


def _breaks_bounds(con: duckdb.DuckDBPyConnection, source_id: str, bounds: Bounds) -> bool:
    """Whether a stored job of `source_id` breaks `bounds`."""
    from tracelib.ingest.bulk import bounds_sql
    from warehouse import read_frame

    found = read_frame(
        con,
        f"SELECT count(*) AS n FROM jobs WHERE source_id = ? AND ({bounds_sql(bounds)})",
        [source_id],
    )
    return found.item() > 0


def store_trace(con: duckdb.DuckDBPyConnection, loaded: LoadedTrace) -> StoreResult:
    """Write a loaded trace in one transaction.

    The identity is settled inside the transaction (see `find_source`), so two ingests
    running at once cannot both take the same free id. The same ingest again is a no-op;
    a changed one replaces that source's jobs and quarantine rows (never duplicates them).
    """
    from warehouse import transaction

    row = loaded.source.row(0, named=True)
    with transaction(con):
        match = find_source(
            con,
            fmt=row["format"],
            path=row["path"],
            content_hash=row["content_hash"],
            params_json=row["params"],
            source_id=loaded.source_id if loaded.named else None,
            proposed=loaded.source_id,
        )
        if match.unchanged and _same_outcome(con, match.source_id, loaded):
            return StoreResult(match.source_id, "unchanged", 0, 0, match.note)
        return _replace_source(con, loaded, match)


def _same_outcome(con: duckdb.DuckDBPyConnection, source_id: str, loaded: LoadedTrace) -> bool:
    """Whether the stored source holds the jobs and quarantine rows `loaded` would store:
    the same bytes and mapping read by a version with other checks (bounds) can split them
    otherwise, and then the source is replaced."""
    from warehouse import read_frame

    stored = read_frame(
        con,
        "SELECT rows_accepted, rows_quarantined, "
        "(SELECT count(*) FROM jobs WHERE source_id = $1) AS jobs, "
        "(SELECT count(*) FROM quarantine WHERE source_id = $1) AS quarantined "
        "FROM trace_sources WHERE source_id = $1",
        [source_id],
    )
    accepted, quarantined = loaded.jobs.height, loaded.quarantine.height
    return stored.height == 1 and stored.row(0) == (accepted, quarantined, accepted, quarantined)


def _replace_source(
    con: duckdb.DuckDBPyConnection, loaded: LoadedTrace, match: SourceMatch
) -> StoreResult:
    """Replace the source's rows with `loaded`'s (inside the caller's transaction)."""
    from warehouse import replace_rows

    if match.source_id != loaded.source_id:
        loaded = loaded.with_source_id(match.source_id)
    where = {"source_id": loaded.source_id}
    replace_rows(con, loaded.jobs, Jobs, where)
    replace_rows(con, loaded.quarantine, Quarantine, where)
    replace_rows(con, loaded.source, TraceSources, where)
    return StoreResult(
        loaded.source_id,
        "replaced" if match.exists else "new",
        loaded.jobs.height,
        loaded.quarantine.height,
        "; ".join(n for n in (match.note, *loaded.notes) if n),
    )


def bulk_plan(trace: TraceFile):
    """How DuckDB reads this trace the fast way (`tracelib.ingest.bulk.BulkPlan`), or None
    when only the careful way (`load_trace`) reproduces its rows."""
    from tracelib.ingest.bulk import plan_bulk

    if trace.format not in ("generic", "helios"):
        return None
    max_duration_s = trace.params.get("max_duration_s", MAX_DURATION_S)
    return plan_bulk(
        trace.path,
        trace.data,
        trace.mapping,
        max_duration_s=max_duration_s,
        bounds=trace_bounds(trace),
    )


def ingest_trace(
    con: duckdb.DuckDBPyConnection,
    trace: TraceFile,
    *,
    source_id: str | None = None,
    plan: Any = None,
) -> StoreResult:
    """Parse, check and store a trace file in one transaction: what `load_trace` then
    `store_trace` do, with the same stored rows, but faster for a plain CSV.

    Such a file (`tracelib.ingest.bulk`) is read, typed and checked by DuckDB inside the
    transaction, and the `jobs` contract is enforced on the stored rows in SQL
    (`warehouse.bulk.check_stored`). At the first record that would be quarantined, a
    repeated job id, or a file that is not what the plan assumed, that transaction is
    rolled back and the careful way runs (`store_trace(load_trace(...))`, its own
    transaction): quarantine reasons, record numbers and raw text always come from it.
    Raises IngestError (nothing written) for an unusable file and ContractViolation
    (nothing written) for rows that break a contract. `plan`: the trace's `bulk_plan`,
    when the caller has it already.
    """
    from warehouse.bulk import BulkRefused

    check_source_id(source_id, trace.path)
    plan = plan or bulk_plan(trace)
    if plan is not None:
        try:
            return _ingest_bulk(con, trace, plan, source_id)
        except BulkRefused:
            pass  # rolled back: nothing of the fast way is stored
    return store_trace(con, load_trace(trace, source_id=source_id))


def _ingest_bulk(
    con: duckdb.DuckDBPyConnection, trace: TraceFile, plan: Any, source_id: str | None
) -> StoreResult:
    """The fast way, in one transaction; BulkRefused (rolled back) when the careful way
    must decide."""
    from tracelib.ingest.bulk import COLUMNS
    from warehouse import empty_frame, replace_rows, transaction
    from warehouse.bulk import BulkRefused, check_stored, insert_csv

    with transaction(con):
        match = find_source_of(con, trace, source_id)
        if match.unchanged:
            return StoreResult(match.source_id, "unchanged", 0, 0, match.note)
        where = {"source_id": match.source_id}
        replace_rows(con, empty_frame(Jobs), Jobs, where)
        inserted = insert_csv(
            con,
            "jobs",
            trace.path,
            types=plan.types,
            typed=plan.typed,
            columns=COLUMNS,
            constants={"source_id": match.source_id},
        )
        # DuckDB read the file again: it must still be the bytes hashed and planned.
        if inserted != plan.records or _size(trace.path) != len(trace.data):
            raise BulkRefused(f"{inserted} of {plan.records} records read")
        if check_stored(con, Jobs, where, repeats_ok=True).repeated:
            raise BulkRefused("a job id repeats")
        return _finish_bulk(con, trace, plan.records, match)


def _finish_bulk(
    con: duckdb.DuckDBPyConnection, trace: TraceFile, rows: int, match: SourceMatch
) -> StoreResult:
    """The quarantine (empty: every record became a job) and source rows of a fast ingest,
    and what the ingest says, as the careful way says it."""
    from tracelib.ingest.generic import NO_STATUS_NOTE
    from warehouse import empty_frame, read_frame, replace_rows

    where = {"source_id": match.source_id}
    replace_rows(con, empty_frame(Quarantine), Quarantine, where)
    source = source_row(
        match.source_id,
        trace.format,
        trace.resolved_path,
        trace.content_hash,
        rows_accepted=rows,
        rows_quarantined=0,
        params=trace.params,
    )
    replace_rows(con, source, TraceSources, where)
    statuses = read_frame(
        con,
        "SELECT status, count(*) AS len FROM jobs WHERE source_id = ? GROUP BY status",
        [match.source_id],
    )
    mapping = trace.mapping
    parsed_notes = (
        [NO_STATUS_NOTE]
        if mapping is not None
        and "status" not in mapping.columns
        and "status" not in mapping.defaults
        else []
    )
    cap = _wide_cap()
    wide = read_frame(
        con,
        "SELECT count(*) AS n, max(num_gpus) AS top FROM jobs WHERE source_id = ? AND num_gpus > ?",
        [match.source_id, cap],
    ).row(0)
    notes = (*parsed_notes, *_notes(statuses, wide[0], wide[1]))
    return StoreResult(
        match.source_id,
        "replaced" if match.exists else "new",
        rows,
        0,
        "; ".join(n for n in (match.note, *notes) if n),
    )


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1
