"""The warehouse file stays whole and private: a read-only command writes nothing (planted
recovery files included), deleted rows leave no bytes, damage is reported with the restore
command, backups round-trip, a non-DuckDB file is refused before DuckDB sees it, and the
schema lets `UPDATE policies` run."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import struct
from pathlib import Path

import duckdb
import pytest

from pipelines.cli import main
from tests.conftest import TRACES
from tests.lock_holder import held_open
from warehouse import connect, guard, read_frame, transaction
from warehouse.maintenance import backups, prune_backups

SAMPLE = TRACES / "generic_sample.csv"
MAPPING = TRACES / "generic_sample.toml"
BLOCK = 262144


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _ingest(warehouse: Path, trace: Path = SAMPLE, source_id: str | None = None) -> list[str]:
    argv = ["ingest", str(trace), "--format", "generic", "--mapping", str(MAPPING)]
    argv += ["--warehouse", str(warehouse)]
    if source_id:
        argv += ["--source-id", source_id]
    return argv


@pytest.fixture
def ingested(tmp_path, capsys) -> Path:
    path = tmp_path / "wh.duckdb"
    assert main(_ingest(path)) == 0
    capsys.readouterr()
    return path


def _planted_guard(target: Path, identity: tuple[int, int] | None, payload: bytes) -> bytes:
    """A self-consistent guard (magic, sizes, sha256) that would write `payload` over
    block 0 of `target` if it were applied; `identity` None: the format without the
    warehouse file's device and inode."""
    headers = target.read_bytes()[: guard.HEADERS]  # matches: "the checkpoint never ended"
    data = payload * (BLOCK // len(payload))
    if identity is None:
        fixed = struct.pack("<8sQQ", b"SLGUARD1", BLOCK, 1)
    else:
        fixed = struct.pack("<8sQQQQ", b"SLGUARD2", identity[0], identity[1], BLOCK, 1)
    body = fixed + headers + struct.pack("<Q", 0) + data
    return body + hashlib.sha256(body).digest()


def test_a_read_only_command_never_applies_or_removes_planted_files(ingested, capsys):
    st = ingested.stat()
    planted = {
        ingested.with_name(f"{ingested.name}.guard-{os.getpid() + n}-0"): identity
        for n, identity in ((1, (st.st_dev, st.st_ino)), (2, None))
    }
    for path, identity in planted.items():
        path.write_bytes(_planted_guard(ingested, identity, b"ATTACKER"))
        os.chmod(path, 0o600)  # everything a real guard is, but no process of ours wrote it
    notes = ingested.with_name(f"{ingested.name}.guard-notes-1")
    notes.write_text("my notes, not a guard\n")
    planted_bytes = {path: path.read_bytes() for path in planted}
    before = _digest(ingested)

    for argv in (
        ["sql", "SELECT count(*) AS n FROM jobs", "--warehouse", str(ingested)],
        ["tables", "--warehouse", str(ingested)],
    ):
        assert main(argv) == 0
        assert _digest(ingested) == before
        assert {path: path.read_bytes() for path in planted} == planted_bytes
        assert notes.read_text() == "my notes, not a guard\n"
    capsys.readouterr()


@pytest.mark.parametrize("why", ["other inode", "world-readable", "old format"])
def test_a_writer_leaves_a_guard_that_is_not_provably_its_own(ingested, capsys, why):
    st = ingested.stat()
    identity = (st.st_dev, st.st_ino + 1) if why == "other inode" else (st.st_dev, st.st_ino)
    image = _planted_guard(ingested, identity, b"ATTACKER")
    if why == "old format":
        image = _planted_guard(ingested, None, b"ATTACKER")
    planted = ingested.with_name(f"{ingested.name}.guard-{os.getpid() + 1}-0")
    planted.write_bytes(image)
    os.chmod(planted, 0o644 if why == "world-readable" else 0o600)
    notes = ingested.with_name(f"{ingested.name}.guard-notes-1")
    notes.write_text("notes\n")

    assert main(_ingest(ingested, source_id="second")) == 0  # a writer: it checks guards
    capsys.readouterr()
    assert planted.read_bytes() == image and notes.read_text() == "notes\n"
    assert b"ATTACKER" * 4 not in ingested.read_bytes()
    assert main(["check", "--warehouse", str(ingested)]) == 0


def test_delete_source_leaves_no_byte_of_the_deleted_rows(tmp_path, capsys):
    marker = "zq-marker-7f3a9c-must-vanish"
    trace = tmp_path / "marked.csv"
    lines = SAMPLE.read_text().splitlines()
    # The marker in every row's user and model: bytes of jobs rows, not of a source name.
    trace.write_text(
        "\n".join([lines[0], *(line.replace("alice", marker) for line in lines[1:])]) + "\n"
    )
    path = tmp_path / "wh.duckdb"
    assert main(_ingest(path, SAMPLE, source_id="kept")) == 0
    assert main(_ingest(path, trace, source_id="gone")) == 0
    capsys.readouterr()
    assert marker.encode() in path.read_bytes()
    mode = path.stat().st_mode & 0o777

    assert main(["delete-source", "gone", "--yes", "--warehouse", str(path)]) == 0
    assert "rewritten" in capsys.readouterr().out
    for file in (path, path.with_name(path.name + ".wal")):
        if file.exists():
            assert marker.encode() not in file.read_bytes(), file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["marked.csv", "wh.duckdb"]
    assert path.stat().st_mode & 0o777 == mode
    # The rewritten warehouse is whole: the other source, its schema and migrations.
    with connect(path, read_only=True) as con:
        assert read_frame(con, "SELECT source_id FROM trace_sources")["source_id"].to_list() == [
            "kept"
        ]
        [(n,)] = con.execute("SELECT count(*) FROM schema_migrations").fetchall()
        assert n >= 20
        rewritten = _schema(con)
    with connect(tmp_path / "fresh.duckdb") as con:
        assert rewritten == _schema(con)  # constraints, keys and views as migrations made them
    assert main(["check", "--warehouse", str(path)]) == 0


def test_without_purge_the_deleted_bytes_stay(tmp_path, capsys):
    """The control for the test above: the byte search does find deleted rows' bytes."""
    marker = "zq-marker-control-5521"
    trace = tmp_path / "marked.csv"
    lines = SAMPLE.read_text().splitlines()
    trace.write_text("\n".join([lines[0], *(ln.replace("alice", marker) for ln in lines[1:])]))
    path = tmp_path / "wh.duckdb"
    assert main(_ingest(path, trace, source_id="gone")) == 0
    assert main(["delete-source", "gone", "--yes", "--no-purge", "--warehouse", str(path)]) == 0
    capsys.readouterr()
    assert marker.encode() in path.read_bytes()


def _schema(con) -> list[tuple]:
    """Every table's and view's SQL and every constraint, in a stable order."""
    return con.execute(
        "SELECT 'table', table_name, sql FROM duckdb_tables() WHERE database_name = "
        "current_database() UNION ALL SELECT 'view', view_name, sql FROM duckdb_views() "
        "WHERE NOT internal AND database_name = current_database() UNION ALL "
        "SELECT constraint_type, table_name, constraint_text FROM duckdb_constraints() "
        "WHERE database_name = current_database() ORDER BY ALL"
    ).fetchall()


def _data_block(path: Path) -> int:
    """A block holding jobs column data (not metadata)."""
    with connect(path, read_only=True) as con:
        rows = con.execute(
            "SELECT DISTINCT block_id FROM pragma_storage_info('jobs') WHERE block_id >= 0 "
            "AND block_id NOT IN (SELECT block_id FROM pragma_metadata_info()) ORDER BY 1"
        ).fetchall()
    assert rows
    return int(rows[0][0])


def test_flipped_bytes_in_a_data_block_stop_with_the_restore_command(ingested, capsys):
    block = _data_block(ingested)
    with open(ingested, "r+b") as file:
        file.seek(guard.HEADERS + block * BLOCK + 100)
        file.write(bytes(16))
        file.seek(guard.HEADERS + block * BLOCK + 100)
        file.write(b"\xa5" * 16)
    damaged = _digest(ingested)
    for argv in (
        ["check", "--warehouse", str(ingested)],
        ["sql", "SELECT * FROM jobs", "--warehouse", str(ingested)],
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert "is damaged" in err and str(ingested) in err, err
        assert "schedlab restore" in err and "Traceback" not in err
    assert _digest(ingested) == damaged


@pytest.mark.parametrize("keep", [100, 5000, 13000])
def test_a_truncated_file_stops_with_exit_2(ingested, capsys, keep):
    os.truncate(ingested, keep)
    for argv in (
        ["sql", "SELECT count(*) FROM jobs", "--warehouse", str(ingested)],
        _ingest(ingested, source_id="more"),
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert str(ingested) in err and "Traceback" not in err
        assert "damaged" in err or "not a DuckDB database file" in err, err
    assert ingested.stat().st_size == keep


def test_backup_and_restore_round_trip(ingested, tmp_path, capsys):
    with connect(ingested, read_only=True) as con:
        jobs = con.execute("SELECT count(*) FROM jobs").fetchall()[0][0]
    copy = tmp_path / "copies" / "one.duckdb"
    assert main(["backup", "--to", str(copy), "--warehouse", str(ingested)]) == 0
    assert str(copy) in capsys.readouterr().out
    assert copy.stat().st_mode & 0o077 == 0
    assert main(["backup", "--to", str(copy), "--warehouse", str(ingested)]) == 2  # exists
    assert "already exists" in capsys.readouterr().err

    # Damage the warehouse, then restore: everything backed up is back.
    block = _data_block(ingested)
    with open(ingested, "r+b") as file:
        file.seek(guard.HEADERS + block * BLOCK + 100)
        file.write(os.urandom(16))
    assert main(["check", "--warehouse", str(ingested)]) == 2
    capsys.readouterr()
    # The damaged file's recovery file and WAL belong to it, never to the restored one.
    saved = ingested.with_name(f"{ingested.name}.guard-1-1")
    saved.write_bytes(b"blocks of the damaged file")
    os.chmod(saved, 0o600)
    ingested.with_name(f"{ingested.name}.wal").write_bytes(b"log of the damaged file")
    assert main(["restore", str(copy), "--warehouse", str(ingested)]) == 0
    assert "restored" in capsys.readouterr().out
    aside = ingested.with_name(ingested.name + ".before-restore")
    assert aside.exists() and aside.with_name(aside.name + ".guard-1-1").exists()
    assert aside.with_name(aside.name + ".wal").read_bytes() == b"log of the damaged file"
    assert not saved.exists() and not ingested.with_name(f"{ingested.name}.wal").exists()
    assert main(["check", "--warehouse", str(ingested)]) == 0
    sql = ["sql", "SELECT count(*) AS n FROM jobs", "--format", "csv"]
    assert main([*sql, "--warehouse", str(ingested)]) == 0
    assert capsys.readouterr().out.endswith(f"n\n{jobs}\n")


def test_restore_refuses_a_damaged_or_foreign_backup_and_changes_nothing(
    ingested, tmp_path, capsys
):
    before = _digest(ingested)
    not_duckdb = tmp_path / "notes.duckdb"
    not_duckdb.write_text("hello\n" * 100)
    truncated = tmp_path / "cut.duckdb"
    truncated.write_bytes(ingested.read_bytes()[:20000])
    for bad in (not_duckdb, truncated, tmp_path / "missing.duckdb"):
        code = main(["restore", str(bad), "--warehouse", str(ingested)])
        assert code in (1, 2), bad
        err = capsys.readouterr().err
        assert str(bad) in err and "Traceback" not in err
    assert _digest(ingested) == before
    assert not ingested.with_name(ingested.name + ".before-restore").exists()


def test_backups_kept_are_bounded(ingested, monkeypatch, capsys):
    from pipelines.flows import nightly_backup
    from pipelines.progress import QUIET

    monkeypatch.setenv("SCHEDLAB_BACKUPS", "2")
    made = [nightly_backup(str(ingested), QUIET) for _ in range(4)]
    kept = backups(ingested)
    assert [str(p) for p in kept] == made[-2:]
    assert prune_backups(ingested, 1) == kept[:1]
    monkeypatch.setenv("SCHEDLAB_BACKUPS", "0")
    assert nightly_backup(str(ingested), QUIET) is None


def test_a_sqlite_file_is_refused_before_duckdb_sees_it(tmp_path, capsys):
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as lite:
        lite.execute("CREATE TABLE t (x)")
    lite.close()
    before = _digest(path)
    for argv in (
        ["sql", "SELECT 1", "--warehouse", str(path)],
        ["tables", "--warehouse", str(path)],
        _ingest(path),
        ["backup", "--warehouse", str(path)],
        ["check", "--warehouse", str(path)],
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert "not a DuckDB database file (it is a SQLite database)" in err
        assert str(path) in err and "extension" not in err.lower()
    assert _digest(path) == before


def test_update_policies_works_on_a_migrated_warehouse(tmp_path):
    path = tmp_path / "wh.duckdb"
    with connect(path) as con, transaction(con):
        con.execute(
            "INSERT INTO policies VALUES ('p1', 'dl2', '{}', NULL, '[]', '{}', 'x', "
            "repeat('a', 64), TIMESTAMP '2026-01-01', 'v1')"
        )
    # A plain connection, as the duckdb CLI would open it: no schedlab code in the way.
    con = duckdb.connect(str(path))
    try:
        con.execute("UPDATE policies SET code_version = 'v2' WHERE policy_id = 'p1'")
        assert con.execute("SELECT code_version FROM policies").fetchall() == [("v2",)]
        assert con.execute("SELECT count(*) FROM learning_curves").fetchall() == [(0,)]
    finally:
        con.close()


def test_restore_waits_for_no_one_and_changes_nothing_while_the_warehouse_is_open(
    ingested, tmp_path, capsys
):
    copy = tmp_path / "copy.duckdb"
    assert main(["backup", "--to", str(copy), "--warehouse", str(ingested)]) == 0
    capsys.readouterr()
    before = _digest(ingested)
    with held_open(ingested):
        assert main(["restore", str(copy), "--warehouse", str(ingested)]) == 3
        assert "busy" in capsys.readouterr().err
    assert _digest(ingested) == before
    assert sorted(p.name for p in ingested.parent.iterdir()) == ["copy.duckdb", "wh.duckdb"]


def test_a_short_read_of_another_file_is_not_a_damaged_warehouse(tmp_path):
    from warehouse import WarehouseCorrupt, classify_error

    target = tmp_path / "wh.duckdb"
    other = duckdb.IOException(
        f'IO Error: Could not read enough bytes from file "{tmp_path / "trace.parquet"}": '
        "attempted to read 4096 bytes from location 0"
    )
    assert not isinstance(classify_error(target, other), WarehouseCorrupt)
    own = duckdb.IOException(
        f'IO Error: Could not read enough bytes from file "{target}": attempted to read 4096 '
        "bytes from location 5000"
    )
    assert isinstance(classify_error(target, own), WarehouseCorrupt)
