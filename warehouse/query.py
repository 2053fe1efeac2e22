"""SQL typed by a user (`schedlab sql`): one read-only statement on a locked-down connection.

Two independent fences: the connection (`connect(query_only=True)`) has external access,
extensions and configuration changes disabled by DuckDB itself, and a memory limit with no
spilling to disk; and the statement must be a single SELECT whose parsed form (DuckDB's own
parser, `json_serialize_sql`) names only warehouse tables and table functions that read no
file. The second fence is needed even with the first: DuckDB lets a connection read the
files it has open (`read_blob('<warehouse>')` or its `.wal` returns deleted rows' bytes)
whatever `enable_external_access` says. A timer interrupts a query that runs too long, and
at most `max_rows` rows are fetched into memory.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass

import duckdb
import polars as pl

ALLOWED_STATEMENTS = (duckdb.StatementType.SELECT,)
# Table functions that read no file and change nothing: generators, catalogue and storage
# introspection of the open warehouse. Everything else (read_*, glob, sniff_csv, parquet_*,
# query, query_table, checkpoint, logging and profiling switches, ...) is refused by name,
# and so are table macros built on them (histogram and histogram_values call query_table
# on a name that may be a file path).
SAFE_TABLE_FUNCTIONS = frozenset(
    {
        "range",
        "generate_series",
        "unnest",
        "repeat",
        "repeat_row",
        "json_each",
        "json_tree",
        "test_all_types",
        "pg_timezone_names",
        "icu_calendar_names",
        "duckdb_columns",
        "duckdb_constraints",
        "duckdb_databases",
        "duckdb_dependencies",
        "duckdb_functions",
        "duckdb_indexes",
        "duckdb_keywords",
        "duckdb_schemas",
        "duckdb_sequences",
        "duckdb_settings",
        "duckdb_tables",
        "duckdb_types",
        "duckdb_views",
        "duckdb_memory",
        "pragma_table_info",
        "pragma_database_size",
        "pragma_storage_info",
        "pragma_metadata_info",
        "pragma_show",
        "pragma_version",
        "pragma_platform",
        "pragma_collations",
    }
)
# A CTE's body that only reads (a SELECT, a set operation, a recursive or nested CTE).
_READING_NODES = frozenset({"SELECT_NODE", "SET_OPERATION_NODE", "RECURSIVE_CTE_NODE", "CTE_NODE"})
# Characters that make DuckDB read a table name as a file path (a replacement scan:
# FROM 'x.csv', FROM '<warehouse>.wal'); no warehouse table or view has them.
_PATH_CHARACTERS = frozenset("./\\:~")


class QueryRefused(ValueError):
    """The SQL is not a single read-only statement; it was not run."""


class QueryLimitExceeded(RuntimeError):
    """The query ran longer than its time limit or needed more than its memory limit; it
    was stopped and nothing was returned."""


@dataclass(frozen=True)
class QueryResult:
    """The rows of a user query, at most `max_rows` of them; `truncated` when there were
    more."""

    frame: pl.DataFrame
    truncated: bool


def check_user_query(con: duckdb.DuckDBPyConnection, sql: str) -> None:
    """QueryRefused unless `sql` is one SELECT reading only warehouse tables and safe table
    functions (`SAFE_TABLE_FUNCTIONS`), with no data-changing statement inside a WITH."""
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
    [(serialized,)] = con.execute("SELECT json_serialize_sql(?)", [sql]).fetchall()
    tree = json.loads(serialized)
    if tree.get("error"):
        message = str(tree.get("error_message", ""))
        if "Side-effecting" in message:
            raise QueryRefused(
                "refused: a data-changing statement (DELETE, UPDATE, INSERT) inside WITH; "
                "`schedlab sql` only reads"
            )
        raise QueryRefused(f"refused: the query could not be checked ({message})")
    _check_tree(tree)


def _check_tree(node: object) -> None:
    """Walk DuckDB's parsed form: every table function must be safe, every table name a
    name (not a file path), every CTE body a read."""
    if isinstance(node, list):
        for item in node:
            _check_tree(item)
        return
    if not isinstance(node, dict):
        return
    kind = node.get("type")
    if kind == "TABLE_FUNCTION":
        name = str((node.get("function") or {}).get("function_name", "")).lower()
        if name not in SAFE_TABLE_FUNCTIONS:
            raise QueryRefused(
                f"refused: table function {name}() is not allowed; `schedlab sql` reads the "
                "warehouse's tables and views, no file (the warehouse's own included)"
            )
    elif kind == "BASE_TABLE":
        name = str(node.get("table_name", ""))
        if _PATH_CHARACTERS & set(name):
            raise QueryRefused(
                f"refused: {name!r} is read as a file, not a table; `schedlab sql` reads the "
                "warehouse's tables and views, no file"
            )
    cte_map = node.get("cte_map")
    if isinstance(cte_map, dict):
        for entry in cte_map.get("map") or []:
            body = ((entry.get("value") or {}).get("query") or {}).get("node") or {}
            if body.get("type") not in _READING_NODES:
                raise QueryRefused(
                    "refused: a data-changing statement inside WITH; `schedlab sql` only reads"
                )
    for value in node.values():
        _check_tree(value)


def run_user_query(
    con: duckdb.DuckDBPyConnection,
    sql: str,
    *,
    timeout_s: float | None = None,
    max_rows: int | None = None,
) -> QueryResult:
    """Run one SELECT (DESCRIBE, SHOW, SUMMARIZE and FROM-first included) typed by a user
    and return at most `max_rows` of its rows (None: all). Raises QueryRefused for anything
    else (several statements, COPY, ATTACH, SET, a file-reading table function, a
    data-changing CTE, ...) before running it; QueryLimitExceeded when it runs longer than
    `timeout_s` seconds or past the connection's memory limit; duckdb.Error when the query
    itself fails (a missing table)."""
    check_user_query(con, sql)
    relation = con.sql(sql)
    if max_rows is not None:
        # One row more than shown tells whether there were more; DuckDB stops early.
        relation = relation.limit(max_rows + 1)
    timer = None
    if timeout_s is not None:
        # The Python call blocks until DuckDB returns; interrupt() from another thread is
        # how a running query is stopped.
        timer = threading.Timer(timeout_s, con.interrupt)
        timer.daemon = True
        timer.start()
    try:
        frame = relation.pl()
    except duckdb.InterruptException:
        raise QueryLimitExceeded(
            f"the query ran longer than {timeout_s:g} s and was stopped "
            "(raise --timeout to give it longer)"
        ) from None
    except duckdb.OutOfMemoryException:
        limit = con.execute("SELECT current_setting('memory_limit')").fetchall()[0][0]
        raise QueryLimitExceeded(
            f"the query needed more than the memory limit ({limit}) and was stopped "
            "(raise --memory-limit, or aggregate or filter more)"
        ) from None
    finally:
        if timer is not None:
            timer.cancel()
    truncated = max_rows is not None and frame.height > max_rows
    return QueryResult(frame.head(max_rows) if truncated else frame, truncated)
