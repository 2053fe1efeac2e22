"""Trace ingestion: parse a file in one of the supported formats, quarantine bad records,
and load the rest into the warehouse in one transaction.

    load_trace(path, "philly")          -> LoadedTrace (pure: no warehouse access)
    store_trace(con, loaded)            -> StoreResult (one transaction, idempotent)
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import duckdb
import polars as pl

from tracelib.contracts import Jobs, Quarantine, TraceSources
from tracelib.ingest.base import MAX_DURATION_S, IngestError, ParsedTrace, normalize
from tracelib.ingest.generic import Mapping
from tracelib.provenance import canonical_json, code_version

FORMATS = ("philly", "pai", "helios", "generic")

__all__ = [
    "FORMATS",
    "IngestError",
    "LoadedTrace",
    "Mapping",
    "StoreResult",
    "default_source_id",
    "load_trace",
    "parse_trace",
    "store_trace",
]


@dataclass
class LoadedTrace:
    """A trace ready to store: accepted jobs, quarantined records and its source row."""

    source: pl.DataFrame  # one `trace_sources` row
    jobs: pl.DataFrame
    quarantine: pl.DataFrame

    @property
    def source_id(self) -> str:
        return self.source.item(0, "source_id")

    @property
    def content_hash(self) -> str:
        return self.source.item(0, "content_hash")


@dataclass(frozen=True)
class StoreResult:
    source_id: str
    outcome: Literal["new", "replaced", "unchanged"]
    rows_accepted: int
    rows_quarantined: int


def default_source_id(path: str | Path, fmt: str) -> str:
    """`format:name`, name the file (or, for PAI, the directory) without its extension."""
    path = Path(path)
    return f"{fmt}:{path.stem if path.suffix else path.name}"


def parse_trace(
    path: str | Path, fmt: str, mapping: Mapping | str | Path | None = None
) -> ParsedTrace:
    """Run the adapter for `fmt` on `path`."""
    path = Path(path)
    if fmt == "philly":
        from tracelib.ingest.philly import parse_philly

        return parse_philly(path)
    if fmt == "pai":
        from tracelib.ingest.pai import parse_pai

        return parse_pai(path)
    if fmt == "helios":
        from tracelib.ingest.generic import parse_helios

        return parse_helios(path)
    if fmt == "generic":
        from tracelib.ingest.generic import parse_generic

        if mapping is None:
            raise IngestError(path, "the generic format needs a mapping file (--mapping)")
        if not isinstance(mapping, Mapping):
            mapping = Mapping.from_toml(mapping)
        return parse_generic(path, mapping)
    raise ValueError(f"unknown trace format {fmt!r}; known: {', '.join(FORMATS)}")


def load_trace(
    path: str | Path,
    fmt: str,
    *,
    mapping: Mapping | str | Path | None = None,
    source_id: str | None = None,
    max_duration_s: float = MAX_DURATION_S,
) -> LoadedTrace:
    """Parse and normalize a trace file. Raises IngestError if the file as a whole is unusable."""
    parsed = parse_trace(path, fmt, mapping)
    source_id = source_id or default_source_id(path, fmt)
    jobs, quarantine = normalize(parsed, source_id, max_duration_s=max_duration_s)
    return LoadedTrace(
        source=source_row(
            source_id,
            fmt,
            str(Path(path).resolve()),
            parsed.content_hash,
            rows_accepted=jobs.height,
            rows_quarantined=quarantine.height,
            params={**parsed.params, "max_duration_s": max_duration_s},
        ),
        jobs=jobs,
        quarantine=quarantine,
    )


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


def store_trace(con: duckdb.DuckDBPyConnection, loaded: LoadedTrace) -> StoreResult:
    """Write a loaded trace in one transaction.

    The same content under the same source id is a no-op; changed content replaces that
    source's jobs and quarantine rows (never duplicates them).
    """
    from warehouse import replace_rows, transaction

    previous = con.sql(
        "SELECT content_hash FROM trace_sources WHERE source_id = ?", params=[loaded.source_id]
    ).fetchall()
    if previous and previous[0][0] == loaded.content_hash:
        return StoreResult(loaded.source_id, "unchanged", 0, 0)
    where = {"source_id": loaded.source_id}
    with transaction(con):
        replace_rows(con, loaded.jobs, Jobs, where)
        replace_rows(con, loaded.quarantine, Quarantine, where)
        replace_rows(con, loaded.source, TraceSources, where)
    return StoreResult(
        loaded.source_id,
        "replaced" if previous else "new",
        loaded.jobs.height,
        loaded.quarantine.height,
    )
