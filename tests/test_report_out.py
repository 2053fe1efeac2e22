"""`schedlab report --out` to a place it cannot write: exit 2, one line, nothing written."""

from __future__ import annotations

import pytest

from pipelines.cli import main
from warehouse import connect


@pytest.fixture
def warehouse(tmp_path):
    path = tmp_path / "wh.duckdb"
    with connect(path):
        pass
    return path


def test_report_out_under_a_regular_file_is_refused_before_any_work(warehouse, tmp_path, capsys):
    blocker = tmp_path / "notes.txt"
    blocker.write_text("a file")
    code = main(["report", "--warehouse", str(warehouse), "--out", str(blocker / "r.html")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip() == (
        f"error: --out {blocker / 'r.html'}: {blocker} is a file, not a folder; nothing written"
    )
    assert blocker.read_text() == "a file"


def test_report_out_naming_a_folder_is_refused(warehouse, tmp_path, capsys):
    assert main(["report", "--warehouse", str(warehouse), "--out", str(tmp_path)]) == 2
    assert "it is a folder; name a file" in capsys.readouterr().err


def test_report_out_where_nothing_can_be_created_is_one_line(warehouse, capsys):
    # /proc takes no new files, whoever asks (root included).
    code = main(["report", "--warehouse", str(warehouse), "--out", "/proc/schedlab/r.html"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: --out /proc/schedlab/r.html: ")
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_report_out_control_characters_are_escaped(warehouse, tmp_path, capsys):
    blocker = tmp_path / "f"
    blocker.write_text("")
    out = str(blocker / "\x1b[31mred.html")
    assert main(["report", "--warehouse", str(warehouse), "--out", out]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\\x1b[31mred.html" in err


def test_report_out_to_a_writable_place_is_written(warehouse, tmp_path, capsys):
    out = tmp_path / "new" / "deeper" / "r.html"
    assert main(["report", "--warehouse", str(warehouse), "--out", str(out)]) == 0
    assert out.read_text().startswith("<!DOCTYPE html>") or "<html" in out.read_text()
