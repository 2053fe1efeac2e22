import json
import tempfile
from pathlib import Path

import polars as pl
import pytest

from tests.lock_holder import held_open
from tracelib.contracts import Quarantine
from warehouse import (
    ContractViolation,
    MigrationError,
    WarehouseBusy,
    applied_migrations,
    connect,
    read_frame,
    replace_rows,
    resolve_path,
    transaction,
    write_frame,
)
from warehouse.migrations import SUPERSEDED, available_migrations


def _quarantine_row(record_no=1, reason="bad"):
    return pl.DataFrame(
        {
            "source_id": ["s"],
            "record_no": [record_no],
            "field": ["f"],
            "reason": [reason],
            "raw_record": ["x"],
        }
    )


def test_path_resolution_order(tmp_path, monkeypatch):
    monkeypatch.delenv("SCHEDLAB_WAREHOUSE", raising=False)
    assert str(resolve_path()) == "var/schedlab.duckdb"
    monkeypatch.setenv("SCHEDLAB_WAREHOUSE", str(tmp_path / "env.duckdb"))
    assert resolve_path() == tmp_path / "env.duckdb"
    assert resolve_path(tmp_path / "arg.duckdb") == tmp_path / "arg.duckdb"


def test_migrations_apply_once_and_are_recorded(warehouse_path):
    with connect(warehouse_path) as con:
        first = applied_migrations(con)
    with connect(warehouse_path) as con:
        assert applied_migrations(con) == first
    assert sorted(first) == [m.version for m in available_migrations()]


def test_edited_migration_is_refused(warehouse_path):
    with connect(warehouse_path) as con:
        con.execute("UPDATE schema_migrations SET checksum = 'tampered' WHERE version = 1")
    with pytest.raises(MigrationError, match="changed after it was applied"):
        with connect(warehouse_path):
            pass


def test_failed_transaction_leaves_warehouse_unchanged(warehouse_path):
    with connect(warehouse_path) as con:
        with transaction(con):
            write_frame(con, _quarantine_row(1), Quarantine)
        with pytest.raises(RuntimeError), transaction(con):
            write_frame(con, _quarantine_row(2), Quarantine)
            raise RuntimeError("stage failed half-way")
        rows = read_frame(con, "SELECT record_no FROM quarantine")
    assert rows.get_column("record_no").to_list() == [1]


def test_contract_violation_names_table_column_and_rows(warehouse_path):
    bad = pl.concat([_quarantine_row(1), _quarantine_row(0), _quarantine_row(-3, reason="")])
    with connect(warehouse_path) as con:
        with pytest.raises(ContractViolation) as err, transaction(con):
            write_frame(con, bad, Quarantine)
        assert read_frame(con, "SELECT count(*) AS n FROM quarantine").item() == 0
    message = str(err.value)
    assert "'quarantine'" in message
    assert "'record_no'" in message and "row 1: 0" in message and "row 2: -3" in message
    assert "'reason'" in message


def test_primary_key_violation_becomes_contract_violation(warehouse_path):
    from tests.test_contracts import minimal_job

    job = minimal_job()
    with connect(warehouse_path) as con:
        from tracelib.contracts import Jobs

        write_frame(con, job, Jobs)
        with pytest.raises(ContractViolation, match="'jobs'"):
            write_frame(con, job, Jobs)


def test_replace_rows_is_idempotent(warehouse_path):
    with connect(warehouse_path) as con:
        for _ in range(3):
            with transaction(con):
                replace_rows(con, _quarantine_row(1), Quarantine, {"source_id": "s"})
        assert read_frame(con, "SELECT count(*) AS n FROM quarantine").item() == 1


def test_busy_warehouse_is_reported_clearly(warehouse_path):
    with connect(warehouse_path):
        pass
    with held_open(warehouse_path, read_only=False):
        with pytest.raises(WarehouseBusy, match=r"busy.*Retry"):
            with connect(warehouse_path, read_only=True):
                pass


def test_a_writer_waits_for_a_short_reader_but_not_forever(warehouse_path, monkeypatch):
    with connect(warehouse_path):
        pass
    # A reader (a `schedlab sql` of a user) holds the file for about a second.
    with held_open(warehouse_path, hold_s=1.0):
        with connect(warehouse_path) as con:  # waits, then writes
            con.execute("CREATE TABLE after_reader (x INTEGER)")
    # A reader that does not let go: the writer gives up after the configured wait.
    monkeypatch.setenv("SCHEDLAB_LOCK_WAIT_S", "0.3")
    with held_open(warehouse_path):
        with pytest.raises(WarehouseBusy, match=r"busy.*Retry"):
            with connect(warehouse_path):
                pass


