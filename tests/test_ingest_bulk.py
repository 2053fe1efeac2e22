"""The fast way of ingesting a plain CSV (DuckDB reads, types and checks it inside the
transaction, tracelib.ingest.bulk) stores exactly the rows of the careful way (`load_trace`
then `store_trace`), and enforces the `jobs` contract in SQL with pandera's verdicts."""

from __future__ import annotations

import contextlib
import shutil
import tomllib
from datetime import datetime
from pathlib import Path

import polars as pl
import pytest

import tracelib.ingest as ingest
import warehouse.bulk
from benchmarks.bench_ingest import MAPPING, make_csv
from tests.test_ingest_fuzz import _case
from tracelib.contracts import JOB_COLUMNS, Jobs
from tracelib.ingest import Mapping, ingest_trace, load_trace, read_trace, store_trace
from warehouse import ContractViolation, connect, read_frame
from warehouse.bulk import check_stored
from warehouse.io import validate

VARIED_MAPPING = """
[columns]
job_id = "id"
submit_time = "sub"
start_time = "st"
end_time = "en"
duration = "dur"
num_gpus = "g"
num_cpus = "cpu"
mem_gb = "mem"
num_workers = "w"
num_ps = "ps"
epochs = "ep"
status = "state"
user_name = "user"
vc = "vc"
model = "model"
gpu_type = "gt"

[time]
epoch_unit = "ms"
base = 2023-01-01 00:00:00

[duration]
unit = "min"

[units]
num_cpus = "milli"
mem_gb = "MiB"

[defaults]
num_gpus = 1
vc = "default-vc"
epochs = 3
status = "failed"

[status]
EXIT_OK = "completed"
"""

VARIED_ROWS = [
    "id,sub,st,en,dur,g,cpu,mem,w,ps,ep,state,user,vc,model,gt",
    "a1,0,60000,3660000,60,8,1500,2048,4,2,1.5,EXIT_OK,u_1,vc1,resnet,V100",
    "a2,100,200,1400.5,,,250,0.5,2.0,,,FAILED,bob,,,nan",
    "a3,1e3,2e3,,,0.5,,1e3,0,0,2,,carol,vc2,vgg,",
    "a4,123.456789,200,300,,16,64000,,,,10,Cancelled,dave,vc1,,T4|V100",
    "a5,-5000,-4000,-1000,0.25,4,1,1,1,1,1,weird,erin,vc3,m,NONE",
    "a6,00012,13,14,,+3,.5,5.,1,1,1e1,pending,frank,vc3,m,A100",
]


def _tables(con) -> dict[str, pl.DataFrame]:
    """Every ingest table in storage order (trace_sources without its clock time)."""
    return {
        "jobs": read_frame(con, "SELECT * FROM jobs ORDER BY rowid"),
        "quarantine": read_frame(con, "SELECT * FROM quarantine ORDER BY rowid"),
        "trace_sources": read_frame(
            con, "SELECT * EXCLUDE (ingested_at) FROM trace_sources ORDER BY rowid"
        ),
    }


@pytest.fixture(scope="module")
def empty_warehouse(tmp_path_factory) -> Path:
    """A migrated, empty warehouse file: copied rather than made afresh for each of the
    fuzz corpus' many pairs (making one runs every migration, ten times the copy)."""
    path = tmp_path_factory.mktemp("template") / "empty.duckdb"
    with connect(path):
        pass
    return path


def _both_ways(tmp_path, path, fmt="generic", mapping=None, name="x", empty=None, fast_only=None):
    """(tables after ingest_trace, after load_trace + store_trace, both results); each
    way into its own new warehouse (a copy of `empty` when given). `fast_only` (a
    MonkeyPatch): ingest_trace must take the fast way, the careful way fails the test."""
    if empty is not None:
        for way in ("fast", "careful"):
            shutil.copyfile(empty, tmp_path / f"{way}-{name}.duckdb")
    with contextlib.ExitStack() as stack:
        con = stack.enter_context(connect(tmp_path / f"fast-{name}.duckdb"))
        if fast_only is not None:
            _no_careful_way(stack.enter_context(fast_only.context()))
        fast = ingest_trace(con, read_trace(path, fmt, mapping))
        fast_tables = _tables(con)
    with connect(tmp_path / f"careful-{name}.duckdb") as con:
        careful = store_trace(con, load_trace(path, fmt, mapping=mapping))
        careful_tables = _tables(con)
    return fast_tables, careful_tables, fast, careful


