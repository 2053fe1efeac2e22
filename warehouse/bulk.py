"""Loading a plain CSV straight into a table with DuckDB's own reader, and enforcing a
table's pandera contract on stored rows in SQL (the rows never become a polars frame).

`insert_csv` runs the caller's typing SQL over the file's text columns; `check_stored`
is the contract's SQL twin, derived from the pandera model itself: every column check it
knows how to translate, nullability, the table key, and each dataframe-level check's SQL
twin named in the model's `__sql_checks__`. A contract check it cannot translate raises
instead of being skipped (tests/test_ingest_bulk.py holds pandera and this to the same
verdicts).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pandera.polars as pa

from warehouse.io import ContractViolation, _table_key


class BulkRefused(Exception):
    """The file is not what the bulk load was planned for (a row it must not accept as
    it is, a line of another width): the caller's transaction is to be rolled back."""


KEY_UNIQUE = "key is unique"
"""`__sql_checks__` value for a dataframe check that says the table key is unique."""


def insert_csv(
    con: duckdb.DuckDBPyConnection,
    table: str,
    path: str | Path,
    *,
    types: Sequence[str],
    typed: str,
    columns: list[str],
    constants: Mapping[str, Any],
) -> int:
    """Insert the rows of `typed` (SQL over a relation `raw` whose columns c0, c1, ... are
    the file's fields read as `types`, empty ones NULL; it yields `columns` and `_bad`) whose
    `_bad` is false, with `constants` as further columns. Returns the rows inserted.

    Raises BulkRefused at the first row whose `_bad` is true, or line DuckDB's strict
    reader cannot read (another number of fields, a value that is not of its type):
    DuckDB stops there, and the caller's transaction is aborted (roll it back).

    The file is read without quoting, header line skipped; call inside
    `warehouse.transaction`.
    """
    spec = ", ".join(f"'c{i}': '{kind}'" for i, kind in enumerate(types))
    names = ", ".join(f'"{n}"' for n in [*constants, *columns])
    sql = (
        f"WITH raw AS (SELECT * FROM read_csv(?, delim=',', quote='', escape='', header=false,"
        f" skip=1, columns={{{spec}}}, auto_detect=false, strict_mode=true,"
        f" null_padding=false, parallel=true))\n"
        f'INSERT INTO "{table}" ({names})\n'
        f"SELECT {', '.join(['?'] * len(constants) + columns)} FROM ({typed}) "
        # Stop at the first row the careful way must decide, rather than read on.
        "WHERE CASE WHEN _bad THEN error('a record needs the careful way') ELSE true END"
    )
    try:
        [(count,)] = con.execute(sql, [str(path), *constants.values()]).fetchall()
    except (duckdb.InvalidInputException, duckdb.ConversionException) as exc:
        raise BulkRefused(str(exc).splitlines()[0]) from None
    return int(count)


@dataclass(frozen=True)
class Checked:
    rows: int
    """Rows checked."""
    repeated: int
    """Rows whose key an earlier row holds (0 unless `repeats_ok`)."""


