"""`schedlab sql` reads the warehouse and nothing else.

Each attack is run through the CLI; it must be refused (exit 2, or 1 for a query DuckDB
itself rejects), leave the warehouse byte for byte as it was, create no file and print
nothing of the file it aimed at.
"""

from __future__ import annotations

import hashlib

import pytest

from pipelines.cli import main
from tests.conftest import TRACES
from warehouse import QueryRefused, connect, run_user_query

SECRET = "secret-line-that-must-not-leak"


@pytest.fixture
def loaded_warehouse(warehouse_path, capsys):
    assert main(["ingest", str(TRACES / "helios_sample.csv"), "--format", "helios"]) == 0
    capsys.readouterr()
    return warehouse_path


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# (SQL with {target} for a file the attack writes or {secret} for one it reads, exit code,
# a phrase of the error). Exit 2: refused as bad input; 1: DuckDB rejects the query itself.
ATTACKS = [
    ("COPY (SELECT 1) TO '{warehouse}'", 2, "allowed, not COPY"),
    ("COPY (SELECT 1) TO '{target}'", 2, "allowed, not COPY"),
    ("COPY jobs TO '{target}' (FORMAT parquet)", 2, "allowed, not COPY"),
    ("EXPORT DATABASE '{target_dir}'", 2, "allowed, not EXPORT"),
    ("SELECT * FROM read_csv('{secret}')", 2, "is not allowed"),
    ("SELECT * FROM read_csv_auto('{secret}')", 2, "is not allowed"),
    ("SELECT * FROM read_text('{secret}')", 2, "is not allowed"),
    ("SELECT * FROM read_blob('{secret}')", 2, "is not allowed"),
    ("SELECT * FROM read_json_auto('{secret}')", 2, "is not allowed"),
    ("SELECT * FROM '{secret}'", 2, "is read as a file"),
    ("SELECT * FROM sniff_csv('{secret}')", 2, "is not allowed"),
    ("SELECT * FROM glob('{secret_dir}/*')", 2, "is not allowed"),
    ("ATTACH '{target}' AS other", 2, "allowed, not ATTACH"),
    ("ATTACH ':memory:' AS m", 2, "allowed, not ATTACH"),
    ("DETACH wh", 2, "allowed, not DETACH"),
    ("INSTALL httpfs", 2, "allowed, not LOAD"),
    ("LOAD httpfs", 2, "allowed, not LOAD"),
    ("LOAD '{target}'", 2, "allowed, not LOAD"),
    ("SET enable_external_access = true", 2, "allowed, not SET"),
    ("SET lock_configuration = false", 2, "allowed, not SET"),
    ("RESET lock_configuration", 2, "allowed, not SET"),
    ("PRAGMA enable_profiling", 2, "allowed, not PRAGMA"),
    ("CALL pragma_version()", 2, "allowed, not CALL"),
    ("CREATE TABLE evil AS SELECT 1", 2, "allowed, not CREATE"),
    ("CREATE TEMP TABLE evil AS SELECT 1", 2, "allowed, not CREATE"),
    ("DELETE FROM jobs", 2, "allowed, not DELETE"),
    ("UPDATE jobs SET num_gpus = 0", 2, "allowed, not UPDATE"),
    ("DROP TABLE jobs", 2, "allowed, not DROP"),
    ("CHECKPOINT", 2, "allowed, not CALL"),
    ("EXPLAIN ANALYZE COPY (SELECT 1) TO '{target}'", 2, "allowed, not EXPLAIN"),
    ("SELECT 1; COPY (SELECT 1) TO '{target}'", 2, "one statement at a time"),
    ("SELECT * FROM query('COPY (SELECT 1) TO ''{target}''')", 2, "query() is not allowed"),
    ("SELECT * FROM query('SELECT * FROM read_text(''{secret}'')')", 2, "is not allowed"),
    ("SELECT getenv('HOME')", 1, "getenv"),
    ("", 2, "no SQL statement"),
    # DuckDB lets a connection read its own open files whatever enable_external_access says:
    # the warehouse and its WAL hold deleted rows' bytes. Refused by parse, before running.
    ("SELECT * FROM read_blob('{warehouse}')", 2, "read_blob() is not allowed"),
    ("SELECT * FROM read_text('{warehouse}')", 2, "read_text() is not allowed"),
    ("SELECT * FROM read_blob('{warehouse}.wal')", 2, "read_blob() is not allowed"),
    ("SELECT * FROM read_text('{warehouse}.wal')", 2, "read_text() is not allowed"),
    ("SELECT * FROM glob('{warehouse}*')", 2, "glob() is not allowed"),
    ("SELECT * FROM read_csv('{warehouse}', all_varchar=true)", 2, "read_csv() is not allowed"),
    ("SELECT * FROM read_parquet('{warehouse}')", 2, "read_parquet() is not allowed"),
    ("SELECT * FROM read_json('{warehouse}.wal')", 2, "read_json() is not allowed"),
    ("SELECT * FROM '{warehouse}.wal'", 2, "is read as a file"),
    ("SELECT (SELECT count(*) FROM read_blob('{warehouse}')) AS n", 2, "is not allowed"),
    ("WITH x AS (SELECT * FROM read_blob('{warehouse}')) SELECT 1", 2, "is not allowed"),
    ("SELECT * FROM jobs, LATERAL (SELECT * FROM read_text('{secret}'))", 2, "is not allowed"),
    ("SELECT * FROM checkpoint()", 2, "checkpoint() is not allowed"),
    ("SELECT * FROM histogram('{warehouse}.wal', x)", 2, "histogram() is not allowed"),
    ("SELECT * FROM query_table('{warehouse}')", 2, "query_table() is not allowed"),
    # Data-changing CTEs parse as a SELECT; refused by parse, not only by the read-only open.
    ("WITH d AS (DELETE FROM jobs RETURNING *) SELECT count(*) FROM d", 2, "data-changing"),
    ("WITH d AS (UPDATE jobs SET num_gpus = 0 RETURNING *) SELECT * FROM d", 2, "data-changing"),
    ("WITH d AS (INSERT INTO jobs SELECT * FROM jobs RETURNING *) SELECT 1", 2, "data-changing"),
]


