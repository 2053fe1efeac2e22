"""The shadow spool: a durable, append-only log of snapshots, decisions and observations.

Layout: `<root>/<cluster-slug>/<YYYY-MM-DD>.jsonl`, one file per cluster and UTC day of
receipt, one UTF-8 JSON record per line, keys sorted and `crc32` last:

    {"cluster": c, "kind": k, "payload": {...}, "received": t, "seq": n, "v": 2, "crc32": x}

`seq` counts from 1 in each file; `crc32` is `zlib.crc32` of the line's bytes before
`,"crc32":` (the record as written, without its closing brace), so a record is checked
against exactly what was written, and a payload may embed JSON text as received (a
request's body, `orjson.Fragment`) without being parsed and written again. (Version 1
records, still read, carry the crc of their canonical ASCII JSON instead.)
`Spool.append` returns only after the line (and, when it created the file, the directory
entry) reached the disk, so an acknowledged record survives a crash of the process or the
machine. A crash mid-write leaves at most one torn last line; the next append starts a
fresh line after it, and `read_spool` quarantines it with its file, line and reason and
reads on.

Several processes may append to one spool (the worker processes of one service): each
append holds an exclusive lock on `<root>/.lock` while it reads the file's last sequence
number, writes and syncs, so records of different writers never interleave within a line
and sequence numbers stay consecutive. The kernel drops the lock when a process dies.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any, Literal

import orjson

SPOOL_VERSION = 2
_READABLE_VERSIONS = (1, 2)
RecordKind = Literal["snapshot", "decision", "observation"]
KINDS: frozenset[str] = frozenset({"snapshot", "decision", "observation"})
_SLUG_MAX = 64


class SpoolError(OSError):
    """The spool cannot be written (disk full, permissions, locked by another process)."""


@dataclass(frozen=True)
class SpoolRecord:
    """One accepted record of the spool."""

    seq: int
    received: datetime
    kind: str
    cluster: str
    payload: dict[str, Any]
    crc32: int
    v: int = SPOOL_VERSION


@dataclass(frozen=True)
class Quarantined:
    """A line of a spool file that is not a valid record, and why."""

    file: Path
    line: int
    """1-based line number in `file` (0: the file as a whole)."""
    reason: str


def cluster_slug(cluster: str) -> str:
    """The directory name of a cluster: lower-case letters, digits, '.', '_' and '-' only,
    never starting with '.', at most 64 characters ("cluster" when nothing is left). A cluster
    name comes from a request, so it must never be able to name another path ("../../etc"
    becomes "etc")."""
    slug = re.sub(r"[^a-z0-9._-]+", "-", cluster.lower())
    slug = re.sub(r"\.{2,}", ".", slug).strip(".-_")[:_SLUG_MAX].strip(".-_")
    return slug or "cluster"


def canonical_json(obj: Any) -> str:
    """The canonical JSON text the crc is computed over: sorted keys, no spaces, ASCII."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)


def record_crc(fields: dict[str, Any]) -> int:
    """crc32 of the canonical JSON of a record's fields (without `crc32`): version 1's."""
    return zlib.crc32(canonical_json(fields).encode("ascii"))


def record_line(fields: dict[str, Any]) -> tuple[bytes, int]:
    """A version 2 record's line (with its newline) and its crc32."""
    try:
        text = orjson.dumps(fields, option=orjson.OPT_SORT_KEYS)[:-1]  # without the closing }
    except orjson.JSONEncodeError as err:
        raise ValueError(f"payload: cannot be written as JSON ({err})") from None
    crc = zlib.crc32(text)
    return b'%s,"crc32":%d}\n' % (text, crc), crc


_CRC_FIELD = re.compile(rb',"crc32":(\d+)\}\Z')


def _timestamp(t: datetime) -> str:
    return t.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _utc_now() -> datetime:
    return datetime.now(UTC)