def check_stored(
    con: duckdb.DuckDBPyConnection,
    contract: type[pa.DataFrameModel],
    where: Mapping[str, Any],
    *,
    repeats_ok: bool = False,
) -> Checked:
    """Enforce `contract` on the stored rows matching `where` (column = value), in one SQL
    pass; ContractViolation naming the table, column and check (with up to three failing
    values) when a row breaks it. `repeats_ok`: a repeated key is counted, not refused
    (the caller replaces the rows when there is one).

    Nulls pass column checks (pandera's `ignore_na`); non-nullable columns must hold no
    null; the table key (`__table_key__`, `Config.unique`) is unique among the rows.
    Column types are the table's own (tests/test_contracts.py holds DDL and contract
    together), so they need no check.
    """
    schema = contract.to_schema()
    table = contract.Config.name
    tests: list[tuple[str, str, str]] = []  # (column, check, SQL true where a row fails)
    for name, column in schema.columns.items():
        ref = f'"{name}"'
        if not column.nullable:
            tests.append((name, "not_nullable", f"{ref} IS NULL"))
        for check in column.checks:
            tests.append((name, check.name, _column_check_sql(table, name, ref, check)))
    twins = getattr(contract, "__sql_checks__", {})
    key = list(_table_key(contract) or schema.unique or [])
    for check in schema.checks:
        twin = twins.get(check.name)
        if twin is None:
            raise NotImplementedError(
                f"contract {table!r}: dataframe check {check.name!r} has no SQL twin in "
                "__sql_checks__, so rows checked in SQL would skip it"
            )
        if twin == KEY_UNIQUE:
            if not key:
                raise NotImplementedError(f"contract {table!r}: {check.name!r} needs a key")
            continue
        tests.append(("", check.name, f"NOT coalesce(({twin}), true)"))
    clause = " AND ".join(f'"{c}" = ?' for c in where) or "true"
    params = list(where.values())
    key_sql = ", ".join(f'"{c}"' for c in key)
    # Key columns fixed by `where` are the same in every row checked: leave them out (one
    # text column hashes several times faster than a row of them).
    varying = [f'"{c}"' for c in key if c not in where] or [f'"{key[0]}"'] if key else []
    distinct = (
        f"count(DISTINCT {varying[0]})"
        if len(varying) == 1
        else f"count(DISTINCT ({', '.join(varying)}))"
        if varying
        else "count(*)"
    )
    # One pass for the verdict; the failing checks are looked up only when there are any.
    any_fails = " OR ".join(f"coalesce({sql}, false)" for _, _, sql in tests) or "false"
    [(total, unique, failing)] = con.execute(
        f'SELECT count(*), {distinct}, count(*) FILTER (WHERE {any_fails}) FROM "{table}" '
        f"WHERE {clause}",
        params,
    ).fetchall()
    lines = []
    for column, check, sql in tests if failing else ():
        shown_sql = f'"{column}"' if column else key_sql or "*"
        shown = con.execute(
            f'SELECT {shown_sql} FROM "{table}" WHERE {clause} AND coalesce({sql}, false) LIMIT 3',
            params,
        ).fetchall()
        if shown:
            values = ", ".join(str(r[0] if len(r) == 1 else r) for r in shown)
            where_col = f"column {column!r}" if column else "dataframe"
            lines.append(f"  {where_col} fails {check}: e.g. {values}")
    if unique != total and not repeats_ok:
        lines.append(f"  key {tuple(key)} is not unique: {total - unique} repeated row(s)")
    if lines:
        raise ContractViolation("\n".join([f"contract violation in table {table!r}:", *lines]))
    return Checked(int(total), int(total - unique))


def _column_check_sql(table: str, name: str, ref: str, check: Any) -> str:
    """SQL that is true where a value fails one pandera column check."""
    stats = check.statistics
    if check.name == "greater_than_or_equal_to":
        return f"{ref} < {_literal(stats['min_value'])}"
    if check.name == "greater_than":
        return f"{ref} <= {_literal(stats['min_value'])}"
    if check.name == "less_than_or_equal_to":
        return f"{ref} > {_literal(stats['max_value'])}"
    if check.name == "less_than":
        return f"{ref} >= {_literal(stats['max_value'])}"
    if check.name == "isin":
        allowed = ", ".join(_literal(v) for v in stats["allowed_values"])
        return f"{ref} NOT IN ({allowed})"
    if check.name == "str_length":
        parts = []
        if stats.get("exact_value") is not None:
            parts.append(f"length({ref}) <> {int(stats['exact_value'])}")
        if stats.get("min_value") is not None:
            parts.append(f"length({ref}) < {int(stats['min_value'])}")
        if stats.get("max_value") is not None:
            parts.append(f"length({ref}) > {int(stats['max_value'])}")
        return " OR ".join(parts) or "false"
    raise NotImplementedError(
        f"contract {table!r}: check {check.name!r} on column {name!r} has no SQL twin"
    )


def _literal(value: Any) -> str:
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise NotImplementedError(f"no SQL literal for {value!r}")
    return repr(value)