@pytest.mark.parametrize(("template", "code", "phrase"), ATTACKS)
def test_every_attack_is_refused_and_touches_nothing(
    loaded_warehouse, tmp_path, capsys, template, code, phrase
):
    secret_dir = tmp_path / "private"
    secret_dir.mkdir()
    secret = secret_dir / "passwd.csv"
    secret.write_text(f"user,pw\nroot,{SECRET}\n")
    target = tmp_path / "written.csv"
    sql = template.format(
        warehouse=loaded_warehouse,
        target=target,
        target_dir=tmp_path / "export",
        secret=secret,
        secret_dir=secret_dir,
    )
    before = _digest(loaded_warehouse)
    files_before = sorted(p.name for p in tmp_path.iterdir())

    assert main(["sql", sql]) == code
    out, err = capsys.readouterr()
    assert phrase in err
    assert SECRET not in out and SECRET not in err
    assert "Traceback" not in err
    assert _digest(loaded_warehouse) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == files_before
    # The warehouse still answers afterwards.
    assert main(["sql", "SELECT count(*) AS n FROM jobs", "--format", "csv"]) == 0
    assert capsys.readouterr().out == "n\n4\n"


def test_the_connection_itself_is_locked_even_without_the_statement_check(loaded_warehouse):
    """The second fence alone: DuckDB refuses file access and setting changes on the
    query connection, whatever statement reaches it."""
    import duckdb

    with connect(loaded_warehouse, query_only=True) as con:
        settings = dict(
            con.sql(
                "SELECT name, value FROM duckdb_settings() WHERE name IN ("
                "'enable_external_access', 'lock_configuration', 'allow_community_extensions',"
                " 'autoload_known_extensions', 'autoinstall_known_extensions', "
                "'allow_unsigned_extensions', 'access_mode')"
            ).fetchall()
        )
        assert settings == {
            "enable_external_access": "false",
            "lock_configuration": "true",
            "allow_community_extensions": "false",
            "autoload_known_extensions": "false",
            "autoinstall_known_extensions": "false",
            "allow_unsigned_extensions": "false",
            "access_mode": "read_only",
        }
        for statement in (
            "COPY (SELECT 1) TO '/tmp/schedlab-should-not-exist.csv'",
            "SELECT * FROM read_text('/etc/hostname')",
            "ATTACH '/tmp/schedlab-should-not-exist.duckdb'",
            "LOAD httpfs",
        ):
            with pytest.raises(duckdb.PermissionException):
                con.execute(statement)
        with pytest.raises(duckdb.InvalidInputException, match="configuration"):
            con.execute("SET enable_external_access = true")


