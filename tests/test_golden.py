"""`python -m benchmarks golden`: two warehouses written by different code versions compare
equal when only code versions, clocks and locations differ, and a one-ulp change to one
result is found."""

from __future__ import annotations

import shutil

import numpy as np

from benchmarks.bench_golden import compare, main
from warehouse import connect, read_frame


def _copy(reference, tmp_path, name):
    target = tmp_path / name
    shutil.copy(reference.warehouse, target)
    return target


def _restamp(warehouse):
    """What another code version run at another time changes: every code_version, clock
    and wall time (but in `policies`: other tables' keys refer to its rows, and DuckDB
    refuses any update to a row that is referred to)."""
    with connect(warehouse) as con:
        columns = read_frame(
            con,
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            "JOIN duckdb_tables() USING (table_name)",
        )
        for table, column, kind in columns.iter_rows():
            if table == "policies":
                continue
            if column == "code_version":
                con.execute(f"UPDATE {table} SET {column} = 'another-version'")
            elif column == "wall_s":
                con.execute(f"UPDATE {table} SET {column} = {column} + 1")
            elif kind == "TIMESTAMP" and column.endswith("_at") and table != "pipeline_runs":
                con.execute(f"UPDATE {table} SET {column} = {column} + INTERVAL 1 DAY")


def test_other_code_version_and_clocks_compare_equal(reference_run, tmp_path, capsys):
    after = _copy(reference_run, tmp_path, "after.duckdb")
    _restamp(after)
    assert compare(str(reference_run.warehouse), str(after), show=3) == 0
    assert main([str(reference_run.warehouse), str(after)]) == 0
    assert "rows that differ: 0 (target 0)" in capsys.readouterr().out


def test_one_ulp_in_one_result_is_found(reference_run, tmp_path, capsys):
    after = _copy(reference_run, tmp_path, "after.duckdb")
    _restamp(after)
    with connect(after) as con:
        [(run_id, jct)] = con.sql(
            "SELECT run_id, avg_jct_s FROM eval_runs ORDER BY run_id LIMIT 1"
        ).fetchall()
        nudged = float(np.nextafter(jct, np.inf))
        con.execute("UPDATE eval_runs SET avg_jct_s = ? WHERE run_id = ?", [nudged, run_id])
    assert compare(str(reference_run.warehouse), str(after), show=1) == 2
    out = capsys.readouterr().out
    assert "eval_runs" in out and repr(nudged) in out
    assert main([str(reference_run.warehouse), str(after)]) == 1


def test_evaluations_stored_in_another_order_compare_equal(reference_run, tmp_path, capsys):
    # With worker processes, the workload sets' evaluations run side by side: which one is
    # stored first differs between two runs of the same code.
    after = _copy(reference_run, tmp_path, "after.duckdb")
    _restamp(after)
    with connect(after) as con:
        [(last,)] = con.sql(
            "SELECT eval_id FROM eval_summary GROUP BY eval_id "
            "ORDER BY max(evaluated_at) DESC, eval_id LIMIT 1"
        ).fetchall()
        con.execute(
            "UPDATE eval_summary SET evaluated_at = evaluated_at - INTERVAL 30 DAY "
            "WHERE eval_id = ?",
            [last],
        )
    assert compare(str(reference_run.warehouse), str(after), show=3) == 0
