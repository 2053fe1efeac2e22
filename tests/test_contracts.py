"""Every warehouse table has a pandera contract, and the DDL and the contract agree."""

from datetime import datetime

import pandera.polars as pa
import polars as pl
import pytest

import models.chic.contracts
import models.contracts
import models.harmony.contracts
import models.rltaps.contracts
import pipelines.contracts
import tracelib.contracts
from warehouse import connect
from warehouse.contract import TableContract

CONTRACT_MODULES = [
    tracelib.contracts,
    pipelines.contracts,
    models.contracts,
    models.harmony.contracts,
    models.rltaps.contracts,
    models.chic.contracts,
]
# Bookkeeping of the migration and view mechanism itself, not a stage's table.
NO_CONTRACT = {"schema_migrations", "schema_views"}

DUCKDB_TYPES = {
    pl.Utf8: "VARCHAR",
    pl.Int64: "BIGINT",
    pl.Int32: "INTEGER",
    pl.Float64: "DOUBLE",
    pl.Boolean: "BOOLEAN",
    pl.Datetime: "TIMESTAMP",
    pl.List(pl.Float32): "FLOAT[]",
    pl.List(pl.Boolean): "BOOLEAN[]",
}


def contracts() -> dict[str, type[pa.DataFrameModel]]:
    found = {}
    for module in CONTRACT_MODULES:
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, pa.DataFrameModel)
                and value not in (pa.DataFrameModel, TableContract)
            ):
                found[value.Config.name] = value
    return found


def minimal_job(**overrides) -> pl.DataFrame:
    row = {
        "source_id": "s",
        "job_id": "j1",
        "submit_time": datetime(2026, 1, 1),
        "start_time": None,
        "end_time": None,
        "duration_s": 60.0,
        "num_gpus": 1.0,
        "num_cpus": None,
        "mem_gb": None,
        "num_workers": None,
        "num_ps": None,
        "epochs": None,
        "status": "completed",
        "user_name": None,
        "vc": None,
        "model": None,
    }
    row.update(overrides)
    return pl.DataFrame([row], schema=tracelib.contracts.JOB_COLUMNS)


@pytest.fixture(scope="module")
def ddl_columns(tmp_path_factory):
    path = tmp_path_factory.mktemp("ddl") / "wh.duckdb"
    with connect(path) as con:
        rows = con.sql(
            "SELECT table_name, column_name, data_type, is_nullable "
            "FROM information_schema.columns JOIN information_schema.tables "
            "USING (table_catalog, table_schema, table_name) "
            "WHERE table_schema = 'main' AND table_type = 'BASE TABLE' "
            "ORDER BY table_name, ordinal_position"
        ).fetchall()
    tables: dict[str, dict[str, tuple[str, bool]]] = {}
    for table, column, dtype, nullable in rows:
        tables.setdefault(table, {})[column] = (dtype, nullable == "YES")
    return tables


def test_every_table_has_a_contract(ddl_columns):
    missing = set(ddl_columns) - NO_CONTRACT - set(contracts())
    assert not missing, f"tables without a pandera contract: {sorted(missing)}"
    orphans = set(contracts()) - set(ddl_columns)
    assert not orphans, f"contracts without a table: {sorted(orphans)}"


@pytest.mark.parametrize("table", sorted(contracts()))
def test_ddl_and_contract_agree(table, ddl_columns):
    schema = contracts()[table].to_schema()
    ddl = ddl_columns[table]
    assert list(schema.columns) == list(ddl), "same columns in the same order"
    for name, column in schema.columns.items():
        dtype = column.dtype.type
        expected = DUCKDB_TYPES.get(type(dtype)) or DUCKDB_TYPES[dtype]
        assert ddl[name][0] == expected, f"{table}.{name}: DDL {ddl[name][0]} vs contract {dtype}"
        assert ddl[name][1] == column.nullable, f"{table}.{name}: nullability differs"


def test_jobs_contract_rejects_times_out_of_order():
    from warehouse import ContractViolation
    from warehouse.io import validate

    bad = minimal_job(start_time=datetime(2026, 1, 1, 2), end_time=datetime(2026, 1, 1, 1))
    with pytest.raises(ContractViolation, match="end_after_start"):
        validate(bad, tracelib.contracts.Jobs)


def test_ddl_rejects_what_the_contract_rejects(tmp_path):
    """The DDL's CHECKs are a second line: a bad row inserted around the contract fails too."""
    import duckdb

    with connect(tmp_path / "wh.duckdb") as con:
        with pytest.raises(duckdb.ConstraintException):
            con.execute(
                "INSERT INTO jobs (source_id, job_id, submit_time, num_gpus, status) "
                "VALUES ('s', 'j', TIMESTAMP '2026-01-01', -1, 'completed')"
            )
        with pytest.raises(duckdb.ConstraintException):
            con.execute(
                "INSERT INTO jobs (source_id, job_id, submit_time, num_gpus, status) "
                "VALUES ('s', 'j', TIMESTAMP '2026-01-01', 1, 'weird')"
            )
