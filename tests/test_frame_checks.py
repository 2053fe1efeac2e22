"""The one-query contract check (`warehouse.frame_checks`) agrees with pandera: on every
table the tiny run stores and on frames broken one value, row or column at a time, it
passes exactly the frames pandera passes, returning the same frame, and `validate` still
words a failure as pandera does."""

from __future__ import annotations

import math

import pandera.errors
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from tests.test_contracts import contracts, minimal_job
from tracelib.contracts import Jobs
from warehouse import ContractViolation, connect, read_frame
from warehouse.frame_checks import passing_frame
from warehouse.io import _table_key, validate

CONTRACTS = contracts()


@pytest.fixture(scope="module")
def stored(reference_run) -> dict[str, pl.DataFrame]:
    """Every contract's table as the tiny run stored it (tables it leaves empty: absent)."""
    with connect(reference_run.warehouse, read_only=True) as con:
        frames = {name: read_frame(con, f'SELECT * FROM "{name}"') for name in CONTRACTS}
    # The first rows are enough: a check relates values within a row or across the rows of
    # the frame it is given, and a validation's cost is mostly per query, not per row.
    return {name: frame.head(12) for name, frame in frames.items() if frame.height}


def pandera_verdict(frame: pl.DataFrame, contract) -> pl.DataFrame | None:
    try:
        return contract.validate(frame, lazy=True)
    except (pandera.errors.SchemaErrors, pandera.errors.SchemaError):
        return None
    except pl.exceptions.ColumnNotFoundError:  # pandera's word for a missing column
        return None


def at_first_row(frame: pl.DataFrame, column: str, value) -> pl.DataFrame | None:
    """`frame` with `value` in the first row of `column`, or None if the column's type
    cannot hold it."""
    kind = frame.schema[column]
    try:
        literal = pl.Series([value]).cast(kind, strict=True)
    except pl.exceptions.PolarsError:
        return None
    first = pl.int_range(pl.len()) == 0
    return frame.with_columns(
        pl.when(first).then(pl.lit(literal)).otherwise(pl.col(column)).alias(column)
    )


def broken(frame: pl.DataFrame, contract) -> list[tuple[str, pl.DataFrame]]:
    """Frames that differ from `frame` in one value, row or column, each aimed at one of
    the contract's checks (null where none is allowed, a value a column check refuses, a
    repeated key, a column cast from text, a column missing or more)."""
    schema = contract.to_schema()
    keys = {name for names in [schema.unique or [], _table_key(contract)] for name in names}
    out = [("as stored", frame), ("first row twice", pl.concat([frame.head(1), frame]))]
    out.append(("a column missing", frame.drop(frame.columns[-1])))
    out.append(("a column more", frame.with_columns(extra=pl.lit(1))))
    cast_one = True
    for column, kind in frame.schema.items():
        spec = schema.columns[column]
        checks = {check.name for check in spec.checks}
        values: list = [None]
        if kind.is_numeric():
            values += [-1, 0] if checks else []
            values += [math.nan] if kind.is_float() else []
        elif kind == pl.Utf8:
            values += [""] if checks - {"isin"} else []
            values += ["not-a-known-value"] if "isin" in checks else []
            if spec.unique or column in keys:  # the last row's value in the first row
                values += frame[column].drop_nulls().tail(1).to_list()
        elif kind == pl.Datetime:
            values += [frame[column].drop_nulls().min()]
        for value in values:
            changed = at_first_row(frame, column, value)
            if changed is not None:
                out.append((f"{column} = {value!r}", changed))
        if cast_one and (kind.is_numeric() or kind == pl.Datetime):
            out.append((f"{column} as text", frame.with_columns(pl.col(column).cast(pl.Utf8))))
            cast_one = False
    return out


def test_the_tiny_run_fills_most_tables(stored):
    # The comparison below is only as good as the tables it sees.
    assert len(stored) >= len(CONTRACTS) - 4, sorted(set(CONTRACTS) - set(stored))


def test_same_verdicts_as_pandera_on_stored_and_broken_frames(stored):
    verdicts = {True: 0, False: 0}
    for name, frame in stored.items():
        contract = CONTRACTS[name]
        for what, case in broken(frame, contract):
            mine = passing_frame(case, contract)
            theirs = pandera_verdict(case, contract)
            assert (mine is None) == (theirs is None), (
                f"{name}, {what}: pandera {theirs is not None}"
            )
            if mine is not None:
                assert_frame_equal(mine, theirs)
            verdicts[mine is not None] += 1
    # Both verdicts occur, many times: the comparison is not one-sided.
    assert verdicts[True] > 50 and verdicts[False] > 100, verdicts


def test_a_failing_frame_is_still_worded_by_pandera():
    frame = pl.concat([minimal_job(), minimal_job(num_gpus=-1.0, job_id="j2")])
    assert passing_frame(frame, Jobs) is None
    with pytest.raises(ContractViolation, match=r"column 'num_gpus' fails greater_than_or_equal"):
        validate(frame, Jobs)


def test_columns_are_cast_as_pandera_casts_them():
    frame = minimal_job().with_columns(pl.col("num_gpus").cast(pl.Int64))
    checked = passing_frame(frame, Jobs)
    assert checked is not None and checked.schema["num_gpus"] == pl.Float64
    assert_frame_equal(checked, Jobs.validate(frame))
