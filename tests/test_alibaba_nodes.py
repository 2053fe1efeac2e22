"""Alibaba GPU 2023 as a cluster: the node list read as replay servers (per-server GPUs,
types, CPU and memory), pods of every phase replayed on it, CPU and memory as constraints,
and jobs without a recorded end censored at the trace's end."""

from __future__ import annotations

import os

import numpy as np
import pytest

from models.heuristics import REPLAYS
from pipelines.cli import main
from tests.conftest import TRACES
from tracelib.ingest import IngestError
from tracelib.ingest.nodes import MIB_GB, read_node_list
from tracelib.sim.replay import ReplayCluster, ReplayJobs, replay
from warehouse import connect, read_frame

PUBLIC = TRACES / "public"
NODES = PUBLIC / "openb_node_list_sample.csv"
"""10 nodes: G2, T4, P100, V100M16, V100M32 and A10 servers of 1 to 8 GPUs, two without GPUs."""
OPENB = PUBLIC / "openb_pod_list_sample.csv"
"""32 pods of every phase, shares, multi-GPU pods and gpu_spec constraints."""


def ingest_openb(warehouse_path) -> str:
    """Ingests the pod list through the CLI with the Alibaba GPU 2023 mapping; its source id."""
    args = ["ingest", str(OPENB), "--format", "generic", "--mapping", "alibaba-gpu-2023"]
    assert main([*args, "--quiet"]) == 0
    with connect(warehouse_path) as con:
        return read_frame(con, "SELECT source_id FROM trace_sources")["source_id"][0]


def test_the_node_list_is_the_cluster_server_by_server():
    nodes = read_node_list(NODES)
    c = nodes.cluster
    assert c.n_servers == 10
    assert c.server_gpus == (8, 8, 2, 8, 4, 8, 8, 1, 0, 0)
    assert c.gpu_types[:4] == ("G2", "G2", "T4", "T4") and c.gpu_types[8] == ""
    assert c.total_gpus == 47 and c.gpus_per_server == 8
    assert c.server_cpus[3] == 128.0  # milli-cores -> cores
    assert c.server_mem_gb[0] == pytest.approx(786432 * 2**20 / 1e9)  # MiB -> GB
    assert "47 GPUs" in nodes.describe() and "2 G2 x 8" in nodes.describe()


