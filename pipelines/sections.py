"""The report's building blocks: sections of tables and figures, and the helpers that make
them from the warehouse. `pipelines/report.py` renders them; every learned system builds its
own sections from these (its `report` in pipelines/registry.py)."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import io
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import polars as pl


@dataclass(frozen=True)
class Figure:
    title: str
    png_base64: str
    caption: str = ""


@dataclass(frozen=True)
class Table:
    title: str
    columns: list[str]
    rows: list[list[str]]
    caption: str = ""


@dataclass
class Section:
    title: str
    intro: str = ""
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    empty: str = ""
    """Said instead of content when the section has nothing to show."""


def png(fig) -> str:
    """A matplotlib Figure as a base64 PNG (no timestamp metadata: same data, same bytes)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return base64.b64encode(buf.getvalue()).decode("ascii")


@dataclass
class Plots:
    """Figures drawn once per content. `png(draw, *data)` returns the PNG `draw(*data)`
    makes (base64), from `folder/<hash>.png` when the same function drew a figure of the
    same data (what the figure plots, frames included) before, in the same code version,
    else drawn now and kept there. A report on unchanged data draws nothing (its 30-odd
    figures took 10-50 s on a loaded 2-core machine). No folder: every figure is drawn.

    A checkout with uncommitted changes (`code_version` ending in "-dirty") draws every
    figure anew: its plotting code may not be the code that drew the kept ones."""

    folder: Path | None = None
    version: str | None = None
    """The plotting code's version (default: `tracelib.provenance.code_version()`)."""
    drawn: int = 0
    """Figures drawn (not read back) so far."""
    used: set[str] = field(default_factory=set)
    """Files of the figures returned so far (what `prune` keeps)."""

    def png(self, draw: Callable[..., Any], *data: Any) -> str:
        """The figure `draw(*data)` makes, as a base64 PNG."""
        if self.folder is None:
            self.drawn += 1
            return png(draw(*data))
        if self.version is None:
            from tracelib.provenance import code_version

            self.version = code_version()
        import matplotlib

        digest = hashlib.sha256()
        what = f"{draw.__module__}.{draw.__qualname__}"
        _feed(digest, (self.version, matplotlib.__version__, what, data))
        name = f"{digest.hexdigest()[:32]}.png"
        self.used.add(name)
        path = self.folder / name
        if path.exists() and not self.version.endswith("-dirty"):
            return base64.b64encode(path.read_bytes()).decode("ascii")
        self.drawn += 1
        encoded = png(draw(*data))
        self.folder.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{id(self)}.part")
        partial.write_bytes(base64.b64decode(encoded))
        partial.replace(path)  # whole files only, even if two reports draw at once
        return encoded

    def prune(self) -> None:
        """Delete kept figures this report did not use (their data changed since)."""
        if self.folder is None or not self.folder.is_dir():
            return
        for path in self.folder.glob("*.png"):
            if path.name not in self.used:
                path.unlink(missing_ok=True)


def _feed(digest, value: Any) -> None:
    """Feed `value` into `digest`: frames by their schema and CSV text, dataclasses field by
    field, containers item by item, anything else by its repr."""
    import polars as pl

    digest.update(type(value).__name__.encode() + b"\0")
    if isinstance(value, pl.DataFrame):
        digest.update(repr(value.schema).encode())
        digest.update(value.write_csv().encode())
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            _feed(digest, (f.name, getattr(value, f.name)))
    elif isinstance(value, list | tuple):
        digest.update(f"{len(value)}".encode())
        for item in value:
            _feed(digest, item)
    elif isinstance(value, dict):
        _feed(digest, sorted(value.items(), key=lambda kv: repr(kv[0])))
    else:
        digest.update(repr(value).encode())
    digest.update(b"\0")


def fmt(value: Any) -> str:
    """A cell's text: floats to a precision that suits their size, timestamps to minutes."""
    if value is None:
        return ""
    if isinstance(value, float):
        if not math.isfinite(value):
            return ""
        if abs(value) < 10:
            return f"{value:,.3f}"
        return f"{value:,.1f}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, datetime):
        return f"{value:%Y-%m-%d %H:%M}"
    return str(value)


def frame_table(title: str, frame: pl.DataFrame, caption: str = "") -> Table:
    """A report table of every row and column of `frame`."""
    return Table(
        title,
        list(frame.columns),
        [[fmt(v) for v in row] for row in frame.iter_rows()],
        caption,
    )


def exists(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    """Whether the warehouse has a table or view called `name`."""
    found = con.sql(
        "SELECT count(*) FROM duckdb_tables() WHERE table_name = ? "
        "UNION ALL SELECT count(*) FROM duckdb_views() WHERE view_name = ?",
        params=[name, name],
    ).fetchall()
    return sum(n for (n,) in found) > 0