def _assert_same(fast_tables, careful_tables, fast, careful) -> None:
    for name, table in careful_tables.items():
        assert fast_tables[name].schema == table.schema, name
        differ = [
            c for c in table.columns if not fast_tables[name][c].equals(table[c], check_names=True)
        ]
        assert not differ, (name, differ, fast_tables[name].select(differ), table.select(differ))
    assert fast == careful


def _no_careful_way(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("the careful way ran")

    monkeypatch.setattr(ingest, "load_trace", refuse)


@pytest.mark.parametrize("underscore", [True, False], ids=["text-read", "number-read"])
@pytest.mark.parametrize("crlf", [False, True])
@pytest.mark.parametrize(
    "drop",
    [(), ("state",), ("state", "dur"), ("dur", "en")],
    ids=["all", "no-status", "no-status-duration", "no-duration-end"],
)
def test_fast_way_stores_the_careful_ways_rows_for_a_clean_file(
    tmp_path, monkeypatch, crlf, drop, underscore
):
    text = VARIED_MAPPING
    for column in drop:
        field = {"state": "status", "dur": "duration", "en": "end_time"}[column]
        text = text.replace(f'{field} = "{column}"\n', "")
    if "state" in drop:
        text = text.replace('status = "failed"\n', "")
    mapping = Mapping.from_dict(tomllib.loads(text))
    path = tmp_path / "varied.csv"
    end = "\r\n" if crlf else "\n"
    rows = VARIED_ROWS if underscore else [row.replace("_", "") for row in VARIED_ROWS]
    path.write_bytes((end.join(rows) + end).encode())
    fast_tables, careful_tables, fast, careful = _both_ways(
        tmp_path, path, mapping=mapping, fast_only=monkeypatch
    )
    assert careful.rows_accepted == len(VARIED_ROWS) - 1 and careful.rows_quarantined == 0
    _assert_same(fast_tables, careful_tables, fast, careful)


@pytest.mark.parametrize("underscore", [True, False], ids=["text-read", "number-read"])
def test_fast_way_and_careful_way_agree_on_a_mixed_file(tmp_path, underscore):
    """Clean rows among every kind of bad one: the careful way decides, nothing differs.
    With a "_" in the file DuckDB reads every field as text, without one it reads number
    columns as numbers (a bad value drops its line): both end the careful way."""
    bad = [
        "b1,1,2,3,,-1,1,1,1,1,1,EXIT_OK,x,v,m,",  # negative GPUs
        "b2,soon,2,3,,1,1,1,1,1,1,EXIT_OK,x,v,m,",  # unparsable time
        "a1,5,6,7,,1,1,1,1,1,1,EXIT_OK,x,v,m,",  # repeated job id
        "b3,1_000,2000,3000,,1,1,1,1,1,1,EXIT_OK,x,v,m,",  # digits grouped by "_"
        "b4,10,5,20,,1,1,1,1,1,1,EXIT_OK,x,v,m,",  # started before submitted
        "b5,1,2,3,1e12,1,1,1,1,1,1,EXIT_OK,x,v,m,",  # absurd duration
        "b6,1,2,3,,1,1,1,1.5,1,1,EXIT_OK,x,v,m,",  # fractional workers
        "b7,1,2,3,,1,1,1,1,1,0,EXIT_OK,x,v,m,",  # zero epochs
        "b8,1,2,3,,inf,1,1,1,1,1,EXIT_OK,x,v,m,",  # infinite GPUs
    ]
    rows = [*VARIED_ROWS, *bad]
    if not underscore:
        rows = [row.replace("_", "") for row in rows]
    mapping = Mapping.from_dict(tomllib.loads(VARIED_MAPPING))
    path = tmp_path / "mixed.csv"
    path.write_text("\n".join(rows) + "\n")
    fast_tables, careful_tables, fast, careful = _both_ways(tmp_path, path, mapping=mapping)
    assert careful.rows_quarantined == len(bad) - (0 if underscore else 1)  # "1000" is fine
    _assert_same(fast_tables, careful_tables, fast, careful)


@pytest.mark.parametrize(
    "layout",
    ["mixed-line-ends", "long-and-short-line", "blank-line", "no-final-newline"],
)
def test_irregular_layouts_give_the_careful_ways_rows(tmp_path, layout):
    """Files the plan or DuckDB's reader must not take as plain: the same rows regardless."""
    rows = list(VARIED_ROWS)
    if layout == "mixed-line-ends":
        data = "\r\n".join(rows) + "\n"
    elif layout == "long-and-short-line":
        rows[2] = rows[2] + ",extra"
        rows[3] = rows[3].rsplit(",", 1)[0]
        data = "\n".join(rows) + "\n"
    elif layout == "blank-line":
        data = "\n".join([*rows[:3], "", *rows[3:]]) + "\n"
    else:
        data = "\n".join(rows)
    mapping = Mapping.from_dict(tomllib.loads(VARIED_MAPPING))
    path = tmp_path / "irregular.csv"
    path.write_bytes(data.encode())
    _assert_same(*_both_ways(tmp_path, path, mapping=mapping))


def test_fast_way_stores_the_benchmark_file_as_the_careful_way(tmp_path, monkeypatch):
    path, mapping = tmp_path / "jobs.csv", tmp_path / "jobs.toml"
    make_csv(path, 3000)
    mapping.write_text(MAPPING)
    _assert_same(*_both_ways(tmp_path, path, mapping=mapping, fast_only=monkeypatch))


@pytest.mark.parametrize("fmt,cases", [("generic", 60), ("helios", 20)])
def test_both_ways_agree_on_the_fuzz_corpus(tmp_path, fmt, cases, empty_warehouse):
    for seed in range(cases):
        path, kwargs, _ = _case(fmt, seed, tmp_path)
        mapping = kwargs.get("mapping")
        try:
            careful_loaded = load_trace(path, fmt, mapping=mapping)
        except ingest.IngestError as exc:
            refused = tmp_path / f"refused-{seed}.duckdb"
            shutil.copyfile(empty_warehouse, refused)
            with connect(refused) as con:
                with pytest.raises(ingest.IngestError, match=str(exc)[:30]):
                    ingest_trace(con, read_trace(path, fmt, mapping))
            continue
        del careful_loaded
        both = _both_ways(tmp_path, path, fmt, mapping, f"{fmt}-{seed}", empty_warehouse)
        _assert_same(*both)


def test_a_failed_fast_ingest_leaves_the_warehouse_as_it_was(tmp_path, monkeypatch):
    path, mapping = tmp_path / "jobs.csv", tmp_path / "jobs.toml"
    mapping.write_text(MAPPING)
    make_csv(path, 500, seed=1)
    with connect(tmp_path / "wh.duckdb") as con:
        ingest_trace(con, read_trace(path, "generic", mapping))
        before = _tables(con)
        make_csv(path, 700, seed=2)

        def broken(*args, **kwargs):
            raise ContractViolation("contract violation in table 'jobs': (test)")

        monkeypatch.setattr(warehouse.bulk, "check_stored", broken)
        with pytest.raises(ContractViolation):
            ingest_trace(con, read_trace(path, "generic", mapping))
        after = _tables(con)
    for name, table in before.items():
        assert after[name].equals(table), name


def test_fast_reingest_is_idempotent_and_replaces_a_changed_file(tmp_path):
    path, mapping = tmp_path / "jobs.csv", tmp_path / "jobs.toml"
    mapping.write_text(MAPPING)
    make_csv(path, 400, seed=1)
    with connect(tmp_path / "wh.duckdb") as con:
        first = ingest_trace(con, read_trace(path, "generic", mapping))
        tables = _tables(con)
        again = ingest_trace(con, read_trace(path, "generic", mapping))
        assert (first.outcome, again.outcome) == ("new", "unchanged")
        assert _tables(con)["jobs"].equals(tables["jobs"])
        make_csv(path, 300, seed=2)
        changed = ingest_trace(con, read_trace(path, "generic", mapping))
        assert changed.outcome == "replaced"
        [(count,)] = con.execute("SELECT count(*) FROM jobs").fetchall()
        assert count == 300


def _job(**overrides) -> pl.DataFrame:
    row = {name: None for name in JOB_COLUMNS}
    row.update(
        source_id="s",
        job_id="j1",
        submit_time=datetime(2026, 1, 1),
        num_gpus=1.0,
        status="completed",
    )
    row.update(overrides)
    return pl.DataFrame([row], schema=JOB_COLUMNS)


BAD_JOBS = {
    "empty job id": _job(job_id=""),
    "negative GPUs": _job(num_gpus=-1.0),
    "negative duration": _job(duration_s=-1.0),
    "zero epochs": _job(epochs=0.0),
    "negative workers": _job(num_workers=-2),
    "unknown status": _job(status="weird"),
    "missing submit time": _job(submit_time=None),
    "start before submit": _job(start_time=datetime(2025, 12, 31)),
    "end before start": _job(start_time=datetime(2026, 1, 2), end_time=datetime(2026, 1, 1, 12)),
    "repeated job": pl.concat([_job(), _job()]),
}


@pytest.mark.parametrize("case", [None, *BAD_JOBS], ids=["good", *BAD_JOBS])
def test_contract_in_sql_gives_pandera_s_verdict(tmp_path, case):
    frame = pl.concat([_job(job_id="ok"), BAD_JOBS[case]]) if case else _job()
    try:
        validate(frame, Jobs)
        pandera_ok = True
    except ContractViolation:
        pandera_ok = False
    with connect(tmp_path / "wh.duckdb") as con:
        # A copy without the DDL's CHECKs and NOT NULLs, so the bad rows can be stored.
        con.execute("CREATE TEMP TABLE loose AS SELECT * FROM jobs LIMIT 0")
        arrow = frame.to_arrow()  # noqa: F841 - read by the SQL
        con.execute("INSERT INTO loose SELECT * FROM arrow")

        class Loose(Jobs):
            class Config(Jobs.Config):
                name = "loose"

        if pandera_ok:
            assert check_stored(con, Loose, {"source_id": "s"}).rows == frame.height
        else:
            with pytest.raises(ContractViolation, match="table 'loose'"):
                check_stored(con, Loose, {"source_id": "s"})
    assert pandera_ok == (case is None)


def test_a_contract_check_without_sql_twin_is_refused(tmp_path):
    import pandera.polars as pa

    class Odd(Jobs):
        @pa.dataframe_check
        def something_new(cls, data: pa.PolarsData) -> bool:
            return True

        class Config(Jobs.Config):
            name = "jobs"

    with connect(tmp_path / "wh.duckdb") as con:
        with pytest.raises(NotImplementedError, match="something_new"):
            check_stored(con, Odd, {"source_id": "s"})


def test_fast_way_accepts_values_at_the_bounds_as_the_careful_way(tmp_path, monkeypatch):
    """Values exactly at the plausibility bounds (the era's first second, the GPU and
    duration ceilings, a mapping's own [bounds]) are stored by the fast way, bit for bit
    as the careful way stores them."""
    mapping = Mapping.from_dict(
        {
            "columns": {
                "job_id": "id",
                "submit_time": "t",
                "duration": "d",
                "num_gpus": "g",
            },
            "time": {"epoch_unit": "s"},
            "bounds": {"num_gpus": 64, "duration": 7200},
        }
    )
    path = tmp_path / "edges.csv"
    path.write_bytes(b"id,t,d,g\ne1,946684800,7200,64\ne2,4102444799,0,0\ne3,1700000000,1,1\n")
    fast_tables, careful_tables, fast, careful = _both_ways(
        tmp_path, path, mapping=mapping, fast_only=monkeypatch
    )
    assert careful.rows_accepted == 3 and careful.rows_quarantined == 0
    _assert_same(fast_tables, careful_tables, fast, careful)


def test_fast_way_leaves_values_beyond_the_bounds_to_the_careful_way(tmp_path):
    mapping = Mapping.from_dict(
        {
            "columns": {"job_id": "id", "submit_time": "t", "duration": "d", "num_gpus": "g"},
            "time": {"epoch_unit": "s"},
            "bounds": {"num_gpus": 64},
        }
    )
    path = tmp_path / "beyond.csv"
    path.write_bytes(
        b"id,t,d,g\ne1,1700000000,60,65\ne2,4102444800,60,1\ne3,1700000000,1e-310,1\n"
        b"e4,1700000000,60,1\n"
    )
    fast_tables, careful_tables, fast, careful = _both_ways(tmp_path, path, mapping=mapping)
    assert (careful.rows_accepted, careful.rows_quarantined) == (1, 3)
    _assert_same(fast_tables, careful_tables, fast, careful)
