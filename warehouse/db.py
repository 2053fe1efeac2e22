"""Opening the warehouse file and running one transaction per stage write."""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb

DEFAULT_PATH = Path("var") / "schedlab.duckdb"
ENV_VAR = "SCHEDLAB_WAREHOUSE"
LOCK_WAIT_ENV = "SCHEDLAB_LOCK_WAIT_S"
DEFAULT_LOCK_WAIT_S = 60.0
"""How long a read-write open waits for other processes' readers to let go."""

# duckdb 2.0 would write storage version 69, which the duckdb CLI (1.5.x) cannot open;
# users query the warehouse from that CLI, so new files are written in the 1.5 format.
_CONNECT_CONFIG = {"storage_compatibility_version": "v1.5.0"}
# A connection that runs SQL someone typed (`schedlab sql`) reads the warehouse and nothing
# else: no file or network access (COPY TO, read_csv, read_text, read_blob, glob, ATTACH),
# no extension installed or loaded, and the configuration locked so no statement can undo
# any of it. DuckDB still opens the warehouse file itself (and its WAL).
QUERY_ONLY_CONFIG = {
    "enable_external_access": False,
    "allow_community_extensions": False,
    "allow_unsigned_extensions": False,
    "autoload_known_extensions": False,
    "autoinstall_known_extensions": False,
    "lock_configuration": True,
}


class WarehouseBusy(RuntimeError):
    """Another process holds the warehouse file; DuckDB allows one writer per file."""


class WarehouseUnusable(RuntimeError):
    """The warehouse file cannot be opened or written at all (not a DuckDB file, no
    permission, a read-only or full file system). Retrying does not help; nothing was
    changed by the operation that raised it."""


class WarehouseCorrupt(WarehouseUnusable):
    """The warehouse file is damaged: a block whose checksum does not match, or a file
    shorter than its own header says. Its message names the file and how to restore it."""


_MAGIC_OFFSET, _MAGIC = 8, b"DUCK"
"""DuckDB's single-file format: bytes 8-11 of every database file (any storage version)."""
# DuckDB's words for a damaged file: a block whose stored checksum does not match its
# bytes, or a read past the end of a truncated file.
_CORRUPTION = re.compile(
    r"Corrupt database file|does not match stored checksum|Could not read enough bytes"
)


# DuckDB's words for "another process holds the file lock" (duckdb 1.x and 2.0). Matched
# on the start of the message, never on a bare "lock": paths such as /data/blocks/ or
# a permission error must not pass for a busy warehouse.
_LOCK_CONFLICT = re.compile(r"Could not set lock on file|Conflicting lock is held")
# Two threads of one process (a flow's concurrent tasks): one opening the file while the
# other's last connection to it is still closing (DuckDB's instance cache then has the file
# attached but cannot hand it out). It clears when that close finishes.
_CLOSING_CONFLICT = "Unique file handle conflict"
_CLOSING_WAIT_S = 30.0
"""How long an open waits out another thread's closing of the same file."""
# File-level failures: the warehouse cannot be used until someone fixes the file or disk.
_FILE_PROBLEMS = (
    ("not a valid DuckDB database file", "it is not a DuckDB database file"),
    ("Is a directory", "it is a directory, not a DuckDB database file"),
    ("Permission denied", "permission denied"),
    ("Read-only file system", "the file system is read-only"),
    ("No space left on device", "the disk is full (no space left on device)"),
    ("Disk quota exceeded", "the disk quota is exceeded"),
    ("File too large", "the file size limit was reached (file too large)"),
    ("Could not write file", "the file could not be written"),
    ("Could not read from file", "the file could not be read"),
)


def resolve_path(path: str | os.PathLike[str] | None = None) -> Path:
    """The warehouse file: explicit path, else $SCHEDLAB_WAREHOUSE, else ./var/schedlab.duckdb."""
    if path is not None:
        return Path(path)
    env = os.environ.get(ENV_VAR)
    return Path(env) if env else DEFAULT_PATH


def files_dir(path: str | os.PathLike[str] | None, kind: str) -> Path:
    """Where the warehouse's files of `kind` ("reports", "evaluations") go:
    `<kind>/<warehouse file stem>/` beside the warehouse, so two warehouses in one folder
    never share or overwrite each other's reports and plots (./var/reports/schedlab/ by
    default)."""
    warehouse = resolve_path(path)
    return warehouse.parent / kind / warehouse.stem


