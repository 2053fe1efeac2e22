"""Comparing two warehouses' tables: what must be equal between runs that differ only in
when and how they ran (kill and restart, task runner)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from warehouse import connect, read_frame

# Bookkeeping that differs between any two runs by design (run ids, clocks).
NOT_COMPARED = {"pipeline_runs", "schema_migrations", "schema_views"}
WALL_CLOCK_COLUMNS = {"wall_s"}
RUN_COLUMNS = {("fidelity_checks", "run_id")}
"""Columns naming the pipeline run that wrote a row (a fresh id per run)."""
WALL_CLOCK_KEYS = ("wall", "s_per_iteration")
"""Metrics keys (substrings) that measure elapsed time."""


def comparable_tables(warehouse: Path) -> dict[str, pl.DataFrame]:
    """Every base table minus timestamps and wall-clock figures, in a canonical order;
    checkpoint paths by file name (the warehouses live in different folders)."""
    out = {}
    with connect(warehouse, read_only=True) as con:
        columns = read_frame(
            con,
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            "JOIN duckdb_tables() USING (table_name) ORDER BY table_name, ordinal_position",
        )
        for (table,), cols in columns.group_by("table_name", maintain_order=True):
            if table in NOT_COMPARED:
                continue
            keep = [
                c
                for c, t in zip(cols["column_name"], cols["data_type"], strict=True)
                if t != "TIMESTAMP"
                and c not in WALL_CLOCK_COLUMNS
                and (table, c) not in RUN_COLUMNS
            ]
            frame = read_frame(con, f"SELECT {', '.join(keep)} FROM {table} ORDER BY ALL")
            out[table] = frame
    policies = out["policies"]
    out["policies"] = policies.with_columns(
        pl.col("checkpoint_path").map_elements(lambda p: Path(p).name, return_dtype=pl.Utf8),
        pl.col("metrics").map_elements(without_clocks, return_dtype=pl.Utf8),
    )
    return out


def assert_same_tables(warehouse: Path, reference: Path) -> None:
    """`warehouse` has exactly `reference`'s tables (`comparable_tables`)."""
    got, expected = comparable_tables(warehouse), comparable_tables(reference)
    assert got.keys() == expected.keys()
    for table, frame in expected.items():
        assert got[table].equals(frame), difference(table, got[table], frame)


def difference(table: str, got: pl.DataFrame, expected: pl.DataFrame) -> str:
    """Where two versions of a table part: the columns and the first rows that differ (a
    nondeterminism is found from this message, not by re-running under the same load)."""
    if got.shape != expected.shape:
        return f"{table}: shape {got.shape}, expected {expected.shape}"
    columns = [c for c in expected.columns if not got[c].equals(expected[c])]
    rows = [i for i in range(expected.height) if got.row(i) != expected.row(i)][:3]
    keys = [c for c in expected.columns if c not in columns][:4]
    shown = [
        {
            "row": i,
            **{c: expected[c][i] for c in keys},
            **{c: (got[c][i], expected[c][i]) for c in columns},
        }
        for i in rows
    ]
    return f"{table} differs in columns {columns}; first rows (got, expected): {shown}"


def without_clocks(metrics: str) -> str:
    """A policy's metrics JSON without its elapsed-time figures."""

    def strip(value):
        if isinstance(value, dict):
            return {
                k: strip(v)
                for k, v in value.items()
                if not any(clock in k for clock in WALL_CLOCK_KEYS)
            }
        return value

    return json.dumps(strip(json.loads(metrics)), sort_keys=True)


def readme_queries(table: str) -> list[str]:
    """The README's SQL statements that read `table` (from its ```sql blocks)."""
    import re

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    out = []
    for block in re.findall(r"```sql\n(.*?)```", readme, flags=re.DOTALL):
        for statement in block.split(";"):
            if re.search(rf"\b{table}\b", statement):
                out.append(statement.strip())
    return out


def assert_readme_queries_answer(warehouse, table: str) -> None:
    """Asserts the README has SQL reading `table` and each statement returns rows from the
    warehouse at `warehouse`."""
    queries = readme_queries(table)
    assert queries
    with connect(warehouse) as con:
        for query in queries:
            assert read_frame(con, query).height > 0, query
