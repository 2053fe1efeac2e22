"""A checkpoint that a kill interrupts leaves the warehouse as it was before it (issue 19).

DuckDB's checkpoint (run when a read-write connection closes) writes the new table data to
free blocks, then rewrites its metadata blocks *in place* (block 0, at byte 12288, and any
other metadata block with room for the new metadata), and only then writes the new database
header that makes the checkpoint current; the WAL is deleted after that. A SIGKILL landing
while the kernel copies the first pages of one of those 256 KiB writes leaves a short
write: the block's new checksum over mostly old bytes, in a block the header on disk still
points at. Every later open then fails with "Corrupt database file: computed checksum ...
does not match stored checksum ... in block at location 12288", though everything
committed is still there (the old header's blocks and the WAL). DuckDB 2.0 does this in
every storage version and with metadata re-use off; only never checkpointing avoids it.

So the close of a read-write connection is guarded: just before it, `closing` copies the
database headers and every metadata block, as they are on disk, into a guard file beside
the warehouse (`<file>.guard-<pid>-<n>`: written under a temporary name and renamed when
whole, and flock-ed by its writer until the close returns), and removes it after. An open
(`recover`, in any process, read-only ones too) that finds a guard whose writer is gone
(its flock is free) compares the file's headers with the saved ones: unchanged, the
checkpoint never became current, so the saved blocks are put back and DuckDB replays the
WAL as after any crash; changed, the checkpoint completed and the guard is just removed.

The file layout relied on: three 4 KiB headers, then blocks of `block_size` bytes from
byte 12288 (DuckDB's single-file format, storage versions 1.0 to 2.0); the metadata blocks
are those `pragma_metadata_info()` lists.

The descriptor that reads the file while DuckDB has it open is closed only after DuckDB
closed it: closing any descriptor of a file drops every POSIX lock this process holds on
it, DuckDB's included.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import itertools
import os
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb

HEADERS = 3 * 4096
"""The main header and the two database headers (a checkpoint overwrites the older one)."""
_MAGIC = b"SLGUARD1"
_FIXED = struct.Struct("<8sQQ")  # magic, block size, number of blocks
_COUNT = itertools.count()
_LOCKS: dict[str, threading.Lock] = {}
_LOCKS_LOCK = threading.Lock()


def path_lock(target: Path) -> threading.Lock:
    """One lock per warehouse file in this process, held while a guard is saved around a
    close or a dead writer's guard is put back, so no other thread of this process
    checkpoints the file meanwhile."""
    key = os.path.abspath(target)
    with _LOCKS_LOCK:
        return _LOCKS.setdefault(key, threading.Lock())


def guard_files(target: Path) -> list[Path]:
    """The guard files (whole or still being written) beside `target`."""
    return sorted(target.parent.glob(f"{target.name}.guard*-*"))


@contextmanager
def closing(con: duckdb.DuckDBPyConnection, target: Path) -> Iterator[None]:
    """Save the on-disk headers and metadata blocks of `target` in a guard file for the
    duration of the block (the connection's close); remove it afterwards."""
    try:
        block_size, blocks = _layout(con)
        fd = os.open(target, os.O_RDONLY)  # closed after DuckDB's close: see the module doc
    except (duckdb.Error, OSError):
        # A connection DuckDB invalidated, or a file gone: close unguarded, as before.
        yield
        return
    guard = target.with_name(f"{target.name}.guard-{os.getpid()}-{next(_COUNT)}")
    tmp = target.with_name(f"{target.name}.guardtmp-{os.getpid()}-{next(_COUNT)}")
    gfd = None
    try:
        image = _image(fd, block_size, blocks)
        gfd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        fcntl.flock(gfd, fcntl.LOCK_EX)
        view = memoryview(image)
        while view:
            view = view[os.write(gfd, view) :]
        os.replace(tmp, guard)
    except OSError:
        # No room or no permission for the guard: close unguarded, as before.
        with contextlib.suppress(OSError):
            tmp.unlink()
        if gfd is not None:
            os.close(gfd)
            gfd = None
    completed = False
    try:
        yield
        completed = True
    finally:
        if gfd is not None:
            # A close that failed (a full disk midway through the checkpoint) may have
            # torn a block as a kill does: its guard stays for the next open to check.
            if completed:
                with contextlib.suppress(OSError):
                    guard.unlink()
            os.close(gfd)
        os.close(fd)


def _layout(con: duckdb.DuckDBPyConnection) -> tuple[int, list[int]]:
    [(block_size,)] = con.execute(
        "SELECT block_size FROM pragma_database_size() WHERE database_name = current_database()"
    ).fetchall()
    blocks = [
        int(b) for (b,) in con.execute("SELECT block_id FROM pragma_metadata_info()").fetchall()
    ]
    return int(block_size), sorted(set(blocks))


def _image(fd: int, block_size: int, blocks: list[int]) -> bytes:
    """The guard's bytes: magic, block size, count, the headers, (id, bytes) per block that
    is on disk, then a sha256 of all that."""
    headers = os.pread(fd, HEADERS, 0)
    parts = [b"", headers]
    stored = 0
    for block in blocks:
        data = os.pread(fd, block_size, HEADERS + block * block_size)
        if len(data) == block_size:  # a block past the end is not on disk: nothing to keep
            parts.append(struct.pack("<Q", block) + data)
            stored += 1
    parts[0] = _FIXED.pack(_MAGIC, block_size, stored)
    body = b"".join(parts)
    return body + hashlib.sha256(body).digest()


def _parse(image: bytes) -> tuple[bytes, int, list[tuple[int, bytes]]] | None:
    """(headers, block size, blocks) of a whole guard, or None for anything else."""
    if len(image) < _FIXED.size + HEADERS + 32:
        return None
    body, digest = image[:-32], image[-32:]
    if hashlib.sha256(body).digest() != digest:
        return None
    magic, block_size, count = _FIXED.unpack_from(body)
    if magic != _MAGIC or len(body) != _FIXED.size + HEADERS + count * (8 + block_size):
        return None
    headers = body[_FIXED.size : _FIXED.size + HEADERS]
    blocks, at = [], _FIXED.size + HEADERS
    for _ in range(count):
        (block,) = struct.unpack_from("<Q", body, at)
        blocks.append((block, body[at + 8 : at + 8 + block_size]))
        at += 8 + block_size
    return headers, block_size, blocks


def recover(target: Path) -> list[str]:
    """Put back what an interrupted checkpoint of `target` overwrote, from the guards of
    writers that are gone; returns what was done, one line per guard (empty: nothing)."""
    done = []
    for path in guard_files(target):
        try:
            gfd = os.open(path, os.O_RDWR)
        except OSError:
            continue  # removed meanwhile by its writer
        try:
            try:
                fcntl.flock(gfd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                    continue  # its writer is closing right now; DuckDB's lock says busy
                raise
            if os.fstat(gfd).st_nlink == 0:
                continue  # its writer finished and removed it after we opened it
            done.append(_recover_one(target, path, gfd))
        finally:
            os.close(gfd)
    return done


def _recover_one(target: Path, path: Path, gfd: int) -> str:
    size = os.fstat(gfd).st_size
    parsed = _parse(os.pread(gfd, size, 0)) if ".guard-" in path.name else None
    if parsed is None:
        # A temporary guard (its writer died before the close began) or not a whole one.
        path.unlink()
        return f"{path.name}: removed (written before the close began)"
    headers, block_size, blocks = parsed
    fd = os.open(target, os.O_RDWR)
    try:
        try:
            # Another process has the file open (DuckDB locks the whole file): it opened
            # the file as it is, so leave it; the guard waits for the next open.
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EAGAIN):
                return f"{path.name}: left (the warehouse is open in another process)"
            raise
        if os.pread(fd, HEADERS, 0) != headers:
            path.unlink()
            return f"{path.name}: removed (its checkpoint completed)"
        for block, data in blocks:
            os.pwrite(fd, data, HEADERS + block * block_size)
        os.fsync(fd)
        path.unlink()
    finally:
        os.close(fd)
    return f"{path.name}: {len(blocks)} metadata block(s) put back (a checkpoint was interrupted)"
