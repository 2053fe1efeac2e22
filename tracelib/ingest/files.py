"""Reading the files an ingest is given: only regular files, never more than a size cap.

A trace, a mapping and every file found in a run's `--incoming` folder come from a user or
from whatever dropped them there, so what a path names is checked before it is read:

- only a regular file is read: a named pipe would block the read forever (no writer),
  a device such as /dev/zero never ends, a directory or socket has no bytes to parse.
  Each is refused with IngestError naming the file and what it is;
- a symbolic link is followed, and the file it leads to must pass the same checks. A
  link is the one way a path in a folder of traces can lead to a file nobody meant as a
  trace (`/etc/passwd`), so messages about a file read through a link never quote its
  content (`TraceRead.linked`);
- the file may hold at most `max_file_bytes()` bytes (20 GiB unless the environment
  variable `SCHEDLAB_MAX_FILE_BYTES` says otherwise): a million-row trace is a few
  hundred MB, and the whole file is held in memory while it is parsed.

The type is checked with `os.stat` first, and the file is then opened non-blocking and
checked again on the open descriptor (`os.fstat`), so a file replaced by a pipe between the
two cannot block the read either.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from tracelib.ingest.base import IngestError

MAX_FILE_BYTES_ENV = "SCHEDLAB_MAX_FILE_BYTES"
DEFAULT_MAX_FILE_BYTES = 20 * 2**30
_SUFFIXES = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def max_file_bytes() -> int:
    """The size cap per file: `SCHEDLAB_MAX_FILE_BYTES` (bytes, or a number with K, M, G
    or T for KiB ... TiB), else `DEFAULT_MAX_FILE_BYTES`. ValueError for a value that is
    not a positive size."""
    text = os.environ.get(MAX_FILE_BYTES_ENV, "").strip()
    if not text:
        return DEFAULT_MAX_FILE_BYTES
    number, suffix = text, ""
    if text[-1:].upper() in _SUFFIXES:
        number, suffix = text[:-1], text[-1].upper()
    try:
        value = int(float(number) * _SUFFIXES[suffix])
    except (ValueError, OverflowError):
        value = 0
    if value <= 0:
        raise ValueError(
            f"{MAX_FILE_BYTES_ENV}={text!r} is not a size: give bytes, or a number with "
            "K, M, G or T (e.g. 20G)"
        )
    return value


def _kind(mode: int) -> str:
    """What a non-regular file is, for messages."""
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _size(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def check_regular(path: Path, what: str = "file") -> os.stat_result:
    """The stat of the file `path` leads to; IngestError naming it unless it is a regular
    file within the size cap (a missing or unreadable one is an IngestError too)."""
    try:
        info = os.stat(path)  # follows a link: the target is what would be read
    except OSError as exc:
        raise IngestError(path, f"cannot read {what}: {exc.strerror or exc}") from None
    _check_info(path, info, what)
    return info


def _check_info(path: Path, info: os.stat_result, what: str) -> None:
    try:
        cap = max_file_bytes()
    except ValueError as exc:
        raise IngestError(path, str(exc)) from None
    target = ""
    if os.path.islink(path):
        target = f" (a symbolic link to {os.path.realpath(path)})"
    if not stat.S_ISREG(info.st_mode):
        raise IngestError(
            path, f"{what}{target} is {_kind(info.st_mode)}: only regular files are read"
        )
    if info.st_size > cap:
        raise IngestError(
            path,
            f"{what}{target} holds {_size(info.st_size)}, more than the {_size(cap)} a file "
            f"may hold; set {MAX_FILE_BYTES_ENV} (e.g. 64G) to read larger files",
        )


def read_regular(path: Path, what: str = "file") -> bytes:
    """The bytes of a regular file within the size cap (see the module docstring);
    IngestError naming the file otherwise. Never blocks on a pipe or reads without end."""
    path = Path(path)
    check_regular(path, what)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise IngestError(path, f"cannot read {what}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        # The path may have been replaced since it was checked: check what was opened.
        _check_info(path, info, what)
        cap = max_file_bytes()  # valid: _check_info read it
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, 1 << 24)
            if not chunk:
                break
            total += len(chunk)
            if total > cap:
                raise IngestError(
                    path, f"{what} grew past the {_size(cap)} a file may hold while being read"
                )
            chunks.append(chunk)
    except OSError as exc:
        raise IngestError(path, f"cannot read {what}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    return b"".join(chunks)


def is_linked(path: Path) -> bool:
    """Whether `path` itself is a symbolic link (its content is then never quoted)."""
    return os.path.islink(path)
