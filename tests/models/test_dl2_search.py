"""DL2's searched teacher (`models/dl2/search.py`): the table policy gives every job its
model's configuration, the recorder replays it exactly even where the cluster runs out of
room, and the search only adopts what lowers the training JCT, deterministically."""

from __future__ import annotations

import itertools
from types import MappingProxyType

import polars as pl
import pytest

from models.contracts import DecisionTraces
from models.dl2.config import DL2NetConfig, RecorderConfig, dl2_sim
from models.dl2.policy import average_jct
from models.dl2.recorder import record_runs
from models.dl2.search import (
    ConfigTable,
    SearchConfig,
    optimus_configurations,
    result_frame,
    search_configurations,
    table_of,
)
from tracelib.sim import JobSpec, dl2_like_frame, jobs_from_frame, simulate
from tracelib.sim.placement import LoadBalancing
from tracelib.sim.policy import Scheduler
from warehouse.io import validate

WINDOW = 6
NET = DL2NetConfig(window=WINDOW, hidden=(16, 16), trigger="events")
SMALL = SearchConfig(workers=(1, 2, 4), ps=(1, 4, 8), keep=3, climb=2)


def _workloads(count: int = 2, n_jobs: int = 8):
    return [
        jobs_from_frame(dl2_like_frame(n_jobs, s, mean_duration_min=40.0, median_duration_min=20.0))
        for s in range(count)
    ]


def _per_job(result) -> dict[int, set[tuple[int, int]]]:
    """Each job's (workers, PSs) at every decision it was given tasks."""
    totals = result.placements.group_by("decision", "job_id").agg(
        pl.col("workers").sum(), pl.col("ps").sum()
    )
    out: dict[int, set] = {}
    for _, job, w, p in totals.iter_rows():
        out.setdefault(job, set()).add((w, p))
    return out


def test_every_job_gets_its_models_configuration_where_there_is_room():
    jobs = [
        JobSpec(0, "wlm", epochs=5.0, arrival_s=0.0),
        JobSpec(1, "resnet-50", epochs=2.0, arrival_s=0.0),
        JobSpec(2, "dssm", epochs=5.0, arrival_s=600.0, num_workers=3, num_ps=2),
    ]
    table = ConfigTable(MappingProxyType({"wlm": (1, 5), "resnet-50": (3, 2)}))
    run = simulate(jobs, Scheduler(table, LoadBalancing()), dl2_sim(n_servers=32, window=WINDOW))
    seen = _per_job(run)
    assert seen[0] == {(1, 5)} and seen[1] == {(3, 2)}
    assert seen[2] == {(3, 2)}, "a model without an entry gets what its job requested"


def test_the_recorder_replays_the_table_exactly_when_the_cluster_is_full():
    # Targets far beyond three servers: later jobs get less, or only their pair, and the
    # job-by-job replay must rebuild every decision (else ReplayMismatch).
    table = ConfigTable(
        MappingProxyType({m: (8, 8) for m in ("cnn-text", "dssm", "inception-bn", "resnet-50")})
        | {m: (2, 12) for m in ("resnext-110", "seq2seq", "vgg-16", "wlm")}
    )
    cfg = RecorderConfig(teacher="searched", net=NET, sim=dl2_sim(n_servers=3, window=WINDOW))
    workloads = {f"w{i}": jobs for i, jobs in enumerate(_workloads())}
    frame, results = record_runs(workloads, table, cfg)
    validate(frame, DecisionTraces)
    assert set(frame["teacher"].unique()) == {"searched"}
    full = [s for r in results.values() for s in _per_job(r).values() if (8, 8) not in s]
    assert full, "the cluster ran out of room for some job (the case under test)"


@pytest.fixture(scope="module")
def searched():
    workloads = _workloads()
    sim = dl2_sim(n_servers=8, window=WINDOW)
    found = search_configurations(workloads, SMALL, sim, seed=3, interval_s=None, trigger="events")
    return workloads, sim, found


def test_the_search_only_keeps_what_lowers_the_training_jct(searched):
    workloads, sim, found = searched
    start = optimus_configurations(workloads, sim, seed=3, interval_s=None, trigger="events")
    assert [m.model for m in found.models] == sorted({j.model for w in workloads for j in w})
    chain = [m.start_avg_jct_s for m in found.models[:1]] + [
        m.found_avg_jct_s for m in found.models
    ]
    assert all(b <= a for a, b in itertools.pairwise(chain)), "each step lowers or keeps"
    for m in found.models:
        assert m.start == start[m.model]
        assert (m.found == m.start) == (
            m.found_avg_jct_s == m.start_avg_jct_s
        ) or m.found != m.start
    # The table's training JCT is the one the last step reports, and beats Optimus'
    # configurations on these sequences (the search found something here).
    final = average_jct(found.policy(), workloads, sim, seed=3)
    assert final == pytest.approx(found.models[-1].found_avg_jct_s, rel=1e-12)
    at_start = average_jct(ConfigTable(MappingProxyType(start)), workloads, sim, seed=3)
    assert final < at_start == pytest.approx(found.models[0].start_avg_jct_s, rel=1e-12)
    frame = result_frame(found, "run-1")
    assert table_of(frame.to_dicts()) == found.table


def test_the_search_is_deterministic(searched):
    workloads, sim, found = searched
    again = search_configurations(workloads, SMALL, sim, seed=3, interval_s=None, trigger="events")
    assert again == found


def test_a_search_without_sequences_is_refused():
    with pytest.raises(ValueError, match="at least one training sequence"):
        search_configurations([], SMALL, dl2_sim(), seed=0, interval_s=None, trigger="events")


def test_a_searched_table_saves_to_a_checkpoint_that_rebuilds_it(tmp_path):
    from models.checkpoints import CheckpointError, load_checkpoint, save_checkpoint
    from models.dl2.search import TABLE_SYSTEM, load_table

    table = ConfigTable(
        MappingProxyType({"wlm": (1, 5), "resnet-50": (3, 2)}), interval_s=None, trigger="events"
    )
    sha = table.save(tmp_path / "a.pt")
    assert table.save(tmp_path / "b.pt") == sha, "the same table gives the same bytes"
    back = load_table(tmp_path / "a.pt", sha256=sha, name="dl2-table")
    assert dict(back.table) == dict(table.table) and back.name == "dl2-table"
    assert (back.interval_s, back.trigger) == (None, "events")
    with pytest.raises(CheckpointError, match="sha256"):
        load_table(tmp_path / "a.pt", sha256="0" * 64)
    # Weights that disagree with the registered config are refused.
    ckpt = load_checkpoint(tmp_path / "a.pt")
    state = {"table": {**ckpt.state["table"], "wlm": ckpt.state["table"]["wlm"] + 1}}
    save_checkpoint(tmp_path / "c.pt", system=TABLE_SYSTEM, config=ckpt.config, state=state)
    with pytest.raises(CheckpointError, match="differs"):
        load_table(tmp_path / "c.pt")
