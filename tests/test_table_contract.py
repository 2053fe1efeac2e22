"""`warehouse.contract.TableContract`: a contract that names only its table and key is
still strict and coercing, as every table contract must be for `warehouse.frame_checks`."""

from __future__ import annotations

import pandera.errors
import pandera.polars as pa
import polars as pl
import pytest

from tests.test_contracts import contracts
from warehouse.contract import TableContract
from warehouse.frame_checks import passing_frame


class Pairs(TableContract):
    key: pl.Utf8
    count: pl.Int64 = pa.Field(ge=0)

    class Config:
        name = "pairs"
        unique = ["key"]


def test_subclass_config_merges_with_the_base():
    schema = Pairs.to_schema()
    assert (schema.name, schema.strict, schema.coerce, schema.unique) == (
        "pairs",
        True,
        True,
        ["key"],
    )


def test_an_extra_column_is_refused():
    with pytest.raises(pandera.errors.SchemaError):
        Pairs.validate(pl.DataFrame({"key": ["a"], "count": [1], "extra": [2]}))


def test_columns_are_cast_and_the_key_held():
    checked = Pairs.validate(pl.DataFrame({"key": ["a"], "count": ["3"]}))
    assert checked.schema == pl.Schema({"key": pl.String, "count": pl.Int64})
    with pytest.raises(pandera.errors.SchemaError):
        Pairs.validate(pl.DataFrame({"key": ["a", "a"], "count": [1, 2]}))


def test_the_one_pass_checks_take_it_as_pandera_does():
    # frame_checks handles only strict, coercing contracts; anything else goes to pandera
    assert passing_frame(pl.DataFrame({"key": ["a"], "count": [1]}), Pairs) is not None
    assert passing_frame(pl.DataFrame({"key": ["a"], "count": [-1]}), Pairs) is None


def test_every_table_contract_derives_from_it():
    found = contracts()
    assert len(found) > 20
    for name, contract in found.items():
        assert issubclass(contract, TableContract), name
        schema = contract.to_schema()
        assert schema.strict is True and schema.coerce, name
