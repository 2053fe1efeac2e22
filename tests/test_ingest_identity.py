"""What a trace source is: a file is its
path and its content; the mapping and format options belong to an ingest's identity."""

from __future__ import annotations

import shutil

import pytest

import pipelines.stages
from pipelines.cli import main
from pipelines.stages import ingest_stage
from tests.conftest import TRACES
from warehouse import connect, read_frame

HELIOS = TRACES / "helios_sample.csv"
GENERIC = TRACES / "generic_sample.csv"
MAPPING = TRACES / "generic_sample.toml"


def _jobs_by_source(warehouse) -> dict[str, int]:
    with connect(warehouse, read_only=True) as con:
        rows = read_frame(
            con, "SELECT source_id, count(*) AS n FROM jobs GROUP BY source_id ORDER BY 1"
        )
    return dict(rows.iter_rows())


def _cluster(tmp_path, name: str, keep_jobs: int | None = None):
    """A Helios cluster folder with its own cluster_log.csv (the same file name everywhere)."""
    folder = tmp_path / name
    folder.mkdir()
    lines = HELIOS.read_text().splitlines()
    if keep_jobs is not None:
        lines = lines[: 1 + keep_jobs]
    (folder / "cluster_log.csv").write_text("\n".join(lines) + "\n")
    return folder / "cluster_log.csv"


def test_same_named_files_of_two_clusters_are_two_sources(tmp_path, warehouse_path):
    venus = _cluster(tmp_path, "venus")
    earth = _cluster(tmp_path, "earth", keep_jobs=2)
    first = ingest_stage(None, venus, "helios")
    second = ingest_stage(None, earth, "helios")
    assert (first.outcome, second.outcome) == ("new", "new")
    assert first.source_id == "helios:cluster_log"
    assert (
        second.source_id.startswith("helios:cluster_log-") and second.source_id != first.source_id
    )
    assert "another file's source" in second.note
    assert _jobs_by_source(warehouse_path) == {first.source_id: 4, second.source_id: 2}

    # Each keeps its identity on re-ingest, whichever order they come in.
    assert ingest_stage(None, earth, "helios").outcome == "unchanged"
    assert ingest_stage(None, venus, "helios").outcome == "unchanged"
    # A changed file replaces its own source's jobs only.
    earth.write_text("\n".join(HELIOS.read_text().splitlines()[:2]) + "\n")
    again = ingest_stage(None, earth, "helios")
    assert (again.source_id, again.outcome) == (second.source_id, "replaced")
    assert _jobs_by_source(warehouse_path) == {first.source_id: 4, second.source_id: 1}


def test_same_named_pai_folders_are_two_sources(tmp_path, warehouse_path):
    for name in ("a", "b"):
        shutil.copytree(TRACES / "pai", tmp_path / name / "pai")
    (tmp_path / "b" / "pai" / "pai_job_table.csv").write_text(
        (TRACES / "pai" / "pai_job_table.csv").read_text().splitlines()[0] + "\n"
    )
    one = ingest_stage(None, tmp_path / "a" / "pai", "pai")
    two = ingest_stage(None, tmp_path / "b" / "pai", "pai")
    assert one.source_id != two.source_id and two.outcome == "new"
    assert _jobs_by_source(warehouse_path)[two.source_id] == 1
    assert _jobs_by_source(warehouse_path)[one.source_id] == one.rows_accepted


def test_an_explicit_source_id_replaces_whatever_holds_it(tmp_path, warehouse_path):
    venus = _cluster(tmp_path, "venus")
    earth = _cluster(tmp_path, "earth", keep_jobs=2)
    ingest_stage(None, venus, "helios", source_id="helios:prod")
    result = ingest_stage(None, earth, "helios", source_id="helios:prod")
    assert (result.source_id, result.outcome) == ("helios:prod", "replaced")
    assert "named explicitly" in result.note
    assert _jobs_by_source(warehouse_path) == {"helios:prod": 2}


def test_the_same_content_from_another_path_is_not_loaded_twice(tmp_path, warehouse_path):
    copy = tmp_path / "copy" / "helios_sample.csv"
    copy.parent.mkdir()
    shutil.copy(HELIOS, copy)
    first = ingest_stage(None, HELIOS, "helios")
    again = ingest_stage(None, copy, "helios")
    assert (again.source_id, again.outcome) == (first.source_id, "unchanged")
    assert "already ingested from" in again.note
    assert _jobs_by_source(warehouse_path) == {first.source_id: 4}


def test_a_corrected_mapping_reingests_an_unchanged_file(tmp_path, warehouse_path, capsys):
    wrong = tmp_path / "wrong.toml"
    # Durations taken as seconds instead of minutes: every job 60x too short.
    wrong.write_text(MAPPING.read_text().replace('unit = "min"', 'unit = "s"'))
    argv = ["ingest", str(GENERIC), "--format", "generic", "--mapping"]
    assert main([*argv, str(wrong)]) == 0
    assert main([*argv, str(wrong)]) == 0
    assert "unchanged" in capsys.readouterr().out
    assert main([*argv, str(MAPPING)]) == 0
    assert "replaced" in capsys.readouterr().out
    with connect(warehouse_path, read_only=True) as con:
        a1 = read_frame(con, "SELECT duration_s FROM jobs WHERE job_id = 'a1'").item()
        sources = read_frame(con, "SELECT count(*) AS n FROM trace_sources").item()
    assert a1 == 3600.0 and sources == 1


def test_a_changed_format_option_reingests(tmp_path, warehouse_path):
    from tracelib.ingest import load_trace, store_trace

    with connect(warehouse_path) as con:
        first = store_trace(con, load_trace(HELIOS, "helios"))
        same = store_trace(con, load_trace(HELIOS, "helios"))
        stricter = store_trace(con, load_trace(HELIOS, "helios", max_duration_s=3600.0))
    assert (first.outcome, same.outcome, stricter.outcome) == ("new", "unchanged", "replaced")
    assert stricter.rows_accepted < first.rows_accepted  # the 2 h and 12 h jobs are now absurd


def test_an_unchanged_file_is_recognized_before_it_is_parsed(tmp_path, warehouse_path, monkeypatch):
    ingest_stage(None, HELIOS, "helios")

    def no_parsing(*args, **kwargs):
        raise AssertionError("an unchanged file must not be parsed")

    monkeypatch.setattr(pipelines.stages, "load_trace", no_parsing)
    assert ingest_stage(None, HELIOS, "helios").outcome == "unchanged"
    # A changed file still is parsed (and so reaches the stub).
    (tmp_path / "x.csv").write_text(HELIOS.read_text() + "\n")
    with pytest.raises(AssertionError, match="must not be parsed"):
        ingest_stage(None, tmp_path / "x.csv", "helios")
