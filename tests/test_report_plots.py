"""The report draws a figure only when what it plots changed (pipelines/sections.py
`Plots`): an unchanged warehouse gives the same report bytes without drawing anything."""

from __future__ import annotations

import polars as pl
import pytest

import pipelines.sections
from pipelines.cli import main
from pipelines.report import render_report, reports_dir, write_report
from pipelines.sections import Plots
from tests.test_describe import SAMPLES
from warehouse import connect


def _square(frame: pl.DataFrame, title: str):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(2, 2), dpi=50)
    fig.add_subplot().plot(frame["x"].to_numpy(), frame["y"].to_numpy())
    fig.suptitle(title)
    return fig


def test_a_figure_is_drawn_once_per_content_and_code_version(tmp_path):
    frame = pl.DataFrame({"x": [0.0, 1.0], "y": [1.0, 2.0]})
    plots = Plots(tmp_path / "plots", version="1.0+gabc")
    first = plots.png(_square, frame, "a")
    again = Plots(tmp_path / "plots", version="1.0+gabc")
    assert again.png(_square, frame, "a") == first and again.drawn == 0
    assert again.png(_square, frame.with_columns(y=pl.col("y") * 2), "a") != first
    assert again.png(_square, frame, "b") != first and again.drawn == 2
    # Another code version, or uncommitted changes: drawn anew.
    assert Plots(tmp_path / "plots", version="1.0+gdef").png(_square, frame, "a") == first
    dirty = Plots(tmp_path / "plots", version="1.0+gabc-dirty")
    dirty.png(_square, frame, "a")
    assert dirty.drawn == 1
    # Pruning keeps only what the last report used.
    before = len(list((tmp_path / "plots").glob("*.png")))
    again.prune()
    assert before == 5 and len(list((tmp_path / "plots").glob("*.png"))) == 3
    # No folder: always drawn.
    nowhere = Plots()
    assert nowhere.png(_square, frame, "a") == first and nowhere.drawn == 1


@pytest.fixture
def traces(warehouse_path, capsys):
    for fmt, (path, extra) in SAMPLES.items():
        assert main(["ingest", str(path), "--format", fmt, "--quiet", *extra]) == 0
    capsys.readouterr()
    return warehouse_path


def test_a_report_on_unchanged_data_draws_nothing_and_is_the_same(traces, monkeypatch):
    monkeypatch.setattr("tracelib.provenance.code_version", lambda: "1.0+gabc")
    drawn = []
    real = pipelines.sections.png
    monkeypatch.setattr(pipelines.sections, "png", lambda fig: drawn.append(fig) or real(fig))
    folder = reports_dir(traces) / "plots"
    meta = {"run": "r1"}
    with connect(traces, read_only=True) as con:
        first = render_report(con, meta, (), Plots(folder))
        assert len(drawn) == len(SAMPLES)  # one figure per trace
        second = render_report(con, meta, (), Plots(folder))
    assert second == first and len(drawn) == len(SAMPLES)
    # write_report keeps its figures beside the reports and reads them back.
    write_report(traces, "r2", systems=())
    assert len(drawn) == len(SAMPLES)
    assert len(list(folder.glob("*.png"))) == len(SAMPLES)
