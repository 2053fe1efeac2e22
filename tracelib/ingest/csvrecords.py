"""Delimited text split into records the way a person counts them, bad records kept.

Why not `polars.read_csv` alone: it rejects a whole file for one row with an extra field,
fills a row with missing fields with nulls as if it were fine, turns a blank line into a
row of nulls, and numbers rows, not lines, so after a quoted line break every record
number points at the wrong line. Here:

- a record's number is the line it starts on (1-based, the header is line 1), also after
  quoted fields that hold line breaks;
- its raw text is exactly its lines in the file;
- blank (or whitespace-only) lines are not records and are skipped;
- a record with more or fewer fields than the header is reported, row by row, with the
  number of fields it has, and its fields are still returned so nothing is lost.

Quoting follows Python's `csv` module (double quote, doubled to escape, a quote opens a
quoted field only at the start of a field). Lines without any quote character are split
column-wise by polars; only records that touch a quote go through `csv`, so a file with a
few quoted fields costs about what a file without any does.

A plain file (no quote at all, valid UTF-8 without a byte-order mark, "\n" or "\r\n" line
ends, every line exactly the header's fields) is read by polars' multi-threaded CSV reader
instead, about four times faster (`_plain_records`). The reader cannot say on its own that a
file is plain: it pads a short line and reads a blank one as a row of empty fields. So a
file is taken as plain only when, after reading, the row count is the line count and the
comma count is exactly (fields - 1) per line (the reader refuses a line with extra fields,
so no line can make up for a short one); anything else goes the way above, and both ways
give the same records.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from tracelib.ingest.base import IngestError, line_lookup

DELIMITER = ","
QUOTE = '"'


@dataclass
class CsvRecords:
    """The records of one delimited text file."""

    table: pl.DataFrame
    """record_no (Int64, the record's first line) then one text column per header name
    (or per given column name), in file order; missing fields are null."""
    n_fields: pl.Series
    """Fields each record actually has, aligned with `table` rows."""
    problems: pl.DataFrame
    """record_no, column (the first column at stake, None for extra fields) and reason, for
    records that could not be split into the expected fields."""
    raw: Callable[[Sequence[int]], list[str]]
    """record numbers -> the records' text as it appears in the file."""
    blank_free: bool = False
    """No field starts or ends with a blank (the file is plain ASCII without a space, tab,
    vertical tab or form feed): trimming the fields would change nothing."""


def read_csv_records(
    path: Path, data: bytes, *, has_header: bool = True, columns: Sequence[str] | None = None
) -> CsvRecords:
    """Split `data` (the bytes of `path`) into records.

    With `has_header`, the first record names the columns; otherwise `columns` does.
    Invalid UTF-8 becomes U+FFFD (the caller reports it per field). Raises IngestError when
    the file has no header or no data record at all.
    """
    data = text_bytes(path, data)
    plain = _plain_records(data, has_header=has_header, columns=columns)
    if plain is not None:
        return plain
    text = data.decode("utf-8", errors="replace").removeprefix("\ufeff")
    # One line per element; "\r\n" endings lose their "\r" (a lone "\r" is an ordinary
    # character, as in polars).
    lines = _lines(text)
    has_quote = lines.str.contains(QUOTE, literal=True)
    blank = lines.str.strip_chars().str.len_chars() == 0

    quoted = _quoted_records(lines, has_quote)
    covered = quoted.covered
    simple_mask = ~has_quote & ~blank
    if covered is not None:
        simple_mask = simple_mask & ~covered
    simple = pl.DataFrame({"line": lines}).with_row_index("record_no", offset=1)
    simple = simple.filter(simple_mask).select(
        pl.col("record_no").cast(pl.Int64),
        pl.col("line").str.split(DELIMITER).alias("fields"),
        pl.lit(None, dtype=pl.Utf8).alias("_error"),
        pl.col("record_no").cast(pl.Int64).alias("_last_line"),
    )
    records = pl.concat([simple, quoted.frame]).sort("record_no")
    if records.height == 0:
        raise IngestError(path, "file is empty" if has_header else "file has no records")

    if has_header:
        header = records.row(0, named=True)
        if header["_error"] is not None:
            raise IngestError(path, f"cannot read the header line: {header['_error']}")
        names = _column_names(header["fields"])
        records = records.slice(1)
    else:
        names = list(columns or [])
    if records.height == 0:
        raise IngestError(path, "file has no data rows")

    width = len(names)
    fields = pl.col("fields")
    table = records.select(
        "record_no",
        *[fields.list.get(i, null_on_oob=True).alias(name) for i, name in enumerate(names)],
    )
    n_fields = records.get_column("fields").list.len().alias("n_fields")
    problems = _ragged(records, n_fields, names, width)
    # Raw records keep invalid bytes visible as backslash escapes rather than U+FFFD; the
    # lines are the same either way (a newline byte is never part of a bad sequence).
    raw_lines = lines
    if "\ufffd" in text:
        escaped = data.decode("utf-8", errors="backslashreplace").removeprefix("\ufeff")
        raw_lines = _lines(escaped)
    last_lines = dict(quoted.frame.select("record_no", "_last_line").iter_rows())
    return CsvRecords(
        table=table, n_fields=n_fields, problems=problems, raw=_raw_lookup(raw_lines, last_lines)
    )


_UTF16_BOMS = {b"\xff\xfe": "utf-16-le", b"\xfe\xff": "utf-16-be"}


def text_bytes(path: Path, data: bytes) -> bytes:
    """The file's text as UTF-8 with "\n" line ends, which every reader here expects.

    A UTF-16 file (with its byte-order mark, as Windows tools write it) is decoded, and
    one that does not decode is refused with IngestError; a file whose lines end in a lone
    "\r" (classic Mac OS) has them read as line ends. UTF-32 is refused by name, since its
    NUL bytes would otherwise be read as text.
    """
    if data.startswith((b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff")):
        raise IngestError(path, "file is UTF-32 text: convert it to UTF-8")
    encoding = _UTF16_BOMS.get(data[:2])
    if encoding is None and len(data) >= 4 and data[1] == 0 == data[3] and data[0] and data[2]:
        encoding = "utf-16-le"  # UTF-16 without a mark: every other byte of ASCII is NUL
    elif encoding is None and len(data) >= 4 and data[0] == 0 == data[2] and data[1] and data[3]:
        encoding = "utf-16-be"
    if encoding is not None:
        body = data[2:] if data[:2] in _UTF16_BOMS else data
        try:
            data = body.decode(encoding).encode("utf-8")
        except UnicodeDecodeError as exc:
            raise IngestError(
                path, f"file looks like {encoding.upper()} text but does not decode: {exc.reason}"
            ) from None
    if b"\r" in data and b"\n" not in data:
        data = data.replace(b"\r", b"\n")
    return data


_PROBLEM_SCHEMA = {"record_no": pl.Int64, "column": pl.Utf8, "reason": pl.Utf8}


def _plain_records(
    data: bytes, *, has_header: bool, columns: Sequence[str] | None
) -> CsvRecords | None:
    """The records of a plain file read by polars' CSV reader, or None when the file is not
    plain (see the module docstring); the caller then reads it line by line. The records
    are exactly those the line-by-line way gives."""
    if (
        QUOTE.encode() in data
        or data.startswith(b"\xef\xbb\xbf")
        or (b"\r" in data and data.count(b"\r") != data.count(b"\r\n"))
        or not is_utf8(data)
    ):
        return None
    n_lines = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
    try:
        frame = pl.read_csv(
            data,
            has_header=False,
            separator=DELIMITER,
            quote_char=None,
            infer_schema=False,
            empty_string_is_null=False,
            truncate_ragged_lines=False,
        )
    except (pl.exceptions.PolarsError, ValueError):
        return None  # a line with extra fields, for one: the careful way reports it
    width = frame.width
    first = 1 if has_header else 0
    # Blank lines, short lines: both break the comma count (width >= 2 keeps a blank line
    # from passing for a one-field record).
    if (
        width < 2
        or frame.height != n_lines
        or frame.height <= first
        or data.count(DELIMITER.encode()) != n_lines * (width - 1)
    ):
        return None
    if has_header:
        names = _column_names(list(frame.row(0)))
    else:
        names = list(columns or [])
        if len(names) != width:
            return None
    table = frame.slice(first).rename(dict(zip(frame.columns, names, strict=True)))
    n = table.height
    table = table.select(
        pl.int_range(first + 1, first + 1 + n, dtype=pl.Int64).alias("record_no"), pl.all()
    )
    return CsvRecords(
        table=table,
        n_fields=pl.Series("n_fields", [width], dtype=pl.UInt32).extend_constant(width, n - 1),
        problems=pl.DataFrame(schema=_PROBLEM_SCHEMA),
        raw=line_lookup(data),
        # "\r" only ends lines here (the reader drops it) and "\n" never is in a field.
        blank_free=data.isascii() and not any(b in data for b in (b" ", b"\t", b"\x0b", b"\x0c")),
    )


def is_utf8(data: bytes) -> bool:
    """Whether the bytes are valid UTF-8 (ASCII checked first: it is 20 times faster)."""
    if data.isascii():
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _lines(text: str) -> pl.Series:
    """The text's lines without their line breaks ("\n" or "\r\n"); the empty string after
    a final line break is not a line."""
    lines = pl.Series("line", [text.removesuffix("\n")], dtype=pl.Utf8).str.split("\n")
    return lines.explode().str.strip_suffix("\r")


@dataclass
class _Quoted:
    frame: pl.DataFrame  # record_no, fields, _error, _last_line
    covered: pl.Series | None  # lines that belong to a quoted record


def _quoted_records(lines: pl.Series, has_quote: pl.Series) -> _Quoted:
    """Records that start on a line holding a quote, read by the csv module.

    Lines without a quote outside such records cannot open or close a quoted field, so
    each is a record of its own; a line with a quote starts a record (the previous one
    has ended) that csv reads to its true end, however many lines that takes.
    """
    starts = has_quote.arg_true().to_list()
    empty = pl.DataFrame(
        schema={
            "record_no": pl.Int64,
            "fields": pl.List(pl.Utf8),
            "_error": pl.Utf8,
            "_last_line": pl.Int64,
        }
    )
    if not starts:
        return _Quoted(empty, None)
    text = lines.to_list()
    feed = _Feed(text)
    # strict=False: a quote inside an unquoted field is kept as a character (as polars does).
    reader = csv.reader(feed, delimiter=DELIMITER, quotechar=QUOTE, strict=False)
    record_nos, rows, errors, last_lines = [], [], [], []
    spans: list[tuple[int, int]] = []
    for start in starts:
        if start < feed.pos:
            continue  # inside a record read already
        feed.pos = start
        try:
            row, error = next(reader), None
        except csv.Error as exc:
            row, error = [], f"cannot split the record into fields: {exc}"
        except StopIteration:
            break
        end = feed.pos - 1
        if end > start and feed.pos >= len(text) and _unterminated(text[start:], row):
            # A quote never closed would swallow every later line into one record: only
            # its own line is quarantined, and the lines after it are read as records.
            row = []
            error = (
                f"a quote opened in this record is never closed (it would run from line "
                f"{start + 1} to the end of the file at line {end + 1})"
            )
            end = start
            feed.pos = start + 1
            reader = csv.reader(feed, delimiter=DELIMITER, quotechar=QUOTE, strict=False)
        record_nos.append(start + 1)
        rows.append(row)
        errors.append(error)
        last_lines.append(end + 1)
        if end > start:
            spans.append((start, end))
    frame = pl.DataFrame(
        {"record_no": record_nos, "fields": rows, "_error": errors, "_last_line": last_lines},
        schema=empty.schema,
    )
    covered = pl.Series("covered", [False] * len(text))
    if spans:
        index = [i for first, last in spans for i in range(first + 1, last + 1)]
        covered = covered.scatter(index, True)
    return _Quoted(frame, covered)


def _unterminated(lines: list[str], row: list[str]) -> bool:
    """Whether the record that starts at `lines[0]` and runs to the end of the file does so
    because a quoted field is never closed (csv's strict mode says so at the end of the
    data; when it stops earlier, a last field ending in a line break tells)."""
    try:
        list(csv.reader((line + "\n" for line in lines), delimiter=DELIMITER, strict=True))
    except csv.Error as exc:
        if "unexpected end of data" in str(exc):
            return True
        return bool(row) and row[-1].endswith("\n")
    return False


class _Feed:
    """Lines handed to csv.reader from a position the caller can move, so one reader
    serves every quoted record without re-reading the lines in between."""

    def __init__(self, lines: list[str]):
        self.lines = lines
        self.pos = 0

    def __iter__(self) -> _Feed:
        return self

    def __next__(self) -> str:
        if self.pos >= len(self.lines):
            raise StopIteration
        line = self.lines[self.pos]
        self.pos += 1
        # csv needs the line break to keep it inside a quoted field.
        return line + "\n"


def _column_names(header: list[str]) -> list[str]:
    """Header fields as column names: trimmed, empty ones named by position, repeats made
    unique (the first keeps the name, as polars does)."""
    names: list[str] = []
    seen: dict[str, int] = {}
    for index, name in enumerate(header):
        name = name.strip() or f"column_{index + 1}"
        if name in seen:
            seen[name] += 1
            name = f"{name}_duplicated_{seen[name] - 1}"
        else:
            seen[name] = 0
        names.append(name)
    return names


def _ragged(records: pl.DataFrame, n_fields: pl.Series, names: list[str], width: int):
    """One problem per record that is not exactly `width` fields (or csv failed on it)."""
    frame = records.select("record_no", "_error", "_last_line").with_columns(n_fields)
    bad = frame.filter(pl.col("_error").is_not_null() | (pl.col("n_fields") != width))
    out = {"record_no": [], "column": [], "reason": []}
    for record_no, error, last_line, count in bad.iter_rows():
        span = (
            f" (it runs over lines {record_no}-{last_line}: a quoted field holds line breaks)"
            if last_line > record_no
            else ""
        )
        if error is not None:
            column, reason = None, error + span
        elif count < width:
            column = names[count]
            reason = (
                f"record has {count} field(s), the header has {width}: "
                f"{', '.join(repr(n) for n in names[count:])} missing{span}"
            )
        else:
            column = None
            reason = f"record has {count} fields, the header has {width}: extra fields{span}"
        out["record_no"].append(record_no)
        out["column"].append(column)
        out["reason"].append(reason)
    return pl.DataFrame(out, schema={"record_no": pl.Int64, "column": pl.Utf8, "reason": pl.Utf8})


def _raw_lookup(
    lines: pl.Series, last_line: dict[int, int]
) -> Callable[[Sequence[int]], list[str]]:
    """record number -> its text: its first line through its last (`last_line` holds the
    last line of every record read by csv; any other record is one line)."""

    def lookup(record_nos: Sequence[int]) -> list[str]:
        n_lines = lines.len()
        # Single-line records in one gather; the few multi-line ones one by one.
        index = [no - 1 if 1 <= no <= n_lines else 0 for no in record_nos]
        out = lines.gather(index).to_list() if index else []
        for i, no in enumerate(record_nos):
            last = last_line.get(no, no)
            if not 1 <= no <= n_lines:
                out[i] = ""
            elif last > no:
                out[i] = "\n".join(lines.slice(no - 1, last - no + 1).to_list())
        return out

    return lookup
