"""A table contract's checks on a polars frame in one pass, for frames that pass.

Pandera validates a frame check by check, each its own lazy query: a 50-row `jobs` frame
takes about 17 ms, almost all of it per-query overhead, and every stage writes small frames.
`passing_frame` evaluates the same checks (about 2 ms for that frame), pandera's own check
functions over the same columns, in one query: the frame pandera would return when every
check passes, or None when any fails or needs what only pandera does (a cast that fails, a
missing or extra column). `warehouse.io.validate` then runs pandera, which names each
failing check and row: this module decides nothing a contract refuses.

What pandera does for this project's contracts (`strict`, `coerce`; tests/test_frame_checks.py
holds the two to the same verdicts for every contract), and so does this module:
- the frame's columns are exactly the contract's; each is cast to its type (`cast`,
  `strict=True`, as pandera's polars engine coerces);
- a column that is not nullable holds no null, nor NaN when it is of a float type;
- `unique=True` columns and the contract's `unique` column sets hold no repeat;
- every column check and dataframe check passes, a null check result counting as a pass
  where the check ignores missing values (pandera's `ignore_na`, the default).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import pandera.backends.polars.builtin_checks  # noqa: F401 - registers the checks' polars functions
import pandera.polars as pa
import polars as pl
from pandera.api.polars.types import PolarsData


def passing_frame(frame: pl.DataFrame, contract: type[pa.DataFrameModel]) -> pl.DataFrame | None:
    """`frame` cast to the contract's column types if it passes every check of `contract`,
    else None (pandera must decide, and word what fails)."""
    schema = contract.to_schema()
    if not (schema.strict is True and schema.coerce) or schema.add_missing_columns:
        return None  # the contracts here are strict and coerce; others go to pandera
    types = {name: column.dtype.type for name, column in schema.columns.items()}
    if frame.width != len(types) or set(frame.columns) != set(types):
        return None
    casts = {name: kind for name, kind in types.items() if frame.schema[name] != kind}
    if casts:
        try:
            frame = frame.cast(casts, strict=True)
        except pl.exceptions.PolarsError:
            return None
    data = frame.lazy()
    outputs: list[pl.LazyFrame] = []  # one boolean column per check, aligned with the rows
    verdicts: list[pl.Expr] = []  # one boolean per check: it passes
    for name, column in schema.columns.items():
        col = pl.col(name)
        if not column.nullable:
            present = col.is_not_null()
            if types[name].is_float():
                present = present & col.is_not_nan()
            verdicts.append(present.all())
        if column.unique:
            verdicts.append(col.is_duplicated().any().not_())
        for check in column.checks:
            output = _run(check, PolarsData(data, name))
            if output is None:
                return None
            alias = f"__check_{len(outputs)}"
            outputs.append(output.select(pl.first().alias(alias)))
            verdicts.append(_passes(pl.col(alias), check.ignore_na))
    for check in schema.checks:
        output = _run(check, PolarsData(data, "*"))
        if output is None:
            return None
        if isinstance(output, bool):
            if not output:
                return None
            continue
        alias = f"__check_{len(outputs)}"
        outputs.append(output.select(pl.all_horizontal(pl.all()).alias(alias)))
        verdicts.append(_passes(pl.col(alias), check.ignore_na))
    for names in _unique_sets(schema.unique):
        if frame.select(names).is_duplicated().any():
            return None
    if verdicts:
        checked = pl.concat([data, *outputs], how="horizontal") if outputs else data
        try:
            passed = checked.select(pl.all_horizontal(verdicts)).collect().item()
        except Exception:  # a check that cannot run here: pandera reports it
            return None
        if not passed:
            return None
    return frame


def _run(check: pa.Check, data: PolarsData) -> pl.LazyFrame | bool | None:
    """The check function's output (pandera's polars check backend calls it the same way),
    or None for a check this module does not evaluate (element-wise checks)."""
    if check.element_wise or check._check_fn is None:
        return None
    # A built-in check's function is looked up again at each call, as `Check.__call__`
    # does: the check may hold a dispatcher made before the polars functions registered.
    name = getattr(check._check_fn, "__name__", None)
    found = check.get_builtin_check_fn(name) if check.is_builtin_check(name) else check._check_fn
    fn: Callable[..., Any] = partial(found, **check._check_kwargs)
    try:
        output = fn(data)  # a dataframe check may compute eagerly (`one_row_per_job`)
    except Exception:  # pandera catches any error of a check and reports it
        return None
    return output if isinstance(output, pl.LazyFrame | bool) else None


def _passes(result: pl.Expr, ignore_na: bool) -> pl.Expr:
    """True when every row's check result passes; a null result passes only when the check
    ignores missing values (pandera's `postprocess_lazyframe_output`)."""
    return (result | result.is_null()).all() if ignore_na else result.fill_null(False).all()


def _unique_sets(unique: Any) -> list[list[str]]:
    """The contract's `unique` setting as a list of column sets."""
    if not unique:
        return []
    if all(isinstance(name, str) for name in unique):
        return [list(unique)]
    return [list(names) for names in unique]
