"""Versioned schema migrations: numbered SQL files applied once each, in order."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources

import duckdb

_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


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


def migrate(con: duckdb.DuckDBPyConnection) -> list[int]:
    """Apply pending migrations, each in its own transaction; return the versions applied."""
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
    return applied
