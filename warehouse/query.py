"""SQL typed by a user (`schedlab sql`): one read-only statement on a locked-down connection.

Two independent fences: the connection (`connect(query_only=True)`) has external access,
extensions and configuration changes disabled by DuckDB itself, and the statement must be
a single SELECT, checked by DuckDB's own parser before it runs. Either
alone would stop the known attacks (COPY TO over the warehouse, read_csv of /etc/passwd,
ATTACH, INSTALL/LOAD, SET); both together keep a gap in one from opening the file system.
"""

from __future__ import annotations

import duckdb
import polars as pl

ALLOWED_STATEMENTS = (duckdb.StatementType.SELECT,)


class QueryRefused(ValueError):
    """The SQL is not a single read-only statement; it was not run."""


def run_user_query(con: duckdb.DuckDBPyConnection, sql: str) -> pl.DataFrame:
    """Run one SELECT (DESCRIBE, SHOW, SUMMARIZE and FROM-first included) typed by a user
    and return its rows. Raises QueryRefused for anything else (several statements, COPY,
    ATTACH, SET, INSTALL, CREATE, PRAGMA, EXPLAIN, ...) and duckdb.Error when the query
    itself fails (a missing table, or a file function refused by the connection)."""
    statements = con.extract_statements(sql)
    if not statements:
        raise QueryRefused("no SQL statement given")
    if len(statements) > 1:
        raise QueryRefused(f"one statement at a time: the SQL holds {len(statements)} statements")
    kind = statements[0].type
    if kind not in ALLOWED_STATEMENTS:
        name = getattr(kind, "name", str(kind))
        raise QueryRefused(
            f"only SELECT queries are allowed, not {name}; "
            "`schedlab sql` reads the warehouse and nothing else"
        )
    return con.sql(sql).pl()