@pytest.mark.parametrize(
    ("line", "field", "row"),
    [
        ("openb-node-0000,96000,786432,eight,G2", "gpu", 2),
        ("openb-node-0000,-1,786432,8,G2", "cpu_milli", 2),
        ("openb-node-0000,96000,786432,8,", "model", 2),
        ("openb-node-0001,96000,786432,8,G2", "sn", 3),  # openb-node-0001 again on row 3
    ],
)
def test_a_bad_node_row_names_file_row_and_field(
    tmp_path, capsys, warehouse_path, line, field, row
):
    bad = tmp_path / "nodes.csv"
    lines = NODES.read_text().splitlines()
    lines[1] = line
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(IngestError, match=f"row {row}, field {field}"):
        read_node_list(bad)
    source = ingest_openb(warehouse_path)
    capsys.readouterr()
    assert main(["replay", source, "--nodes", str(bad), "--scheduler", "fifo", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and f"field {field}" in err


def test_only_a_regular_file_is_read(tmp_path):
    fifo = tmp_path / "nodes.csv"
    os.mkfifo(fifo)
    with pytest.raises(IngestError, match=r"nodes\.csv"):
        read_node_list(fifo)


def test_every_pod_replays_on_the_node_list(warehouse_path, capsys):
    source = ingest_openb(warehouse_path)
    with connect(warehouse_path) as con:
        jobs = read_frame(con, "SELECT * FROM jobs WHERE source_id = ?", [source])
    capsys.readouterr()
    assert (
        main(
            [
                "replay",
                source,
                "--nodes",
                str(NODES),
                "--scheduler",
                "fifo",
                "--scheduler",
                "fifo-fgd",
                "--quiet",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    counts = dict(jobs["status"].value_counts().iter_rows())
    assert sum(counts.values()) == 32  # no pod left out for its phase
    assert "32 jobs replayed; cluster 10 servers (47 GPUs: " in out
    assert (
        f"replayed: {counts['completed']} completed, {counts['running']} running (censored at "
        f"trace end), {counts['pending']} pending, {counts['failed']} failed" in out
    )
    assert "left out" not in out
    assert "GPUs allocated at trace end" in out and "jobs waiting then" in out
    with connect(warehouse_path) as con:
        rows = read_frame(con, "SELECT scheduler, count(*) AS n FROM eval_jobs GROUP BY 1")
    assert rows["n"].to_list() == [32, 32]


def test_a_running_pod_holds_its_resources_until_the_trace_ends(warehouse_path, capsys):
    source = ingest_openb(warehouse_path)
    capsys.readouterr()
    assert main(["replay", source, "--servers", "64", "--scheduler", "fifo", "--quiet"]) == 0
    with connect(warehouse_path) as con:
        got = read_frame(con, "SELECT job_id, arrival_s, start_s, finish_s FROM eval_jobs")
    by_id = {r["job_id"]: r for r in got.iter_rows(named=True)}
    # The sample's first pod arrives at 25,711 s; its latest recorded moment is pod 0031's
    # deletion at 1,942,336 s: a running pod started at once finishes there, whatever its
    # recorded deletion time (168,905 s for pod 0002).
    end = 1942336 - 25711
    for pod in ("openb-pod-0002", "openb-pod-0009", "openb-pod-0016"):
        assert by_id[pod]["start_s"] == pytest.approx(by_id[pod]["arrival_s"])
        assert by_id[pod]["finish_s"] == pytest.approx(end)
    # A pending pod keeps its recorded lifetime (deletion - scheduled).
    assert by_id["openb-pod-0004"]["finish_s"] - by_id["openb-pod-0004"]["start_s"] == (
        pytest.approx(247755 - 229447)
    )


def two_jobs(cpus: tuple[float, float]) -> ReplayJobs:
    return ReplayJobs(
        arrival_s=np.array([0.0, 10.0]),
        duration_s=np.array([100.0, 100.0]),
        gpus=np.array([1.0, 1.0]),
        cpus=np.array(cpus),
        mem_gb=np.array([1.0, 1.0]),
    )


@pytest.mark.parametrize("rule", ["fifo", "fifo-fgd"])
def test_a_pod_that_fits_the_gpus_but_not_the_cpu_waits(rule):
    cluster = ReplayCluster(1, 8.0, server_gpus=(8.0,), server_cpus=(16.0,), server_mem_gb=(64.0,))
    # 7 GPUs are free for the second pod, but 12 + 12 cores exceed the server's 16.
    result = replay(two_jobs((12.0, 12.0)), cluster, REPLAYS.create(rule)).jobs
    assert result["start_s"].to_list() == [0.0, 100.0]
    result = replay(two_jobs((8.0, 8.0)), cluster, REPLAYS.create(rule)).jobs
    assert result["start_s"].to_list() == [0.0, 10.0]


def test_servers_differ_in_gpus_and_cpu_only_pods_prefer_gpu_less_servers():
    cluster = ReplayCluster(
        3,
        8.0,
        ("A", "B", ""),
        server_gpus=(8.0, 2.0, 0.0),
        server_cpus=(32.0, 32.0, 32.0),
        server_mem_gb=(64.0, 64.0, 64.0),
    )
    assert cluster.total_gpus == 10
    jobs = ReplayJobs(
        arrival_s=np.zeros(3),
        duration_s=np.full(3, 50.0),
        gpus=np.array([2.0, 2.0, 0.0]),
        gpu_types=np.array(["B", "B", ""], dtype=object),
        cpus=np.array([1.0, 1.0, 30.0]),
        mem_gb=np.ones(3),
    )
    result = replay(jobs, cluster, REPLAYS.create("fifo")).jobs
    # Type B has one server of 2 GPUs: the second B pod waits for the first.
    assert result["start_s"].to_list() == [0.0, 50.0, 0.0]


def test_a_pod_no_server_can_hold_is_named():
    cluster = ReplayCluster(1, 8.0, server_gpus=(8.0,), server_cpus=(16.0,))
    with pytest.raises(Exception, match="CPU"):
        replay(two_jobs((32.0, 1.0)), cluster, REPLAYS.create("fifo"))


def test_mib_to_gb_matches_the_pod_mapping():
    assert MIB_GB == 2**20 / 1e9


def test_allocation_and_waiting_pods_at_the_trace_end():
    import polars as pl

    from pipelines.replay import at_trace_end

    # Hand-checked: at t = 100 jobs 0 (0.5 GPU) and 2 (2 GPUs, censored: it ends at 100)
    # hold GPUs, job 1 finished at 50, job 3 arrived at 90 and starts at 120, job 4 arrives
    # after the end.
    jobs = pl.DataFrame(
        {
            "arrival_s": [0.0, 0.0, 10.0, 90.0, 150.0],
            "start_s": [0.0, 0.0, 10.0, 120.0, 150.0],
            "finish_s": [200.0, 50.0, 100.0, 130.0, 160.0],
        }
    )
    got = at_trace_end(jobs, np.array([0.5, 8.0, 2.0, 1.0, 1.0]), 100.0, 10.0)
    assert got == {"allocation_at_end": pytest.approx(0.25), "waiting_at_end": 1}


def test_scaled_node_list_keeps_each_type_and_its_server_sizes():
    from pipelines.replay import scaled
    from tracelib.ingest.nodes import read_node_list

    cluster = read_node_list(str(NODES)).cluster
    half, double = scaled(cluster, 0.5), scaled(cluster, 2.0)
    # Every GPU type keeps at least one server; each type's servers are the list's, in
    # order, repeated above 1.
    assert set(half.gpu_types) == set(cluster.gpu_types) == set(double.gpu_types)
    assert double.n_servers == 2 * cluster.n_servers
    assert double.total_gpus == 2 * cluster.total_gpus
    assert sum(double.server_cpus) == 2 * sum(cluster.server_cpus)
    assert half.n_servers < cluster.n_servers
    for small in (half, double):
        by_type = {}
        for gpu_type, gpus in zip(small.gpu_types, small.server_gpus, strict=True):
            by_type.setdefault(gpu_type, set()).add(gpus)
        listed = {}
        for gpu_type, gpus in zip(cluster.gpu_types, cluster.server_gpus, strict=True):
            listed.setdefault(gpu_type, set()).add(gpus)
        assert all(by_type[t] <= listed[t] for t in by_type)
        assert small.gpus_per_server == max(small.server_gpus)


def test_a_job_starting_exactly_at_the_trace_end_is_waiting_not_held():
    import polars as pl

    from pipelines.replay import at_trace_end

    # One 8-GPU server. Job 0 holds it to the trace's end (censored there); job 1 waited
    # for it and starts at that instant; job 2 finished earlier.
    result = pl.DataFrame(
        {
            "arrival_s": [0.0, 10.0, 0.0],
            "start_s": [0.0, 100.0, 0.0],
            "finish_s": [100.0, 150.0, 5.0],
        }
    )
    end = at_trace_end(result, np.array([8.0, 8.0, 8.0]), end_s=100.0, total=8.0)
    assert end == {"allocation_at_end": 1.0, "waiting_at_end": 1}


def test_a_preemptive_rules_allocation_at_the_end_is_not_claimed(tmp_path):
    from pipelines.replay import at_end_text

    # Its rows keep a job's first start and its finish, not its pauses: a preempted job
    # would count as held. Said so instead of a figure (above 1 on a half-size cluster).
    unknown = {"allocation_at_end": None, "waiting_at_end": None}
    assert "not known (preemptive" in at_end_text(unknown)
    assert at_end_text({"allocation_at_end": 0.5, "waiting_at_end": 3}) == (
        "GPUs allocated at trace end 0.500, 3 jobs waiting then"
    )
