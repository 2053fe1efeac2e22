"""Contract-checked reads and writes of warehouse tables."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import duckdb
import pandera.errors
import pandera.polars as pa
import polars as pl

from warehouse.frame_checks import passing_frame

_MAX_ROWS_SHOWN = 10


class ContractViolation(ValueError):
    """A stage tried to write rows that break the table's contract; nothing was written."""


def validate(frame: pl.DataFrame, contract: type[pa.DataFrameModel]) -> pl.DataFrame:
    """Validate (and coerce) a frame against a table contract, or raise ContractViolation.

    The message names the table, each failing column and check, and the offending rows
    (0-based positions in the frame) with their values. A frame that passes is checked in
    one query (`warehouse.frame_checks`); pandera checks, and words, the others.
    """
    table = contract.Config.name
    passing = passing_frame(frame, contract)  # the same checks in one query
    if passing is not None:
        return passing
    try:
        return contract.validate(frame, lazy=True)
    except pandera.errors.SchemaErrors as exc:
        raise ContractViolation(_describe_failures(table, exc.failure_cases)) from None
    except pandera.errors.SchemaError as exc:
        raise ContractViolation(f"table {table!r}: {exc}") from None


def column_types(contract: type[pa.DataFrameModel]) -> dict[str, pl.DataType]:
    """The contract's columns and their polars types, in its order."""
    return {name: column.dtype.type for name, column in contract.to_schema().columns.items()}


def empty_frame(contract: type[pa.DataFrameModel]) -> pl.DataFrame:
    """No rows, shaped by the contract (e.g. to clear rows with `replace_rows`)."""
    return pl.DataFrame(schema=column_types(contract))


def _describe_failures(table: str, cases: Any) -> str:
    cases = pl.DataFrame(cases) if not isinstance(cases, pl.DataFrame) else cases
    lines = [f"contract violation in table {table!r}:"]
    grouped = cases.group_by(["column", "check"], maintain_order=True).agg(
        pl.col("index"), pl.col("failure_case")
    )
    for column, check, rows, values in grouped.iter_rows():
        rows = [r for r in rows if r is not None]
        shown = ", ".join(f"row {r}: {v}" for r, v in zip(rows, values, strict=False))
        shown = shown or ", ".join(str(v) for v in values[:_MAX_ROWS_SHOWN])
        if len(rows) > _MAX_ROWS_SHOWN:
            shown = ", ".join(
                f"row {r}: {v}"
                for r, v in zip(rows[:_MAX_ROWS_SHOWN], values[:_MAX_ROWS_SHOWN], strict=True)
            )
            shown += f", ... ({len(rows)} rows in all)"
        lines.append(f"  column {column!r} fails {check}: {shown}")
    return "\n".join(lines)


def write_frame(
    con: duckdb.DuckDBPyConnection, frame: pl.DataFrame, contract: type[pa.DataFrameModel]
) -> int:
    """Validate `frame` against `contract` and append it to the contract's table.

    Call inside `warehouse.transaction` so a failure later in the stage rolls it back.
    """
    checked = validate(frame, contract)
    _refuse_stored_keys(con, contract, checked)
    _insert(con, contract.Config.name, checked)
    return checked.height


def _table_key(contract: type[pa.DataFrameModel]) -> tuple[str, ...]:
    """The key a contract says its table has without an index (`__table_key__`), or ()."""
    return tuple(getattr(contract, "__table_key__", ()))


def _refuse_stored_keys(
    con: duckdb.DuckDBPyConnection, contract: type[pa.DataFrameModel], checked: pl.DataFrame
) -> None:
    """ContractViolation if a row of `checked` has the key of a stored row, for tables
    whose key no index holds (the contract checks the frame itself)."""
    key = _table_key(contract)
    if not key or checked.height == 0:
        return
    table = contract.Config.name
    arrow = checked.select(key).to_arrow()  # noqa: F841 - referenced by name in the SQL below
    on = " AND ".join(f't."{c}" = a."{c}"' for c in key)
    found = con.execute(
        f"SELECT {', '.join(f'a.{c}' for c in key)} FROM arrow a "
        f'SEMI JOIN "{table}" t ON {on} LIMIT 1'
    ).fetchall()
    if found:
        shown = ", ".join(f"{c} = {v!r}" for c, v in zip(key, found[0], strict=True))
        raise ContractViolation(
            f"contract violation in table {table!r}: a row with key {shown} is already stored"
        )


def _insert(con: duckdb.DuckDBPyConnection, table: str, checked: pl.DataFrame) -> None:
    if checked.height == 0:
        return
    # Polars' own string layout (Arrow string views): handed over without a copy, where the
    # default (large strings) rebuilt every text column (0.1-0.2 s for a million jobs).
    arrow = checked.to_arrow(compat_level=pl.CompatLevel.newest())  # noqa: F841 - read by the SQL
    try:
        con.execute(f'INSERT INTO "{table}" BY NAME SELECT * FROM arrow')
    except duckdb.ConstraintException as exc:
        raise ContractViolation(f"contract violation in table {table!r}: {exc}") from None


def replace_rows(
    con: duckdb.DuckDBPyConnection,
    frame: pl.DataFrame,
    contract: type[pa.DataFrameModel],
    where: Mapping[str, Any],
) -> int:
    """Delete the rows matching `where` (column = value) then append `frame`: an idempotent load.

    The frame is validated before anything is deleted, and every row of it must match
    `where` (ContractViolation otherwise): a row outside it would survive the next replace
    and be stored twice. So a contract's uniqueness check on the frame holds for the table
    too (`jobs` has no key of its own, migration 0021).
    """
    table = contract.Config.name
    checked = validate(frame, contract)
    outside = checked.filter(
        ~pl.all_horizontal(
            pl.col(col).eq_missing(pl.lit(value, dtype=checked.schema[col]))
            for col, value in where.items()
        )
    )
    if outside.height:
        shown = ", ".join(f"{col} = {value!r}" for col, value in where.items())
        raise ContractViolation(
            f"table {table!r}: {outside.height} row(s) to store do not match {shown}, the "
            f"rows they replace; e.g. {outside.select(list(where)).row(0, named=True)}"
        )
    clause = " AND ".join(f'"{col}" = ?' for col in where)
    con.execute(f'DELETE FROM "{table}" WHERE {clause}', list(where.values()))
    if not set(where) <= set(_table_key(contract)):
        # A stored row with a frame row's key need not match `where`: look. (When `where`
        # is part of the key, such a row matched `where` and was just deleted.)
        _refuse_stored_keys(con, contract, checked)
    _insert(con, table, checked)
    return checked.height


def read_frame(
    con: duckdb.DuckDBPyConnection, query: str, params: Sequence[Any] | None = None
) -> pl.DataFrame:
    """Run a query and return a polars frame."""
    return con.sql(query, params=list(params) if params else None).pl()


def table_counts(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """Every table and view in the main schema with its row count."""
    names = con.sql(
        "SELECT table_name, table_type FROM information_schema.tables "
        "WHERE table_schema = 'main' ORDER BY table_name"
    ).fetchall()
    rows = []
    for name, kind in names:
        [(count,)] = con.sql(f'SELECT count(*) FROM "{name}"').fetchall()
        rows.append({"table": name, "kind": "view" if kind == "VIEW" else "table", "rows": count})
    return pl.DataFrame(rows, schema={"table": pl.Utf8, "kind": pl.Utf8, "rows": pl.Int64})
