"""A writer killed in the middle of DuckDB's closing checkpoint leaves a warehouse that the
next writer opens with everything it committed.

DuckDB rewrites its metadata block 0 (256 KiB at byte 12288) in place at every checkpoint,
before the header that makes the checkpoint current. A SIGKILL landing while the kernel
copies the first pages of that write leaves a short write, and every later open failed with
"Corrupt database file: computed checksum ... in block at location 12288". Landing a real
kill inside a 60-microsecond write is luck, so the child here runs with a small LD_PRELOAD
library that turns that write into exactly what such a kill leaves: its first page written,
then SIGKILL (`warehouse/guard.py`)."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from warehouse import WarehouseCorrupt, connect, read_frame, transaction
from warehouse.guard import closing, guard_files

# The Nth 256 KiB pwrite at byte TORN_OFFSET writes its first TORN_BYTES bytes, then SIGKILL.
TORN_WRITE_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/types.h>
#include <unistd.h>
static int seen = 0;
static ssize_t torn(int fd, const void *buf, size_t n, off_t off) {
    static ssize_t (*real)(int, const void *, size_t, off_t) = 0;
    if (!real) real = dlsym(RTLD_NEXT, "pwrite64");
    if (n == 262144 && off == atoll(getenv("TORN_OFFSET")) && ++seen == atoi(getenv("TORN_AT"))) {
        real(fd, buf, (size_t)atoll(getenv("TORN_BYTES")), off);
        kill(getpid(), SIGKILL);
        pause();
    }
    return real(fd, buf, n, off);
}
ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off) { return torn(fd, buf, n, off); }
ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) { return torn(fd, buf, n, off); }
"""

WRITER = textwrap.dedent(
    """
    import sys
    from warehouse import connect, transaction
    with connect(sys.argv[1]) as con, transaction(con):
        con.execute("INSERT INTO kept SELECT range + 1000, 'second' FROM range(500)")
    """
)


@pytest.fixture(scope="module")
def torn_write(tmp_path_factory) -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if sys.platform != "linux" or compiler is None:
        pytest.skip("needs Linux and a C compiler for the LD_PRELOAD library")
    folder = tmp_path_factory.mktemp("torn")
    (folder / "torn.c").write_text(TORN_WRITE_C)
    library = folder / "torn.so"
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-o", str(library), str(folder / "torn.c"), "-ldl"],
        check=True,
    )
    return library


def _first_run(path: Path) -> None:
    with connect(path) as con, transaction(con):
        con.execute("CREATE TABLE kept (id INTEGER, what VARCHAR)")
        con.execute("INSERT INTO kept SELECT range, 'first' FROM range(500)")


def _rows(path: Path) -> dict[str, int]:
    with connect(path, read_only=True) as con:
        frame = read_frame(con, "SELECT what, count(*) AS n FROM kept GROUP BY what")
    return dict(zip(frame["what"], frame["n"], strict=True))


@pytest.mark.parametrize("torn_bytes", [8, 4096])
def test_killed_midway_through_the_closing_checkpoint(tmp_path, torn_write, torn_bytes):
    path = tmp_path / "wh.duckdb"
    _first_run(path)
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
        "LD_PRELOAD": str(torn_write),
        "TORN_OFFSET": "12288",  # block 0, rewritten in place by every checkpoint
        "TORN_AT": "1",
        "TORN_BYTES": str(torn_bytes),
    }
    child = subprocess.run([sys.executable, "-c", WRITER, str(path)], env=env, check=False)
    assert child.returncode == -signal.SIGKILL  # killed inside the block-0 write
    assert path.with_name(path.name + ".wal").exists()  # the checkpoint never became current

    # A reader never writes: it reports the damage, names the fix, and changes nothing.
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    with pytest.raises(WarehouseCorrupt, match="schedlab check") as caught:
        _rows(path)
    assert str(path) in str(caught.value) and "schedlab restore" in str(caught.value)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    assert len(guard_files(path)) == 1

    # The next writer puts the blocks back; both transactions were committed before the
    # kill: both are there.
    with connect(path):
        pass
    assert guard_files(path) == []
    assert _rows(path) == {"first": 500, "second": 500}
    # ... and the warehouse goes on: written, closed (checkpointed) and read again.
    with connect(path) as con, transaction(con):
        con.execute("INSERT INTO kept SELECT range + 2000, 'third' FROM range(500)")
    assert _rows(path) == {"first": 500, "second": 500, "third": 500}
    assert not path.with_name(path.name + ".wal").exists()


def test_a_guard_whose_checkpoint_completed_is_removed_untouched(tmp_path):
    """A writer killed after its checkpoint's header was written (before it removed its
    guard): the file is current and must not be put back to the guard's blocks."""
    path = tmp_path / "wh.duckdb"
    _first_run(path)
    with connect(path) as con:
        with transaction(con):
            con.execute("INSERT INTO kept SELECT range + 1000, 'second' FROM range(500)")
        with closing(con, path):
            # What a writer killed right after this close returned leaves: its guard.
            [guard] = guard_files(path)
            os.link(guard, path.with_name(f"{path.name}.guard-{os.getpid()}-999999"))
            con.close()
    assert len(guard_files(path)) == 1
    before = path.read_bytes()
    with connect(path):  # a writer: it checks the guard
        pass
    assert guard_files(path) == []
    assert path.read_bytes() == before
    assert _rows(path) == {"first": 500, "second": 500}


def test_a_torn_warehouse_from_the_command_line(tmp_path, torn_write, capsys):
    """`schedlab sql` on a torn warehouse changes nothing and names `schedlab check`, which
    puts the blocks back; the warehouse then answers again."""
    from pipelines.cli import main

    path = tmp_path / "wh.duckdb"
    _first_run(path)
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
        "LD_PRELOAD": str(torn_write),
        "TORN_OFFSET": "12288",
        "TORN_AT": "1",
        "TORN_BYTES": "4096",
    }
    child = subprocess.run([sys.executable, "-c", WRITER, str(path)], env=env, check=False)
    assert child.returncode == -signal.SIGKILL
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    [saved] = guard_files(path)

    sql = ["sql", "SELECT what, count(*) AS n FROM kept GROUP BY ALL ORDER BY 1"]
    assert main([*sql, "--warehouse", str(path)]) == 2
    err = capsys.readouterr().err
    assert "is damaged" in err and f"schedlab check --warehouse {path}" in err
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    assert guard_files(path) == [saved]

    assert main(["check", "--warehouse", str(path)]) == 0
    assert guard_files(path) == []
    assert main([*sql, "--format", "csv", "--warehouse", str(path)]) == 0
    assert capsys.readouterr().out.endswith("what,n\nfirst,500\nsecond,500\n")