class Spool:
    """Appends records durably under `root`. Thread-safe; use as a context manager (or call
    `close`) to release the directory lock. `clock` returns the receipt time (UTC)."""

    def __init__(self, root: str | Path, *, clock: Callable[[], datetime] = _utc_now) -> None:
        self.root = Path(root)
        self._clock = clock
        self._mutex = threading.Lock()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            self._lock_fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as err:
            raise SpoolError(f"cannot open the spool at {self.root}: {err.strerror}") from err

    def close(self) -> None:
        """Close the spool (records already appended stay); later appends fail."""
        with self._mutex:
            if self._lock_fd >= 0:
                os.close(self._lock_fd)
                self._lock_fd = -1

    def __enter__(self) -> Spool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def path_for(self, cluster: str, day: date) -> Path:
        """The file that records of `cluster` received on `day` go to."""
        return self.root / cluster_slug(cluster) / f"{day.isoformat()}.jsonl"

    def append(self, kind: RecordKind, payload: dict[str, Any], *, cluster: str) -> SpoolRecord:
        """Append one record and return it once it is on disk. `payload` must be JSON data
        (e.g. a pydantic `model_dump(mode="json")`), which may hold `orjson.Fragment`s:
        JSON text already checked to parse, without line breaks. Raises SpoolError if it
        cannot be made durable (the caller must then not acknowledge it)."""
        return self.append_many(kind, [payload], cluster=cluster)[0]

    def append_many(
        self, kind: RecordKind, payloads: list[dict[str, Any]], *, cluster: str
    ) -> list[SpoolRecord]:
        """Append one record per payload, all received at one time, with one write and one
        fsync; returns them once they are all on disk (SpoolError otherwise)."""
        if kind not in KINDS:
            raise ValueError(f"kind: must be one of {sorted(KINDS)}, got {kind!r}")
        with self._mutex:
            if self._lock_fd < 0:
                raise SpoolError(f"the spool at {self.root} is closed")
            received = self._clock()
            path = self.path_for(cluster, received.astimezone(UTC).date())
            try:
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
                try:
                    return self._append_locked(path, kind, payloads, cluster, received)
                finally:
                    fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            except OSError as err:
                # The file may now end in a partial line; the next append starts after it.
                raise SpoolError(f"cannot append to {path}: {err.strerror or err}") from err

    def _append_locked(
        self, path: Path, kind: str, payloads: list[dict], cluster: str, received: datetime
    ) -> list[SpoolRecord]:
        created = not path.exists()
        if created:
            new_dir = not path.parent.exists()
            path.parent.mkdir(parents=True, exist_ok=True)
            if new_dir:
                _fsync_dir(self.root)
        # Another process may have appended since: the file's own last record counts.
        seq, needs_newline = _resume(path)
        records, lines = [], []
        for offset, payload in enumerate(payloads):
            fields = {
                "v": SPOOL_VERSION,
                "seq": seq + offset,
                "received": _timestamp(received),
                "kind": kind,
                "cluster": cluster,
                "payload": payload,
            }
            line, crc = record_line(fields)
            lines.append(line)
            records.append(
                SpoolRecord(
                    seq=seq + offset,
                    received=received.astimezone(UTC),
                    kind=kind,
                    cluster=cluster,
                    payload=payload,
                    crc32=crc,
                )
            )
        data = (b"\n" if needs_newline else b"") + b"".join(lines)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        if created:
            _fsync_dir(path.parent)
        return records


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_LAST_SEQ = re.compile(rb'"seq":(\d+),"v":\d+(?:,"crc32":\d+)?\}\n\Z')
"""The end of a whole record's line (crc32 last, or in sorted order before `kind`)."""
_TAIL_BYTES = 256


def _resume(path: Path) -> tuple[int, bool]:
    """Next sequence number of an existing file, and whether it ends in a torn line: read
    from the end of its last line when that line is whole, else from a scan of the file."""
    try:
        with path.open("rb") as f:
            size = f.seek(0, os.SEEK_END)
            if size == 0:
                return 1, False
            f.seek(max(0, size - _TAIL_BYTES))
            tail = f.read()
    except FileNotFoundError:
        return 1, False
    match = _LAST_SEQ.search(tail)
    if match:
        return int(match.group(1)) + 1, False
    records, _ = read_spool_file(path)
    last = max((r.seq for r in records), default=0)
    with path.open("rb") as f:
        f.seek(-1, os.SEEK_END)
        torn = f.read(1) != b"\n"
    return last + 1, torn


