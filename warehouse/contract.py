"""The base of every table contract: a pandera model that is strict and coerces.

`strict`: a frame holds exactly the table's columns, so a misspelt or extra column is
refused rather than dropped on insert. `coerce`: each column is cast to the table's type,
as the DDL would on insert, so writers need not build frames in the exact polars types.
`warehouse.frame_checks` relies on both (it leaves any other contract to pandera).
A contract names its table and key in its own `Config` (`name`, `unique`); pandera merges
that with this one.
"""

from __future__ import annotations

import pandera.polars as pa


class TableContract(pa.DataFrameModel):
    """A table's pandera contract: subclass it, declare the columns and a `Config` with
    the table's `name` (and its `unique` key where it has one)."""

    class Config:
        strict = True
        coerce = True