def test_select_forms_users_need_still_work(loaded_warehouse, capsys):
    for sql in (
        "SELECT count(*) AS n FROM jobs",
        "WITH a AS (SELECT * FROM jobs) SELECT count(*) AS n FROM a",
        "FROM jobs SELECT count(*) AS n",
        "DESCRIBE jobs",
        "SHOW TABLES",
        "SUMMARIZE jobs",
        "SELECT * FROM leaderboard",
    ):
        assert main(["sql", sql]) == 0, sql
        assert "rows)" in capsys.readouterr().out


def test_run_user_query_refuses_before_running(loaded_warehouse):
    with connect(loaded_warehouse, query_only=True) as con:
        with pytest.raises(QueryRefused, match="COPY"):
            run_user_query(con, "COPY jobs TO 'x.csv'")
        assert run_user_query(con, "SELECT 2 AS x").frame.item() == 2


def test_csv_output_of_nested_and_binary_values(loaded_warehouse, capsys):
    sql = "SELECT [1, 2] AS l, {'a': 1} AS s, 'x'::BLOB AS b, NULL::INTEGER[] AS e"
    assert main(["sql", sql, "--format", "csv"]) == 0
    out, err = capsys.readouterr()
    assert out == 'l,s,b,e\n"[1, 2]","{""a"": 1}",x,\n'
    assert err == ""


def test_ingest_hint_quotes_the_source_id_for_sql_and_shell(warehouse_path, capsys):
    import shlex

    odd = "x'); DROP TABLE jobs; --\"$(touch pwned)`id`"
    path = str(TRACES / "helios_sample.csv")
    assert main(["ingest", path, "--format", "helios", "--source-id", odd]) == 0
    hint = capsys.readouterr().out.splitlines()[-1].strip().removeprefix("see: ")
    argv = shlex.split(hint)
    assert argv[:2] == ["schedlab", "sql"] and len(argv) == 3
    assert main(["sql", argv[2], "--format", "csv"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("record_no,field,reason\n") and len(out.splitlines()) == 5


def test_a_query_past_its_time_limit_is_stopped(loaded_warehouse, capsys):
    import time

    before = _digest(loaded_warehouse)
    start = time.monotonic()
    sql = "SELECT count(*) FROM range(10000000000) WHERE range % 7 = 3"
    assert main(["sql", sql, "--timeout", "1"]) == 1
    assert time.monotonic() - start < 15
    err = capsys.readouterr().err
    assert "ran longer than 1 s and was stopped" in err and "--timeout" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert _digest(loaded_warehouse) == before


def test_a_query_past_its_memory_limit_is_stopped_and_spills_nothing(loaded_warehouse, capsys):
    folder = sorted(p.name for p in loaded_warehouse.parent.iterdir())
    sql = "SELECT list(range) AS l FROM range(100000000)"
    assert main(["sql", sql, "--memory-limit", "100MB"]) == 1
    err = capsys.readouterr().err
    assert "memory limit" in err and "--memory-limit" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in loaded_warehouse.parent.iterdir()) == folder  # no .tmp


def test_the_memory_limit_cannot_be_raised_by_the_query(loaded_warehouse, capsys):
    assert main(["sql", "SET memory_limit = '100GB'", "--memory-limit", "100MB"]) == 2
    capsys.readouterr()
    with connect(loaded_warehouse, query_only=True, memory_limit="100MB") as con:
        assert con.sql("SELECT current_setting('memory_limit')").fetchall()[0][0] == "95.3 MiB"
        assert con.sql("SELECT current_setting('max_temp_directory_size')").fetchall()[0][0] in (
            "0 bytes",
            "0 B",
        )


def test_output_stops_at_max_rows(loaded_warehouse, capsys):
    assert (
        main(["sql", "SELECT range AS i FROM range(10)", "--format", "csv", "--max-rows", "3"]) == 0
    )
    out, err = capsys.readouterr()
    assert out == "i\n0\n1\n2\n"
    assert "stopped at 3 rows" in err


@pytest.mark.parametrize(
    "flags", [["--memory-limit", "abc"], ["--timeout", "-1"], ["--max-rows", "-5"]]
)
def test_bad_limits_are_bad_input(loaded_warehouse, capsys, flags):
    with pytest.raises(SystemExit) as stop:
        main(["sql", "SELECT 1", *flags])
    assert stop.value.code == 2
    assert flags[0] in capsys.readouterr().err
