"""The nightly run's ingest of the shadow spool: every closed UTC day of every cluster
becomes a trace source `shadow:<cluster slug>:<YYYY-MM-DD>` (tracelib/shadow/trace.py),
with its jobs, its quarantine and its `shadow_decisions` rows, stored in one transaction.

The spool is `<warehouse folder>/shadow-spool/` unless given (`schedlab run
--shadow-spool DIR`); without that folder nothing happens. A day is closed once its UTC
date is before today's; today's file is still being appended to and waits for the next
night. A day already stored from the same bytes is skipped (`unchanged`); one whose file
changed since (a late append) is replaced whole. A failed ingest rolls its transaction
back, so the warehouse is as it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path

from pipelines.contracts import ShadowDecisions
from tracelib.contracts import Jobs, Quarantine, TraceSources
from tracelib.ingest import source_row
from tracelib.ingest.base import IngestError, printable
from tracelib.shadow.spool import SPOOL_VERSION, cluster_slug
from tracelib.shadow.trace import FORMAT, load_shadow_day, shadow_source_id
from warehouse import (
    ContractViolation,
    connect,
    read_frame,
    replace_rows,
    resolve_path,
    transaction,
)

SPOOL_FOLDER = "shadow-spool"


def default_spool(warehouse: str | Path | None) -> Path:
    """`<warehouse folder>/shadow-spool`, where `schedlab serve-policy` spools by default."""
    return resolve_path(warehouse).parent / SPOOL_FOLDER


@dataclass(frozen=True)
class ShadowIngest:
    """One closed spool day's ingest."""

    source_id: str
    outcome: str
    """"new", "replaced", "unchanged" or "failed" (`note` says why; nothing stored)."""
    rows_accepted: int
    rows_quarantined: int
    decisions: int
    """`shadow_decisions` rows stored (0 when unchanged)."""
    finished_jobs: int
    """Jobs with a final status: what workload derivation can use."""
    policies: tuple[str, ...] = ()
    """The shadowed policies, most decisions first."""
    servers: dict[str, tuple[float, str | None]] | None = None
    """The newest snapshot's servers: name -> (GPUs, GPU type)."""
    note: str = ""


def closed_days(spool: Path, today: date) -> list[tuple[str, date, Path]]:
    """(cluster slug, day, file) of every spool file of a day before `today`, oldest first.
    Only folders named as the spool names a cluster (`cluster_slug`) are read: a source id
    is made from the name, and is printed and typed into commands."""
    found = []
    for path in spool.glob("*/*.jsonl") if spool.is_dir() else ():
        try:
            day = date.fromisoformat(path.stem)
        except ValueError:
            continue
        slug = path.parent.name
        if day < today and path.is_file() and slug == cluster_slug(slug):
            found.append((slug, day, path))
    return sorted(found, key=lambda f: (f[1], f[0]))


def shadow_ingest_stage(
    warehouse: str | Path | None,
    spool: str | Path | None = None,
    *,
    today: date | None = None,
) -> list[ShadowIngest]:
    """Ingest every closed day of the spool not yet stored as it is (module docstring). A
    day whose ingest fails (a row breaking a contract, an unreadable file) is reported with
    outcome "failed" and its reason, nothing of it stored; the other days go on, and the
    next run tries it again."""
    folder = Path(spool) if spool is not None else default_spool(warehouse)
    if spool is not None and not folder.is_dir():
        raise IngestError(folder, "--shadow-spool: not a folder")
    today = today or datetime.now(UTC).date()
    results = []
    for slug, day, path in closed_days(folder, today):
        source_id = shadow_source_id(slug, day)
        try:
            results.append(_ingest_day(warehouse, source_id, slug, day, path))
        except (ContractViolation, OSError, ValueError) as exc:
            note = printable(f"{path}: {exc}", 2000)
            results.append(ShadowIngest(source_id, "failed", 0, 0, 0, 0, note=note))
    return results


def _ingest_day(warehouse, source_id: str, slug: str, day: date, path: Path) -> ShadowIngest:
    loaded = load_shadow_day(path, day, slug)
    params = {"format": FORMAT, "spool_version": SPOOL_VERSION}
    with connect(warehouse) as con:
        stored = read_frame(
            con,
            "SELECT content_hash, rows_accepted, rows_quarantined FROM trace_sources "
            "WHERE source_id = ?",
            [source_id],
        )
        finished = loaded.jobs.filter(
            loaded.jobs["status"].is_in(["completed", "failed", "killed"])
        ).height
        if stored.height and stored["content_hash"][0] == loaded.content_hash:
            return ShadowIngest(
                source_id,
                "unchanged",
                int(stored["rows_accepted"][0]),
                int(stored["rows_quarantined"][0]),
                0,
                finished,
                loaded.policies,
                loaded.servers,
            )
        source = source_row(
            source_id,
            FORMAT,
            str(path.resolve()),
            loaded.content_hash,
            rows_accepted=loaded.jobs.height,
            rows_quarantined=loaded.quarantine.height,
            params=params,
        )
        where = {"source_id": source_id}
        with transaction(con):
            replace_rows(con, loaded.jobs, Jobs, where)
            replace_rows(con, loaded.quarantine, Quarantine, where)
            replace_rows(con, loaded.decisions, ShadowDecisions, where)
            replace_rows(con, source, TraceSources, where)
    return ShadowIngest(
        source_id,
        "replaced" if stored.height else "new",
        loaded.jobs.height,
        loaded.quarantine.height,
        loaded.decisions.height,
        finished,
        loaded.policies,
        loaded.servers,
    )