def parse_record(line: str | bytes) -> SpoolRecord:
    """One spool line (without its newline) as a record; ValueError naming what is wrong."""
    data = line.encode("utf-8") if isinstance(line, str) else line
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError as err:
        raise ValueError(f"not JSON ({err.__class__.__name__})") from None
    if not isinstance(raw, dict):
        raise ValueError("not a JSON object")
    expected = {"v", "seq", "received", "kind", "cluster", "payload", "crc32"}
    if set(raw) != expected:
        missing, extra = sorted(expected - set(raw)), sorted(set(raw) - expected)
        raise ValueError(f"fields: missing {missing}, unexpected {extra}")
    crc = raw.pop("crc32")
    if not isinstance(crc, int) or isinstance(crc, bool):
        raise ValueError("crc32: not an integer")
    if isinstance(raw["v"], bool) or raw["v"] not in _READABLE_VERSIONS:
        raise ValueError(f"v: unsupported spool version {raw['v']!r}")
    if raw["v"] == 2:
        tail = _CRC_FIELD.search(data)
        if tail is None or int(tail.group(1)) != crc or zlib.crc32(data[: tail.start()]) != crc:
            raise ValueError("crc32: mismatch (record corrupted)")
    elif record_crc(raw) != crc:
        raise ValueError("crc32: mismatch (record corrupted)")
    seq = raw["seq"]
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
        raise ValueError("seq: not a positive integer")
    if raw["kind"] not in KINDS:
        raise ValueError(f"kind: unknown {raw['kind']!r}")
    if not isinstance(raw["cluster"], str) or not isinstance(raw["payload"], dict):
        raise ValueError("cluster/payload: wrong type")
    try:
        received = datetime.fromisoformat(raw["received"])
    except (TypeError, ValueError):
        raise ValueError("received: not an ISO time") from None
    if received.tzinfo is None:
        raise ValueError("received: no time zone")
    return SpoolRecord(
        seq=seq,
        received=received,
        kind=raw["kind"],
        cluster=raw["cluster"],
        payload=raw["payload"],
        crc32=crc,
    )


def read_spool_file(path: str | Path) -> tuple[list[SpoolRecord], list[Quarantined]]:
    """Every valid record of one spool file in order, and every line that is not one: torn
    (no newline at the end of the file), not JSON, bad crc, or out of sequence (a `seq` not
    above the last accepted one)."""
    path = Path(path)
    records: list[SpoolRecord] = []
    quarantined: list[Quarantined] = []
    last_seq = 0
    with path.open("rb") as f:
        for number, raw_line in enumerate(f, start=1):
            if not raw_line.endswith(b"\n"):
                quarantined.append(Quarantined(path, number, "torn: last line has no newline"))
                break
            try:
                record = parse_record(raw_line[:-1])
            except ValueError as err:
                quarantined.append(Quarantined(path, number, str(err)))
                continue
            if record.seq <= last_seq:
                reason = f"seq: out of sequence ({record.seq} after {last_seq})"
                quarantined.append(Quarantined(path, number, reason))
                continue
            last_seq = record.seq
            records.append(record)
    return records, quarantined


def spool_days(root: str | Path) -> list[date]:
    """The UTC days for which the spool under `root` holds a file (of any cluster), sorted."""
    days: set[date] = set()
    for path in Path(root).glob("*/*.jsonl"):
        try:
            days.add(date.fromisoformat(path.stem))
        except ValueError:
            continue
    return sorted(days)


def read_spool(root: str | Path, day: date) -> tuple[list[SpoolRecord], list[Quarantined]]:
    """Every valid record received on `day` (UTC) under `root`, cluster by cluster (sorted by
    directory name) in file order, and every quarantined line with its file, line and
    reason."""
    records: list[SpoolRecord] = []
    quarantined: list[Quarantined] = []
    for path in sorted(Path(root).glob(f"*/{day.isoformat()}.jsonl")):
        if not path.is_file():
            quarantined.append(Quarantined(path, 0, "not a regular file"))
            continue
        got, bad = read_spool_file(path)
        records.extend(got)
        quarantined.extend(bad)
    return records, quarantined
