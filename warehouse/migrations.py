"""Versioned schema migrations: numbered SQL files applied once each, in order; then the
views, each defined once in `warehouse/views/` and re-applied when its definition changes.

A migration changes tables. A view is not restated by the migration that changes what it
reads: its one file under `views/` is edited, and `apply_views` re-creates every view whose
file changed or that is missing (a migration that rebuilds a table a view reads may drop
the view; it comes back here)."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources

import duckdb

from warehouse.db import transaction

_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_VIEW = re.compile(r"^(\d{2})_([a-z0-9_]+)\.sql$")


class MigrationError(RuntimeError):
    """The warehouse was migrated by different code than this checkout holds."""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def available_migrations() -> list[Migration]:
    """Every migration shipped in warehouse/migrations, ordered by version."""
    found = []
    for entry in resources.files("warehouse").joinpath("migrations").iterdir():
        match = _NAME.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2), entry.read_text()))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise MigrationError(f"two migrations share a version number: {versions}")
    return found


def applied_migrations(con: duckdb.DuckDBPyConnection) -> dict[int, str]:
    """version -> checksum of the migrations this warehouse has applied."""
    rows = con.sql("SELECT version, checksum FROM schema_migrations ORDER BY version").fetchall()
    return {int(v): str(c) for v, c in rows}


@dataclass(frozen=True)
class View:
    """One view's one definition (`views/NN_<name>.sql`; NN orders views that read views)."""

    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def available_views() -> list[View]:
    """Every view shipped in warehouse/views, in file-name order."""
    found = []
    for entry in resources.files("warehouse").joinpath("views").iterdir():
        match = _VIEW.match(entry.name)
        if match:
            found.append((entry.name, View(match.group(2), entry.read_text())))
    return [view for _, view in sorted(found)]


def apply_views(con: duckdb.DuckDBPyConnection) -> list[str]:
    """(Re-)create, in one transaction, every view whose definition file changed since it
    was applied here or that is missing; returns their names."""
    con.execute(
        "CREATE TABLE IF NOT EXISTS schema_views ("
        " name VARCHAR PRIMARY KEY, checksum VARCHAR NOT NULL, applied_at TIMESTAMP NOT NULL)"
    )
    done = dict(con.sql("SELECT name, checksum FROM schema_views").fetchall())
    present = {
        name
        for (name,) in con.sql("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()
    }
    stale = [
        v for v in available_views() if done.get(v.name) != v.checksum or v.name not in present
    ]
    if not stale:
        return []
    now = datetime.now(UTC).replace(tzinfo=None)
    with transaction(con):
        for view in stale:
            con.execute(view.sql)
            con.execute(
                "INSERT OR REPLACE INTO schema_views VALUES (?, ?, ?)",
                [view.name, view.checksum, now],
            )
    return [view.name for view in stale]


def migrate(con: duckdb.DuckDBPyConnection) -> list[int]:
    """Apply pending migrations, each in its own transaction, then the views that changed
    (`apply_views`); return the migration versions applied."""
    con.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        " version INTEGER PRIMARY KEY, name VARCHAR NOT NULL,"
        " checksum VARCHAR NOT NULL, applied_at TIMESTAMP NOT NULL)"
    )
    done = applied_migrations(con)
    applied = []
    for migration in available_migrations():
        if migration.version in done:
            if done[migration.version] != migration.checksum:
                raise MigrationError(
                    f"migration {migration.version:04d}_{migration.name} was changed after it "
                    "was applied to this warehouse; add a new migration instead of editing one"
                )
            continue
        con.execute("BEGIN TRANSACTION")
        try:
            con.execute(migration.sql)
            con.execute(
                "INSERT INTO schema_migrations VALUES (?, ?, ?, ?)",
                [
                    migration.version,
                    migration.name,
                    migration.checksum,
                    datetime.now(UTC).replace(tzinfo=None),
                ],
            )
        except BaseException:
            con.execute("ROLLBACK")
            raise
        con.execute("COMMIT")
        applied.append(migration.version)
    apply_views(con)
    return applied
