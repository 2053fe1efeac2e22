"""Versioned schema migrations: numbered SQL files applied once each, in order; then the
views, each defined once in `warehouse/views/` and re-applied when its definition changes.

A migration changes tables. A view is not restated by the migration that changes what it
reads: its one file under `views/` is edited, and `apply_views` re-creates every view whose
file changed or that is missing (a migration that rebuilds a table a view reads may drop
the view; it comes back here).

A migration is never edited, with one exception: a statement that only restated a view
may be taken out of an applied migration, since views come from `views/` whatever the
migrations did. The edited migration's earlier checksums are listed in `SUPERSEDED`, so a
warehouse that applied the earlier text is still accepted; any other difference is
refused."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources

import duckdb

_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_VIEW = re.compile(r"^(\d{2})_([a-z0-9_]+)\.sql$")


SUPERSEDED: dict[int, tuple[str, ...]] = {
    9: ("849d3269d29cdb9c265820f520898accae0a5a0afb6fc25dcbeeea6466c42dff",),
    13: ("5f8622404545dffb91b4ca6d9779379894c7ad5146a7b270e527814eca3f6baa",),
    14: ("baffe1ab7ac6eb508b1cac6dd6489641c7ddf1ba5a69c0ac22af38a366c89603",),
    16: ("480b4a301ab71783364365854051d7483346e0abf93f28177ee9c711fd74b9d9",),
    18: ("a7d7da559cd9c5f2817f276c9e7393cbd778f1fa85e1dda58554510383a23692",),
    19: ("d531533b527d9befd56d5dbedbfa88804cc33a1818bcbbf562255181519b24a9",),
    20: ("56a9cdd2b9dedab442d1bc5bf56880ab7093f2fecd8d23542901671406115c70",),
    25: ("be7da5a29ca5d6478197ed800c0fbcf0d8440e470514d8999ef0020c8f4ac7bb",),
}
"""Per migration, checksums of its earlier texts that a warehouse may have recorded: the
same migration with view statements since taken out (see the module docstring)."""


class MigrationError(RuntimeError):
    """The warehouse was migrated by different code than this checkout holds."""


class _ShippedSql:
    """A definition shipped as a SQL file; its checksum (the sha256 of its text) is what
    `schema_migrations` and `schema_views` record of it."""

    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def _shipped(folder: str, pattern: re.Pattern[str]) -> list[tuple[str, re.Match[str], str]]:
    """(file name, its match, text) of each file of `warehouse/<folder>` whose name matches
    `pattern`, unordered."""
    found = []
    for entry in resources.files("warehouse").joinpath(folder).iterdir():
        match = pattern.match(entry.name)
        if match:
            found.append((entry.name, match, entry.read_text()))
    return found


@dataclass(frozen=True)
class Migration(_ShippedSql):
    version: int
    name: str
    sql: str


def available_migrations() -> list[Migration]:
    """Every migration shipped in warehouse/migrations, ordered by version."""
    found = [
        Migration(int(match.group(1)), match.group(2), sql)
        for _, match, sql in _shipped("migrations", _NAME)
    ]
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
class View(_ShippedSql):
    """One view's one definition (`views/NN_<name>.sql`; NN orders views that read views)."""

    name: str
    sql: str


def available_views() -> list[View]:
    """Every view shipped in warehouse/views, in file-name order."""
    found = [(file, View(match.group(2), sql)) for file, match, sql in _shipped("views", _VIEW)]
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
    # BEGIN/COMMIT written out, as in `migrate`: warehouse.db imports this module.
    con.execute("BEGIN TRANSACTION")
    try:
        for view in stale:
            con.execute(view.sql)
            con.execute(
                "INSERT OR REPLACE INTO schema_views VALUES (?, ?, ?)",
                [view.name, view.checksum, now],
            )
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")
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
            recorded = done[migration.version]
            if recorded != migration.checksum and recorded not in SUPERSEDED.get(
                migration.version, ()
            ):
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
