"""Progress reporting: stage lines with elapsed times, bars drawn by one display whichever
process reports, nothing with --quiet."""

from __future__ import annotations

import io
import multiprocessing
import re

import pytest

from pipelines.progress import QUIET, ProgressDisplay, Reporter, choose_mode, stage_line
from tracelib.progress import no_progress

LINE = re.compile(r"^\d\d:\d\d:\d\d \[\+\s*\d+:\d\d\] ")


def test_stage_lines_carry_clock_time_and_elapsed(capsys):
    reporter = Reporter("lines", t0=0.0)
    with reporter.stage("derive workloads x"):
        pass
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert all(LINE.match(line) for line in lines)
    assert lines[0].endswith("derive workloads x ...")
    assert re.search(r"derive workloads x done in \d+\.\d s$", lines[1])
    assert stage_line("x", t0=100.0, now=100.0 + 754.0).split(" ", 1)[1] == "[+ 12:34] x"


def test_a_failed_stage_says_so_and_the_error_goes_on(capsys):
    with pytest.raises(ValueError, match="boom"), Reporter("lines").stage("train"):
        raise ValueError("boom")
    assert "train FAILED after" in capsys.readouterr().out


def test_quiet_prints_nothing_and_bars_are_no_ops_without_a_display(capsys):
    for reporter in (QUIET, Reporter("lines")):
        with reporter.bar("loop", 3) as advance:
            assert advance is no_progress
    with QUIET.stage("anything"):
        QUIET.line("nothing")
    assert capsys.readouterr().out == ""


def test_mode_follows_the_terminal_and_quiet():
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert choose_mode(False, Tty()) == "bars"
    assert choose_mode(False, io.StringIO()) == "lines"
    assert choose_mode(True, Tty()) == "quiet"


def _work_in_another_process(reporter: Reporter) -> None:
    with reporter.stage("worker stage"), reporter.bar("worker loop", 4) as advance:
        for i in range(1, 5):
            advance(i, 4)


def test_a_worker_process_reports_through_the_display(capsys):
    # Prefect's process runner pickles the reporter into its workers: so does this test.
    with ProgressDisplay("bars", t0=0.0) as display:
        child = multiprocessing.get_context("spawn").Process(
            target=_work_in_another_process, args=(display.reporter,)
        )
        child.start()
        child.join(timeout=120)
        assert child.exitcode == 0
    out = capsys.readouterr().out
    assert "worker stage ..." in out and "worker stage done in" in out
    # After the display closes, reporters made from it print directly again.
    assert display.reporter.channel is None
