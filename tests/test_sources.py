"""`schedlab delete-source`: a source goes with everything derived from it, and nothing else."""

from __future__ import annotations

import pytest

from pipelines.cli import main
from tests.conftest import TRACES
from warehouse import connect, read_frame, table_counts

HELIOS = TRACES / "public" / "helios_cluster_log.csv"
PHILLY = TRACES / "philly_cluster_job_log.json"


def _source(warehouse_path, fmt: str) -> str:
    with connect(warehouse_path) as con:
        return read_frame(con, "SELECT source_id FROM trace_sources WHERE format = ?", [fmt])[
            "source_id"
        ][0]


def _rows(warehouse_path, source_id: str) -> dict[str, int]:
    """Rows of each table that belong to `source_id` (directly or through its set)."""
    with connect(warehouse_path) as con:
        q = {
            "jobs": "SELECT count(*) FROM jobs WHERE source_id = ?",
            "workload_jobs": "SELECT count(*) FROM workload_jobs WHERE source_id = ?",
            "eval_runs": "SELECT count(*) FROM eval_runs WHERE workload_set LIKE '%' || ?",
        }
        return {t: con.sql(sql, params=[source_id]).fetchall()[0][0] for t, sql in q.items()}


@pytest.fixture
def two_sources(warehouse_path, capsys) -> tuple[str, str]:
    """Helios (derived and replayed) and Philly (derived) in one warehouse."""
    assert main(["ingest", str(HELIOS), "--format", "helios", "--quiet"]) == 0
    assert main(["ingest", str(PHILLY), "--format", "philly", "--quiet"]) == 0
    helios, philly = _source(warehouse_path, "helios"), _source(warehouse_path, "philly")
    for source, name in ((helios, "helios-set"), (philly, "philly-set")):
        assert main(["derive", source, "--name", name, "--jobs-per-sequence", "5"]) == 0
    assert main(["replay", helios, "--scheduler", "fifo", "--quiet"]) == 0
    capsys.readouterr()
    return helios, philly


def test_without_yes_it_only_shows_what_would_go(two_sources, warehouse_path, capsys):
    helios, _ = two_sources
    with connect(warehouse_path) as con:
        before = table_counts(con)
    assert main(["delete-source", helios]) == 0
    out = capsys.readouterr().out
    assert f"would delete source {helios}" in out and "helios-set" in out and "--yes" in out
    with connect(warehouse_path) as con:
        assert table_counts(con).equals(before)


def test_delete_removes_the_source_its_sets_and_evaluations_only(
    two_sources, warehouse_path, capsys
):
    helios, philly = two_sources
    kept = _rows(warehouse_path, philly)
    assert _rows(warehouse_path, helios)["eval_runs"] > 0
    plots = warehouse_path.parent / "evaluations" / warehouse_path.stem
    replay_dirs = {p.name for p in plots.iterdir()} if plots.is_dir() else set()
    assert main(["delete-source", helios, "--yes"]) == 0
    out = capsys.readouterr().out
    assert f"deleted source {helios}" in out
    assert _rows(warehouse_path, helios) == {"jobs": 0, "workload_jobs": 0, "eval_runs": 0}
    assert _rows(warehouse_path, philly) == kept
    with connect(warehouse_path) as con:
        sets = read_frame(con, "SELECT DISTINCT derivation FROM workloads")["derivation"]
        sources = read_frame(con, "SELECT source_id FROM trace_sources")["source_id"]
        orphans = con.sql(
            "SELECT count(*) FROM eval_summary WHERE eval_id NOT IN (SELECT eval_id FROM eval_runs)"
        ).fetchall()[0][0]
    assert sets.to_list() == ["philly-set"] and sources.to_list() == [philly]
    assert orphans == 0
    for name in replay_dirs:  # the replay's plots went with it
        assert not (plots / name).exists()
    # Deleting it again: it is gone, and saying so is bad input (exit 2), not a crash.
    assert main(["delete-source", helios, "--yes"]) == 2
    assert "unknown trace source" in capsys.readouterr().err


def test_unknown_source_is_bad_input(warehouse_path, capsys):
    with connect(warehouse_path):
        pass
    assert main(["delete-source", "nope:nothing"]) == 2
    assert "unknown trace source 'nope:nothing'" in capsys.readouterr().err
