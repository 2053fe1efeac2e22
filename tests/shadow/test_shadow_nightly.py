"""The nightly flow ingests a shadow spool made by the tests: the closed day becomes a
source with workloads derived from it, `shadow_decisions` rows, a counterfactual replay
under the shadowed policy, and the report's shadow section."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest

from pipelines.flows import nightly_flow
from tests.shadow.spool_case import SOURCE_ID, write_spool
from tests.tiny_run import SMALL_RUN
from tracelib.workloads import set_name
from warehouse import connect, read_frame


@pytest.mark.usefixtures("prefect_harness")
def test_nightly_run_ingests_the_spool(tmp_path):
    warehouse = tmp_path / "wh.duckdb"
    spool = tmp_path / "spool"
    write_spool(spool)
    nightly = partial(
        nightly_flow,
        warehouse=str(warehouse),
        **SMALL_RUN,
        systems=[],
        eval_seeds=0,
        shadow_spool=str(spool),
    )
    summary = nightly()
    days = {d["source_id"]: d for d in summary["shadow"]}
    assert days[SOURCE_ID]["outcome"] == "new" and days[SOURCE_ID]["decisions"] == 3
    # A trace like any other: its own workload set (one finished job: a test sequence).
    derived = {d["derivation"]: d for d in summary["derived"]}
    assert derived[set_name([SOURCE_ID])]["jobs"] == 1
    [replay] = [r for r in summary["shadow_replays"] if r["source_id"] == SOURCE_ID]
    assert replay["eval_id"] is not None, replay["note"]
    with connect(warehouse, read_only=True) as con:
        rows = read_frame(con, "SELECT count(*) AS n FROM shadow_decisions")["n"][0]
    assert rows == 3
    html = Path(summary["report"]).read_text()
    section = html[html.index("Shadow mode</h2>") :]
    assert SOURCE_ID in section and "counterfactual replay beside what happened" in section
    again = nightly()  # the same spool again
    assert {d["outcome"] for d in again["shadow"]} == {"unchanged"}
    assert again["shadow_replays"] == []
