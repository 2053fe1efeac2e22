"""Keeping the warehouse file whole: verify it, back it up, restore it, rewrite it.

- `verify` reads every column of every table, so DuckDB checks every data block's checksum
  (a block is checked only when read: a damaged block no command reads stays silent).
- `backup` checkpoints and verifies the warehouse, then copies the file while it holds it
  (no other process can write it meanwhile), and verifies the copy opens and reads whole.
- `restore` verifies a backup, then swaps it in with one rename, keeping the replaced
  file beside it as `<warehouse>.before-restore`.
- `compact` rewrites the warehouse into a new file (COPY FROM DATABASE) and swaps it in:
  rows deleted from the old file leave no bytes in the new one.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import duckdb

from warehouse.db import (
    WarehouseBusy,
    WarehouseCorrupt,
    WarehouseUnusable,
    backups_dir,
    connect,
    require_duckdb_file,
    resolve_path,
)

BACKUPS_ENV = "SCHEDLAB_BACKUPS"
DEFAULT_BACKUPS_KEPT = 3
"""How many backups the nightly run keeps (the newest); $SCHEDLAB_BACKUPS overrides it."""
_STORAGE_VERSION = "v1.5.0"  # the warehouse's format: the duckdb 1.5 CLI opens it


@dataclass(frozen=True)
class Verified:
    """A file that opened and read whole: rows per table."""

    path: Path
    rows: dict[str, int]


def verify_connection(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Read every column of every table of the open database (so DuckDB verifies every
    block's checksum); rows per table. duckdb.Error on a damaged block."""
    tables = [
        name
        for (name,) in con.execute(
            "SELECT table_name FROM duckdb_tables() "
            "WHERE database_name = current_database() ORDER BY table_name"
        ).fetchall()
    ]
    rows = {}
    for table in tables:
        # max(hash(...)) of every column makes DuckDB read every column's blocks; a count
        # alone reads none of them.
        quoted = '"' + table.replace('"', '""') + '"'
        [(count, *_)] = con.execute(
            f"SELECT count(*), max(hash(COLUMNS(*))) FROM {quoted}"
        ).fetchall()
        rows[table] = int(count)
    return rows


def verify(path: str | os.PathLike[str] | None) -> Verified:
    """Open the warehouse read-only and read it whole. WarehouseCorrupt (naming the file and
    the restore command) when a block is damaged or the file truncated."""
    target = resolve_path(path)
    with connect(target, read_only=True) as con:
        return Verified(target, verify_connection(con))


def check(path: str | os.PathLike[str] | None) -> Verified:
    """`schedlab check`: put back an interrupted write's blocks if a recovery file of this
    warehouse is beside it (a writer's open does that), then read it whole (`verify`)."""
    from warehouse import guard

    target = resolve_path(path)
    if not target.exists():
        raise FileNotFoundError(f"warehouse {target} does not exist")
    if guard.guard_files(target):
        with connect(target):
            pass
    return verify(target)


def _copy_fd(fd: int, dest: Path) -> None:
    """Copy the whole open file `fd` to a new private file `dest`, flushed to disk."""
    out = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        size = os.fstat(fd).st_size
        at = 0
        while at < size:
            chunk = os.pread(fd, min(1 << 22, size - at), at)
            if not chunk:
                break
            view = memoryview(chunk)
            while view:
                view = view[os.write(out, view) :]
            at += len(chunk)
        os.fsync(out)
    finally:
        os.close(out)


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _swap_in(tmp: Path, target: Path) -> None:
    """Rename the finished file `tmp` over `target` and make the rename durable."""
    os.replace(tmp, target)
    _fsync_dir(target.parent)


@contextlib.contextmanager
def _dropped_on_failure(*temporaries: Path) -> Iterator[None]:
    """Delete the temporary files when the block fails in any way (an interrupt too), so
    a failed backup, restore or compaction leaves nothing behind; the error propagates."""
    try:
        yield
    except BaseException:
        for tmp in temporaries:
            with contextlib.suppress(OSError):
                tmp.unlink()
        raise


def default_backup_path(path: str | os.PathLike[str] | None) -> Path:
    """`backups/<stem>/<stem>-<UTC time>.duckdb` beside the warehouse."""
    target = resolve_path(path)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    return backups_dir(target) / f"{target.stem}-{stamp}.duckdb"


def backup(path: str | os.PathLike[str] | None, dest: str | os.PathLike[str] | None = None) -> Path:
    """Copy the warehouse to `dest` (default `default_backup_path`), consistently: it is
    checkpointed and read whole first (a damaged warehouse is not backed up; the error names
    it), copied while held, and the copy is verified. Returns the backup's path."""
    target = resolve_path(path)
    if not target.exists():
        raise FileNotFoundError(f"warehouse {target} does not exist")
    out = Path(dest) if dest is not None else default_backup_path(target)
    if out.exists():
        raise FileExistsError(f"backup {out} already exists; name another file")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    fd = None
    try:
        with _dropped_on_failure(tmp):
            with connect(target) as con:
                # After CHECKPOINT the file alone holds everything committed; holding the
                # connection keeps every other process from writing until the copy is done.
                con.execute("CHECKPOINT")
                verify_connection(con)
                # Closed only after DuckDB closes the file: closing a descriptor drops this
                # process's POSIX locks on the file, DuckDB's included.
                fd = os.open(target, os.O_RDONLY)
                _copy_fd(fd, tmp)
            verify(tmp)
            _swap_in(tmp, out)
    finally:
        if fd is not None:
            os.close(fd)
    return out