@contextmanager
def connect(
    path: str | os.PathLike[str] | None = None,
    *,
    read_only: bool = False,
    query_only: bool = False,
    memory_limit: str | None = None,
) -> Iterator[duckdb.DuckDBPyConnection]:
    """Open the warehouse, bring its schema up to date (read-write only), close on exit.

    A connection is held only for the duration of one stage's I/O: DuckDB lets a single
    process hold a file read-write, and that blocks readers in other processes.
    `query_only` opens it read-only with `QUERY_ONLY_CONFIG`, for SQL from a user, and with
    `memory_limit` (DuckDB's size syntax, "2GB") bounds its memory and spills nothing to
    disk (a read-only command writes no file, temporary ones included).
    Raises WarehouseBusy (another process holds it) or WarehouseUnusable (not a DuckDB
    file, no permission, full disk), never a bare DuckDB error about the file.
    """
    from warehouse import guard
    from warehouse.migrations import migrate

    read_only = read_only or query_only
    config = {**_CONNECT_CONFIG, **(QUERY_ONLY_CONFIG if query_only else {})}
    if query_only and memory_limit is not None:
        # Set with the rest at open, so lock_configuration keeps any statement from raising it.
        config = {**config, "memory_limit": memory_limit, "max_temp_directory_size": "0KB"}
    target = resolve_path(path)
    if read_only and not target.exists():
        raise FileNotFoundError(
            f"warehouse {target} does not exist yet; run `schedlab run` or `schedlab ingest` first"
        )
    require_duckdb_file(target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WarehouseUnusable(
            f"warehouse {target}: cannot create its folder {target.parent}: {exc.strerror or exc}"
        ) from None
    # A writer waits out short readers (a `schedlab sql` holds the file for a moment) rather
    # than failing a nightly stage; a reader is told at once, with when to retry.
    wait_s = float(os.environ.get(LOCK_WAIT_ENV, DEFAULT_LOCK_WAIT_S)) if not read_only else 0.0
    if target.exists() and not read_only:
        # A checkpoint killed midway: put back what it overwrote first. Only a writer does
        # this: a read-only command never writes or removes a file.
        with guard.path_lock(target), contextlib.suppress(OSError):
            guard.recover(target)
    start = time.monotonic()
    deadline = start + wait_s
    pause = 0.05
    while True:
        try:
            con = duckdb.connect(str(target), read_only=read_only, config=config)
            break
        except duckdb.Error as exc:
            closing = _CLOSING_CONFLICT in str(exc)
            if not (closing and time.monotonic() - start < _CLOSING_WAIT_S):
                problem = classify_error(target, exc)
                if problem is None:
                    raise
                if not isinstance(problem, WarehouseBusy) or time.monotonic() + pause > deadline:
                    raise problem from None
            time.sleep(pause)
            pause = min(pause * 2, 1.0)
    try:
        if not read_only:
            migrate(con)
        yield con
    except duckdb.Error as exc:
        # A write that fails on the file itself (disk full, read-only file system) is the
        # file's problem, not the stage's: say so instead of a traceback. DuckDB rolled the
        # transaction back, so nothing of it was stored.
        problem = classify_error(target, exc)
        if problem is None:
            raise
        raise problem from None
    finally:
        # Closing checkpoints the WAL; when the disk is full that fails too, and the error
        # already raised (or the committed WAL, replayed on the next open) is what matters.
        # That checkpoint rewrites metadata blocks in place: `guard.closing` keeps what they
        # held until it is done, so a kill midway cannot leave a torn block.
        with contextlib.suppress(duckdb.Error):
            if read_only:
                con.close()
            else:
                with guard.path_lock(target), guard.closing(con, target):
                    con.close()


def require_duckdb_file(target: Path) -> None:
    """WarehouseUnusable unless `target` is missing, empty (DuckDB makes a new database of
    both) or starts like a DuckDB file. Checked before DuckDB sees the file: given a SQLite
    or other file, DuckDB would try to find (and download) an extension that reads it."""
    try:
        with open(target, "rb") as file:
            head = file.read(16)  # SQLite's magic is 16 bytes long
    except FileNotFoundError:
        return
    except IsADirectoryError:
        raise WarehouseUnusable(
            f"warehouse {target} cannot be used: it is a directory, not a DuckDB database "
            "file. Nothing was changed."
        ) from None
    except OSError as exc:
        raise WarehouseUnusable(
            f"warehouse {target} cannot be used: {exc.strerror or exc}. Nothing was changed."
        ) from None
    if head and head[_MAGIC_OFFSET : _MAGIC_OFFSET + len(_MAGIC)] != _MAGIC:
        kind = " (it is a SQLite database)" if head.startswith(b"SQLite format 3") else ""
        raise WarehouseUnusable(
            f"warehouse {target} cannot be used: it is not a DuckDB database file{kind}. "
            "Nothing was changed."
        )


def corrupt_message(target: Path, detail: str) -> str:
    """What to tell a user whose warehouse file is damaged: which file, DuckDB's words, and
    how to restore it (or put back an interrupted write's blocks)."""
    from warehouse import guard

    lines = [
        f"warehouse {target} is damaged: {detail}",
        "Nothing was changed. Restore the last good backup with "
        f"`schedlab restore BACKUP --warehouse {target}` (backups are in "
        f"{backups_dir(target)}; see docs/operations.md).",
    ]
    if guard.guard_files(target):
        lines.append(
            "A recovery file of an interrupted write is beside it: "
            f"`schedlab check --warehouse {target}` puts it back first."
        )
    return "\n".join(lines)


def backups_dir(path: str | os.PathLike[str] | None) -> Path:
    """Where `schedlab backup` and the nightly run keep the warehouse's backups:
    `backups/<warehouse file stem>/` beside it."""
    return files_dir(path, "backups")


def _about_the_warehouse(target: Path, message: str) -> bool:
    """Whether every file a DuckDB error names is the warehouse or its WAL: a truncated
    trace file read by an ingest must not pass for a damaged warehouse."""
    named = re.findall(r'file "([^"]+)"', message)
    own = {os.path.abspath(target), os.path.abspath(f"{target}.wal")}
    return all(os.path.abspath(name) in own for name in named)


def classify_error(target: Path, exc: Exception) -> WarehouseBusy | WarehouseUnusable | None:
    """The warehouse-level meaning of a DuckDB error, or None if it is the query's own.

    A lock conflict is `WarehouseBusy`; a damaged file (checksum mismatch, truncated) is
    `WarehouseCorrupt`; a file that is not a database, a permission problem or a full disk
    is `WarehouseUnusable`, each with a message saying what to do.
    """
    message = str(exc)
    if _CORRUPTION.search(message) and _about_the_warehouse(target, message):
        return WarehouseCorrupt(corrupt_message(target, message.strip().splitlines()[0]))
    if _LOCK_CONFLICT.search(message):
        pid = re.search(r"\(PID (\d+)\)", message)
        holder = f"process {pid.group(1)}" if pid else "another process"
        what = _describe_process(int(pid.group(1))) if pid else None
        if what:
            holder += f" ({what})"
        return WarehouseBusy(
            f"warehouse {target} is busy: {holder} has it open (a `schedlab run` stage "
            "writing it, or another command reading or writing it). Retry when that process "
            "is done; nothing was read or changed."
        )
    if not isinstance(
        exc, duckdb.IOException | duckdb.TransactionException | duckdb.FatalException
    ):
        return None
    for needle, meaning in _FILE_PROBLEMS:
        if needle in message:
            return WarehouseUnusable(
                f"warehouse {target} cannot be used: {meaning}. Nothing was changed. "
                f"(DuckDB: {message.strip().splitlines()[0]})"
            )
    return None


def _describe_process(pid: int) -> str | None:
    """A short command line of a local process (Linux /proc), for the busy message."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    words = [w.decode(errors="replace") for w in raw.split(b"\0") if w]
    if not words:
        return None
    # `python -m pipelines.cli sql ...` or `.venv/bin/schedlab sql ...`: name the verb.
    for index, word in enumerate(words):
        if word.endswith("schedlab") or word == "pipelines.cli":
            return " ".join(["schedlab", *words[index + 1 : index + 2]])
    return Path(words[0]).name


@contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """BEGIN ... COMMIT, or ROLLBACK on any exception so the warehouse is left as it was."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield con
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")