def test_read_only_on_missing_file_says_what_to_do(tmp_path):
    with pytest.raises(FileNotFoundError, match="schedlab run"):
        with connect(tmp_path / "none.duckdb", read_only=True):
            pass


def test_cli_duckdb_can_open_the_file(warehouse_path):
    """Users query the warehouse with the duckdb CLI (1.5.x): the file must stay readable."""
    import subprocess
    import sys
    from pathlib import Path

    with connect(warehouse_path):
        pass
    # duckdb-cli is a dependency: its `duckdb` lands beside this interpreter.
    cli = Path(sys.executable).parent / "duckdb"
    out = subprocess.run(
        [
            str(cli),
            "-readonly",
            str(warehouse_path),
            "-c",
            "SELECT count(*) FROM schema_migrations",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr


def test_jobs_are_unique_without_an_index(warehouse_path):
    # Migration 0021 dropped jobs' primary key; the contract and replace_rows hold it.
    from tests.test_contracts import minimal_job
    from tracelib.contracts import Jobs

    twice = pl.concat([minimal_job(), minimal_job(job_id="j2"), minimal_job()])
    with connect(warehouse_path) as con:
        assert not con.sql(
            "SELECT * FROM duckdb_constraints() WHERE table_name = 'jobs' "
            "AND constraint_type IN ('PRIMARY KEY', 'UNIQUE')"
        ).fetchall()
        with pytest.raises(ContractViolation, match=r"one_row_per_job.*row 2"):
            replace_rows(con, twice, Jobs, {"source_id": "s"})
        replace_rows(con, minimal_job(), Jobs, {"source_id": "s"})
        before = read_frame(con, "SELECT * FROM jobs")
        # A row outside the rows replaced would be stored twice by the next replace.
        other = pl.concat([minimal_job(job_id="j3"), minimal_job(source_id="t")])
        with pytest.raises(ContractViolation, match="do not match source_id = 's'"):
            with transaction(con):
                replace_rows(con, other, Jobs, {"source_id": "s"})
        assert read_frame(con, "SELECT * FROM jobs").equals(before)
        for _ in range(2):  # replacing is idempotent
            with transaction(con):
                replace_rows(con, other.head(1), Jobs, {"source_id": "s"})
        assert read_frame(con, "SELECT job_id FROM jobs")["job_id"].to_list() == ["j3"]


def test_a_run_whose_process_is_gone_is_marked_interrupted_at_the_next_start(tmp_path):
    """Runs left `running` by a killed process are marked `interrupted` by the next start;
    a run whose process is alive (here, this one) or on another machine is left alone."""
    import json
    import os
    import socket
    import subprocess
    import sys

    from pipelines.stages import _process_started, finish_run, start_run

    path = tmp_path / "wh.duckdb"
    live = start_run(path, "schedlab-nightly", 0, {})  # this process: still alive
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    gone_pid = int(dead.stdout)
    with connect(path) as con:
        con.execute(
            "INSERT INTO pipeline_runs VALUES "
            "('killed', 'schedlab-nightly', now(), NULL, 'running', 0, '{}', 'v', NULL, ?, ?, ?),"
            "('elsewhere', 'schedlab-nightly', now(), NULL, 'running', 0, '{}', 'v', NULL, "
            "'another-host', ?, 'x'),"
            "('reused', 'schedlab-nightly', now(), NULL, 'running', 0, '{}', 'v', NULL, ?, ?, "
            "'boot:1'),"
            "('old', 'schedlab-nightly', now(), NULL, 'running', 0, '{}', 'v', NULL, NULL, "
            "NULL, NULL)",
            [
                socket.gethostname(),
                gone_pid,
                "boot:2",
                os.getpid(),
                socket.gethostname(),
                os.getpid(),
            ],
        )
    assert _process_started(os.getpid()) not in (None, "boot:1")
    start_run(path, "schedlab-nightly", 0, {})
    with connect(path, read_only=True) as con:
        rows = read_frame(con, "SELECT run_id, status, summary FROM pipeline_runs")
    status = dict(zip(rows["run_id"], rows["status"], strict=True))
    assert status == {
        live: "running",
        "killed": "interrupted",
        "elsewhere": "running",
        "reused": "interrupted",  # the pid lives on, but as another process
        "old": "interrupted",
        **{
            r: "running"
            for r in rows["run_id"]
            if r not in (live, "killed", "elsewhere", "reused", "old")
        },
    }
    summary = json.loads(rows.filter(pl.col("run_id") == "killed")["summary"][0])
    assert f"pid {gone_pid}) ended without finishing the run" in summary["interrupted"]
    finish_run(path, live, "completed")


def test_views_are_defined_once_and_reapplied_when_their_definition_changes(tmp_path, monkeypatch):
    """Each view has one definition (warehouse/views/), applied after the migrations: a
    changed definition is re-applied on the next writing open, a view a migration dropped
    comes back, and an unchanged one is left as it is."""
    import re

    import warehouse.migrations as migrations

    views = migrations.available_views()
    names = [v.name for v in views]
    assert len(names) == len(set(names)) and "leaderboard" in names
    # No migration after views moved to warehouse/views/ restates one.
    for migration in migrations.available_migrations():
        if migration.version >= 25:
            defined = re.findall(r"CREATE (?:OR REPLACE )?VIEW (\w+)", migration.sql)
            assert defined == [], f"{migration.name} restates {defined}"

    path = tmp_path / "wh.duckdb"
    with connect(path) as con:
        applied = dict(con.sql("SELECT name, applied_at FROM schema_views").fetchall())
        present = {n for (n,) in con.sql("SELECT view_name FROM duckdb_views()").fetchall()}
    assert set(applied) == set(names) and set(names) <= present

    changed = [
        migrations.View(v.name, v.sql.replace("AS\nSELECT", "AS\nSELECT 1 AS marker,", 1))
        if v.name == "chic_evaluation"
        else v
        for v in views
    ]
    assert changed != views
    monkeypatch.setattr(migrations, "available_views", lambda: changed)
    with connect(path) as con:
        con.execute("DROP VIEW policy_lineage")  # as a migration rebuilding a table might
    with connect(path) as con:
        columns = [
            c
            for (c,) in con.sql(
                "SELECT column_name FROM duckdb_columns() WHERE table_name = 'chic_evaluation'"
            ).fetchall()
        ]
        again = dict(con.sql("SELECT name, applied_at FROM schema_views").fetchall())
        assert con.sql("SELECT count(*) FROM policy_lineage").fetchall() == [(0,)]
    assert "marker" in columns
    assert {n for n in names if again[n] != applied[n]} == {"chic_evaluation", "policy_lineage"}


SCHEMA = Path(__file__).parent / "data" / "warehouse_schema.json"
"""A fresh warehouse's tables, columns, constraints and views. Regenerate it when a new
migration or view changes them on purpose:
`python -c "from tests.test_warehouse import write_schema; write_schema()"`."""


def schema_of(con) -> dict:
    """Tables, columns, constraints and views (with their SQL) of a warehouse."""

    def rows(sql: str) -> list[list[str | None]]:
        return [[None if v is None else str(v) for v in row] for row in con.sql(sql).fetchall()]

    return {
        "tables": [t for (t,) in rows("SELECT table_name FROM duckdb_tables() ORDER BY ALL")],
        "columns": rows(
            "SELECT table_name, column_name, data_type, is_nullable, column_default "
            "FROM information_schema.columns ORDER BY ALL"
        ),
        "constraints": rows(
            "SELECT table_name, constraint_type, constraint_text FROM duckdb_constraints() "
            "ORDER BY ALL"
        ),
        "views": rows("SELECT view_name, sql FROM duckdb_views() WHERE NOT internal ORDER BY ALL"),
    }


def write_schema(path: Path = SCHEMA) -> None:
    """Write a fresh warehouse's schema to `path` (see SCHEMA)."""
    with tempfile.TemporaryDirectory() as tmp, connect(Path(tmp) / "w.duckdb") as con:
        path.write_text(json.dumps(schema_of(con), indent=1, sort_keys=True) + "\n")


def test_a_fresh_warehouse_has_the_recorded_schema(warehouse_path):
    """Views come from warehouse/views/ only (the migrations that restated them no longer
    do): a fresh warehouse's tables, constraints and views are still exactly these."""
    with connect(warehouse_path) as con:
        assert schema_of(con) == json.loads(SCHEMA.read_text())


def test_a_warehouse_that_applied_superseded_migrations_opens(warehouse_path):
    """A warehouse whose migrations were applied from their earlier texts (with the view
    statements) records those texts' checksums: accepted, nothing re-applied; a checksum
    neither current nor superseded is refused."""
    with connect(warehouse_path) as con:
        for version, (checksum, *_) in SUPERSEDED.items():
            con.execute(
                "UPDATE schema_migrations SET checksum = ? WHERE version = ?", [checksum, version]
            )
        before = schema_of(con)
    with connect(warehouse_path) as con:
        assert schema_of(con) == before
        assert set(applied_migrations(con)) == {m.version for m in available_migrations()}
        con.execute("UPDATE schema_migrations SET checksum = 'earlier' WHERE version = 20")
    with pytest.raises(MigrationError, match="0020_one_evaluation was changed"):
        with connect(warehouse_path):
            pass
