"""The report's building blocks: sections of tables and figures, and the helpers that make
them from the warehouse. `pipelines/report.py` renders them; every learned system builds its
own sections from these (its `report` in pipelines/registry.py)."""

from __future__ import annotations

import base64
import io
import math
from dataclasses import dataclass, field
from datetime import datetime
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
