"""A warehouse that cannot be used says why, with exit 2 and no traceback:
not a DuckDB file, no permission, a read-only folder, a full disk; "busy" is
only ever a real lock conflict, and names who holds the file."""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.cli import main
from tests.conftest import TRACES
from tests.lock_holder import held_open
from warehouse import WarehouseBusy, WarehouseUnusable, classify_error, connect, read_frame

SAMPLE = TRACES / "generic_sample.csv"
MAPPING = TRACES / "generic_sample.toml"
SCHEDLAB = [sys.executable, "-m", "pipelines.cli"]


def _ingest_args(warehouse: Path, path: Path = SAMPLE) -> list[str]:
    return [
        "ingest",
        str(path),
        "--format",
        "generic",
        "--mapping",
        str(MAPPING),
        "--warehouse",
        str(warehouse),
    ]


@pytest.mark.parametrize("content", [b"hello, I am a CSV\n1,2\n", b"\x00" * 5000, b"x"])
def test_a_file_that_is_not_a_duckdb_database(tmp_path, capsys, content):
    # Under a folder named "blocks": the word "lock" in a path must not mean "busy".
    path = tmp_path / "blocks" / "locked.duckdb"
    path.parent.mkdir()
    path.write_bytes(content)
    for argv in (
        ["sql", "SELECT 1", "--warehouse", str(path)],
        ["tables", "--warehouse", str(path)],
        _ingest_args(path),
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert "not a DuckDB database file" in err and str(path) in err
        assert "busy" not in err
    assert path.read_bytes() == content


def test_a_directory_in_place_of_the_warehouse(tmp_path, capsys):
    path = tmp_path / "wh.duckdb"
    path.mkdir()
    assert main(["sql", "SELECT 1", "--warehouse", str(path)]) == 2
    assert "directory" in capsys.readouterr().err


def test_busy_is_only_a_lock_conflict():
    target = Path("/data/blocks/wh.duckdb")
    import duckdb

    lock = duckdb.IOException(
        'IO Error: Could not set lock on file "/data/blocks/wh.duckdb": Conflicting lock is '
        "held in /usr/bin/python3 (PID 4242). See also https://duckdb.org/docs/"
    )
    assert isinstance(classify_error(target, lock), WarehouseBusy)
    for message in (
        'IO Error: Cannot open file "/data/blocks/wh.duckdb": Permission denied',
        'IO Error: The file "/data/blocks/wh.duckdb" exists, but it is not a valid DuckDB '
        "database file!",
        'IO Error: Could not read from file "/srv/locks/wh.duckdb": Is a directory',
    ):
        problem = classify_error(target, duckdb.IOException(message))
        assert isinstance(problem, WarehouseUnusable), message
    # A query's own error is not the file's.
    assert classify_error(target, duckdb.CatalogException("Table lock_table missing")) is None


def test_busy_message_names_the_holder_and_does_not_blame_a_stage(warehouse_path, monkeypatch):
    with connect(warehouse_path):
        pass
    monkeypatch.setenv("SCHEDLAB_LOCK_WAIT_S", "0")
    with held_open(warehouse_path) as reader:
        with pytest.raises(WarehouseBusy) as err:
            with connect(warehouse_path):
                pass
    message = str(err.value)
    assert f"process {reader.pid}" in message
    assert "Retry when that process is done" in message
    assert "a running stage writes it" not in message


# -- the environment refuses: permissions and a full disk, in a child process ---------------


def _no_permission_override() -> None:
    """In the child: give up root's right to ignore file permissions (CAP_DAC_OVERRIDE,
    CAP_DAC_READ_SEARCH, CAP_FOWNER) so a read-only file is read-only even for root."""
    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    pr_capbset_drop = 24
    for cap in (1, 2, 3):
        if libc.prctl(pr_capbset_drop, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def _cli(argv: list[str], preexec=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*SCHEDLAB, *argv], capture_output=True, text=True, preexec_fn=preexec, timeout=300
    )


def _snapshot(warehouse: Path) -> dict:
    with connect(warehouse, read_only=True) as con:
        return {
            table: read_frame(con, f"SELECT * FROM {table} ORDER BY ALL")
            for table in ("trace_sources", "jobs", "quarantine")
        }


def _same(before: dict, after: dict) -> bool:
    return all(after[t].equals(before[t]) for t in before)


@pytest.fixture
def ingested(tmp_path) -> Path:
    warehouse = tmp_path / "wh" / "wh.duckdb"
    helios = ["ingest", str(TRACES / "helios_sample.csv"), "--format", "helios"]
    assert main([*helios, "--warehouse", str(warehouse)]) == 0
    return warehouse


def test_read_only_warehouse_file(ingested, capsys):
    before = _snapshot(ingested)
    ingested.chmod(0o444)
    try:
        done = _cli(_ingest_args(ingested), _no_permission_override)
        query = _cli(
            [
                "sql",
                "SELECT count(*) AS n FROM jobs",
                "--format",
                "csv",
                "--warehouse",
                str(ingested),
            ],
            _no_permission_override,
        )
    finally:
        ingested.chmod(0o644)
    assert done.returncode == 2, done.stderr
    assert "permission denied" in done.stderr and str(ingested) in done.stderr
    assert "Traceback" not in done.stderr
    assert query.returncode == 0 and query.stdout == "n\n4\n"  # reading still works
    assert _same(before, _snapshot(ingested))


def test_read_only_warehouse_folder(ingested):
    before = _snapshot(ingested)
    folder = ingested.parent
    folder.chmod(0o555)
    try:
        into_existing = _cli(_ingest_args(ingested), _no_permission_override)
        new_file = _cli(_ingest_args(folder / "new.duckdb"), _no_permission_override)
        new_folder = _cli(_ingest_args(folder / "sub" / "new.duckdb"), _no_permission_override)
    finally:
        folder.chmod(0o755)
    for done in (into_existing, new_file, new_folder):
        assert done.returncode == 2, done.stderr
        assert "Permission denied" in done.stderr or "permission denied" in done.stderr
        assert "Traceback" not in done.stderr
    assert not (folder / "new.duckdb").exists() and not (folder / "sub").exists()
    assert _same(before, _snapshot(ingested))


def test_full_disk_while_writing(ingested, tmp_path):
    """A file-size limit stands in for a full disk: the write fails the same way (the WAL
    cannot grow), and the stage must leave the warehouse as it was."""
    big = tmp_path / "big.csv"
    rows = [SAMPLE.read_text().splitlines()[0]]
    rows += [f"j{i},1700000000,1700000060,1700003660,60,8,alice,EXIT_OK," for i in range(20000)]
    big.write_text("\n".join(rows) + "\n")
    before = _snapshot(ingested)
    limit = 64 * 1024

    def small_disk() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # write() fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    done = _cli(_ingest_args(ingested, big), small_disk)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "file too large" in done.stderr and "Nothing was changed" in done.stderr
    assert "Traceback" not in done.stderr
    assert _same(before, _snapshot(ingested))


def test_an_open_waits_out_another_threads_closing_of_the_same_file(tmp_path, monkeypatch):
    """Two tasks of one flow (threads of one process): DuckDB refuses an open with "Unique
    file handle conflict" while the other thread's last connection to the file is still
    closing. The open waits that out instead of failing the stage; a conflict that does not
    clear is still raised."""
    import duckdb

    import warehouse.db as db

    path = tmp_path / "wh.duckdb"
    with connect(path):
        pass
    real = duckdb.connect
    refusals = {"left": 3}

    def closing_elsewhere(*args, **kwargs):
        if refusals["left"]:
            refusals["left"] -= 1
            raise duckdb.ConnectionException(
                f'Unique file handle conflict: Cannot attach "wh" - the database file "{path}" '
                'is already attached by database "wh"'
            )
        return real(*args, **kwargs)

    monkeypatch.setattr(db.duckdb, "connect", closing_elsewhere)
    with connect(path) as con:
        assert con.execute("SELECT 42").fetchone() == (42,)
    assert refusals["left"] == 0
    refusals["left"] = 10**6
    monkeypatch.setattr(db, "_CLOSING_WAIT_S", 0.2)
    with pytest.raises(duckdb.Error, match="Unique file handle conflict"), connect(path):
        pass
