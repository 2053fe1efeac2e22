"""A checkpoint that a kill interrupts leaves the warehouse as it was before it.

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
whole, mode 0600, and flock-ed by its writer until the close returns), and removes it
after. A read-write open (`recover`; a read-only one never writes or removes anything) that
finds a guard whose writer is gone (its flock is free) compares the file's headers with the
saved ones: unchanged, the checkpoint never became current, so the saved blocks are put back
and DuckDB replays the WAL as after any crash; changed, the checkpoint completed and the
guard is just removed.

A guard is a set of blocks written over the warehouse, so only one that provably belongs to
it is used: its name is exactly `<file>.guard-<pid>-<n>` (or `.guardtmp-<pid>-<n>` for one
still being written), it is a regular file owned by this user and readable by no one else,
and its content names the warehouse file's device and inode and is whole (its sha256).
Anything else beside the warehouse is left alone, whatever its name or content.

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
import logging
import os
import re
import stat
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb

HEADERS = 3 * 4096
"""The main header and the two database headers (a checkpoint overwrites the older one)."""
_MAGIC = b"SLGUARD2"
_FIXED = struct.Struct("<8sQQQQ")  # magic, device, inode, block size, number of blocks
_LOG = logging.getLogger(__name__)
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


def _name_pattern(target: Path) -> re.Pattern[str]:
    return re.compile(re.escape(target.name) + r"\.guard(tmp)?-\d+-\d+")


def guard_files(target: Path) -> list[Path]:
    """The files beside `target` named as its guards (whole or still being written); whether
    one really is a guard of `target` is decided when it is used (`recover`)."""
    pattern = _name_pattern(target)
    try:
        return sorted(p for p in target.parent.iterdir() if pattern.fullmatch(p.name))
    except OSError:
        return []


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
        # Private: the guard is the warehouse's metadata, and only its owner's guards are used.
        gfd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
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
    """The guard's bytes: magic, the warehouse file's device and inode, block size, count,
    the headers, (id, bytes) per block that is on disk, then a sha256 of all that."""
    st = os.fstat(fd)
    headers = os.pread(fd, HEADERS, 0)
    parts = [b"", headers]
    stored = 0
    for block in blocks:
        data = os.pread(fd, block_size, HEADERS + block * block_size)
        if len(data) == block_size:  # a block past the end is not on disk: nothing to keep
            parts.append(struct.pack("<Q", block) + data)
            stored += 1
    parts[0] = _FIXED.pack(_MAGIC, st.st_dev, st.st_ino, block_size, stored)
    body = b"".join(parts)
    return body + hashlib.sha256(body).digest()


def _parse(image: bytes) -> tuple[tuple[int, int], bytes, int, list[tuple[int, bytes]]] | None:
    """((device, inode), headers, block size, blocks) of a whole guard, or None for anything
    else."""
    if len(image) < _FIXED.size + HEADERS + 32:
        return None
    body, digest = image[:-32], image[-32:]
    if hashlib.sha256(body).digest() != digest:
        return None
    magic, device, inode, block_size, count = _FIXED.unpack_from(body)
    if magic != _MAGIC or len(body) != _FIXED.size + HEADERS + count * (8 + block_size):
        return None
    headers = body[_FIXED.size : _FIXED.size + HEADERS]
    blocks, at = [], _FIXED.size + HEADERS
    for _ in range(count):
        (block,) = struct.unpack_from("<Q", body, at)
        blocks.append((block, body[at + 8 : at + 8 + block_size]))
        at += 8 + block_size
    return (device, inode), headers, block_size, blocks


def recover(target: Path) -> list[str]:
    """Put back what an interrupted checkpoint of `target` overwrote, from the guards of
    writers that are gone; returns what was done, one line per guard (empty: nothing).
    Only for a writer (a read-write open): it writes the warehouse and removes guards."""
    done = []
    for path in guard_files(target):
        try:
            gfd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
        except OSError:
            continue  # removed meanwhile by its writer, or a symbolic link
        try:
            problem = _not_ours(gfd)
            if problem:
                _LOG.warning("left %s alone: %s", path, problem)
                done.append(f"{path.name}: left alone ({problem})")
                continue
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


def _not_ours(gfd: int) -> str | None:
    """Why the open file `gfd` cannot be a guard this process wrote (None: it can)."""
    st = os.fstat(gfd)
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if st.st_uid != os.geteuid():
        return f"owned by uid {st.st_uid}, not by this user"
    if st.st_mode & 0o077:
        return f"mode {stat.S_IMODE(st.st_mode):o} (guards are written 0600)"
    return None


def _recover_one(target: Path, path: Path, gfd: int) -> str:
    size = os.fstat(gfd).st_size
    if ".guardtmp-" in path.name:
        # Its writer died before the close began: the checkpoint never started.
        path.unlink()
        return f"{path.name}: removed (written before the close began)"
    parsed = _parse(os.pread(gfd, size, 0))
    if parsed is None:
        _LOG.warning("left %s alone: not a whole guard", path)
        return f"{path.name}: left alone (not a whole guard)"
    identity, headers, block_size, blocks = parsed
    fd = os.open(target, os.O_RDWR)
    try:
        st = os.fstat(fd)
        if identity != (st.st_dev, st.st_ino):
            # Saved from another file (a copy, a restored backup, a planted file): its blocks
            # mean nothing here.
            _LOG.warning("left %s alone: it was saved from another file", path)
            return f"{path.name}: left alone (saved from another file)"
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