def backups(path: str | os.PathLike[str] | None) -> list[Path]:
    """The warehouse's backups in the default folder, oldest first."""
    target = resolve_path(path)
    pattern = re.compile(re.escape(target.stem) + r"-\d{8}T\d{6}\d*Z\.duckdb")
    folder = backups_dir(target)
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if pattern.fullmatch(p.name))


def prune_backups(path: str | os.PathLike[str] | None, keep: int) -> list[Path]:
    """Remove all but the newest `keep` backups of the default folder; the removed ones."""
    found = backups(path)
    gone = found[: max(len(found) - keep, 0)] if keep > 0 else []
    for old in gone:
        old.unlink()
    return gone


def backups_kept() -> int:
    """How many backups the nightly run keeps: $SCHEDLAB_BACKUPS, else 3 (0: no backup)."""
    raw = os.environ.get(BACKUPS_ENV)
    if raw is None or raw == "":
        return DEFAULT_BACKUPS_KEPT
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"${BACKUPS_ENV} must be a whole number, not {raw!r}") from None
    if value < 0:
        raise ValueError(f"${BACKUPS_ENV} must be 0 or more, not {value}")
    return value


@contextlib.contextmanager
def _holding(target: Path):
    """Hold the whole-file lock DuckDB takes on `target` (if it exists), so no process has
    it open while it is swapped; WarehouseBusy if one does."""
    try:
        fd = os.open(target, os.O_RDWR)
    except FileNotFoundError:
        yield
        return
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EAGAIN):
                raise WarehouseBusy(
                    f"warehouse {target} is busy: another process has it open. Retry when "
                    "it is done; nothing was changed."
                ) from None
            raise
        yield
    finally:
        os.close(fd)


def restore(path: str | os.PathLike[str] | None, source: str | os.PathLike[str]) -> Verified:
    """Put the backup `source` in place of the warehouse: the backup is read whole first (a
    damaged or non-DuckDB file is refused and nothing changes), copied beside the warehouse,
    and renamed over it while no process has it open. The replaced file (and its WAL and
    recovery files, which belong to it alone) is kept as `<warehouse>.before-restore`."""
    from warehouse import guard

    target = resolve_path(path)
    backup_path = Path(source)
    if not backup_path.is_file():
        raise FileNotFoundError(f"backup {backup_path} does not exist")
    if backup_path.resolve() == target.resolve():
        raise ValueError(f"{backup_path} is the warehouse itself, not a backup of it")
    require_duckdb_file(backup_path)
    if backup_path.stat().st_size == 0:
        raise WarehouseUnusable(f"backup {backup_path} is empty; nothing was changed")
    try:
        checked = verify(backup_path)
    except WarehouseCorrupt as exc:
        raise WarehouseCorrupt(
            f"backup {backup_path} is damaged, so it was not restored; nothing was changed. "
            f"Try an older backup. ({str(exc).splitlines()[0]})"
        ) from None
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.restore-{os.getpid()}")
    src = os.open(backup_path, os.O_RDONLY)
    try:
        _copy_fd(src, tmp)
    finally:
        os.close(src)
    with _dropped_on_failure(tmp), _holding(target):
        aside = target.with_name(f"{target.name}.before-restore")
        wal = target.with_name(f"{target.name}.wal")
        if target.exists():
            with contextlib.suppress(FileNotFoundError):
                aside.unlink()
            os.link(target, aside)
        # A WAL replays onto the file it was written for only: never onto the backup.
        if wal.exists():
            os.replace(wal, aside.with_name(f"{aside.name}.wal"))
        # So do recovery files: they follow the replaced file (same inode) to its new
        # name, where a writer opening it would still find them.
        for saved in guard.guard_files(target):
            if saved.lstat().st_uid == os.geteuid():
                os.replace(saved, aside.with_name(aside.name + saved.name[len(target.name) :]))
        _swap_in(tmp, target)
    return Verified(target, checked.rows)


def compact(path: str | os.PathLike[str] | None) -> Path:
    """Rewrite the warehouse into a new file holding only its live rows and swap it in, so
    deleted rows leave no bytes behind (DuckDB reuses freed blocks but does not clear them).
    The new file keeps the storage version the duckdb CLI reads; it is read whole, and must
    hold as many rows per table as the old one, before the swap, which is one rename made
    while this process holds the warehouse."""
    target = resolve_path(path)
    tmp = target.with_name(f".{target.name}.compact-{os.getpid()}")
    for leftover in (tmp, tmp.with_name(tmp.name + ".wal")):
        with contextlib.suppress(FileNotFoundError):
            leftover.unlink()
    with _dropped_on_failure(tmp, tmp.with_name(tmp.name + ".wal")), connect(target) as con:
        con.execute("CHECKPOINT")
        live = verify_connection(con)
        [(name,)] = con.execute("SELECT current_database()").fetchall()
        quoted = '"' + name.replace('"', '""') + '"'
        literal = str(tmp).replace("'", "''")
        con.execute(
            f"ATTACH '{literal}' AS schedlab_compacted (STORAGE_VERSION '{_STORAGE_VERSION}')"
        )
        try:
            con.execute(f"COPY FROM DATABASE {quoted} TO schedlab_compacted")
        finally:
            con.execute("DETACH schedlab_compacted")
        os.chmod(tmp, os.stat(target).st_mode & 0o777)
        check_con = duckdb.connect(str(tmp), read_only=True)
        try:
            copied = verify_connection(check_con)
        finally:
            check_con.close()
        if copied != live:
            raise WarehouseUnusable(
                f"warehouse {target}: its rewrite holds other rows than it does "
                f"({copied} against {live}); the rewrite was dropped, nothing was changed"
            )
        # Swapped while the connection still holds the old file: no other process
        # can write it between the copy and the swap.
        _swap_in(tmp, target)
    return target
