"""Public traces as they come: each through its shipped format or mapping, end to end
(CLI ingest -> `jobs` rows), on small hand-made samples in the published layouts
(tests/data/traces/public), plus the generic mapping's options those traces need."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from datetime import datetime, timedelta

import polars as pl
import pytest

from pipelines.cli import main
from tests.conftest import TRACES
from tracelib.ingest import IngestError, Mapping, load_trace
from tracelib.ingest.generic import SHIPPED_MAPPINGS, shipped_mapping
from tracelib.workloads import DeriveConfig, derive_workloads
from warehouse import connect, read_frame

PUBLIC = TRACES / "public"
OPENB = PUBLIC / "openb_pod_list_sample.csv"
BASE_2023 = datetime(2023, 1, 1)


def ingest(path, fmt, *extra) -> tuple[pl.DataFrame, str]:
    """Ingest through the CLI into $SCHEDLAB_WAREHOUSE; (every job in it, what it printed)."""
    buffer = io.StringIO()
    with redirect_stdout(buffer):
        assert main(["ingest", str(path), "--format", fmt, "--quiet", *extra]) == 0
    with connect() as con:
        jobs = read_frame(con, "SELECT * FROM jobs ORDER BY job_id")
    return jobs, buffer.getvalue()


def rows(jobs: pl.DataFrame) -> dict[str, dict]:
    return {r["job_id"]: r for r in jobs.iter_rows(named=True)}


def csv_rows(path) -> list[dict[str, str]]:
    lines = path.read_text().splitlines()
    header = lines[0].split(",")
    return [dict(zip(header, line.split(","), strict=True)) for line in lines[1:]]


# -- Alibaba GPU 2023 (openb pod lists) -----------------------------------------------------


def test_openb_pod_list_through_the_shipped_mapping(warehouse_path):
    jobs, out = ingest(OPENB, "generic", "--mapping", "alibaba-gpu-2023")
    pods = csv_rows(OPENB)
    assert jobs.height == len(pods) == 32
    got = rows(jobs)
    for pod in pods:
        job = got[pod["name"]]
        # Fractional GPUs: num_gpu times the share of each GPU (gpu_milli / 1000).
        assert job["num_gpus"] == pytest.approx(int(pod["num_gpu"]) * int(pod["gpu_milli"]) / 1000)
        assert job["num_cpus"] == pytest.approx(int(pod["cpu_milli"]) / 1000)  # milli-cores
        assert job["mem_gb"] == pytest.approx(int(pod["memory_mib"]) * 2**20 / 1e9)  # MiB
        assert job["gpu_type"] == (pod["gpu_spec"] or None)
        # Offsets in seconds from the trace's start, on the mapping's base date.
        assert job["submit_time"] == BASE_2023 + timedelta(seconds=int(pod["creation_time"]))
        assert job["start_time"] == BASE_2023 + timedelta(seconds=int(pod["scheduled_time"]))
        assert job["duration_s"] == int(pod["deletion_time"]) - int(pod["scheduled_time"])
        phase = {"Succeeded": "completed", "Failed": "failed", "Running": "running"}
        assert job["status"] == phase.get(pod["pod_phase"], "pending")
    # Shared GPUs stay shares of one GPU; multi-GPU pods stay whole.
    assert got["openb-pod-0001"]["num_gpus"] == pytest.approx(0.46)
    assert got["openb-pod-0005"]["num_gpus"] == 8.0
    assert got["openb-pod-0004"]["gpu_type"] == "V100M16|V100M32"
    # The ingest says what derive will leave out, instead of derive failing later.
    assert "derive keeps completed, failed, killed jobs by default; left out:" in out
    assert "running" in out and "pending" in out


def test_a_mapping_file_can_extend_a_shipped_one_and_move_the_base(tmp_path):
    mapping = tmp_path / "openb.toml"
    mapping.write_text(
        'extends = "alibaba-gpu-2023"\n[time]\nbase = 2023-06-01 08:00:00\n'
        '[status]\nRunning = "completed"\n'
    )
    loaded = load_trace(OPENB, "generic", mapping=mapping)
    job = rows(loaded.jobs)["openb-pod-0002"]
    assert job["submit_time"] == datetime(2023, 6, 1, 8) + timedelta(seconds=150999)
    assert job["status"] == "completed"  # the override's [status] entry
    assert job["num_gpus"] == pytest.approx(0.25)  # the rest comes from the shipped mapping


def test_a_gpu_share_outside_one_gpu_is_quarantined_naming_it(tmp_path):
    bad = tmp_path / "pods.csv"
    lines = OPENB.read_text().splitlines()
    lines[2] = lines[2].replace(",1,460,", ",1,1500,")
    bad.write_text("\n".join(lines) + "\n")
    loaded = load_trace(bad, "generic", mapping=shipped_mapping("alibaba-gpu-2023"))
    assert loaded.jobs.height == 31
    [(record, fld, reason)] = loaded.quarantine.select("record_no", "field", "reason").rows()
    assert (record, fld) == (3, "gpu_share")
    assert "column 'gpu_milli'" in reason and "1.5" in reason


def test_openb_jobs_derive_with_their_types_and_shares():
    loaded = load_trace(OPENB, "generic", mapping="alibaba-gpu-2023")
    sources = loaded.source
    _, wj = derive_workloads(loaded.jobs, sources, DeriveConfig(name="openb", jobs_per_sequence=8))
    by_id = rows(wj)
    assert by_id["openb-pod-0001"]["num_gpus"] == pytest.approx(0.46)
    assert by_id["openb-pod-0001"]["num_workers"] == 1
    assert by_id["openb-pod-0003"]["gpu_type"] == "T4"


# -- Helios -----------------------------------------------------------------------------------


def test_helios_cluster_log_through_its_format_and_the_shipped_mapping(warehouse_path):
    path = PUBLIC / "helios_cluster_log.csv"
    jobs, out = ingest(path, "helios")
    logs = csv_rows(path)
    assert jobs.height == len(logs) == 30
    got = rows(jobs)
    states = {"COMPLETED": "completed", "CANCELLED": "killed"}
    for log in logs:
        job = got[log["job_id"]]
        assert job["num_gpus"] == float(log["gpu_num"])  # wide jobs keep their size
        assert job["duration_s"] == float(log["duration"])
        assert job["submit_time"] == datetime.fromisoformat(log["submit_time"])
        assert job["status"] == states.get(log["state"], "failed")  # TIMEOUT, NODE_FAIL fail
        assert job["vc"] == log["vc"] and job["gpu_type"] is None
    assert max(got[j]["num_gpus"] for j in got) == 128.0
    # Wide jobs are kept whole at ingest, and the ingest states derive's cap.
    assert "ask for more than 16 GPUs (up to 128)" in out
    # The shipped mapping by name reads the file the same way.
    again = load_trace(path, "generic", mapping="helios").jobs
    assert again.drop("source_id").equals(jobs.sort("job_id").drop("source_id").sort("job_id"))


# -- PAI 2020 ---------------------------------------------------------------------------------


def test_pai_2020_tables_through_the_pai_format(warehouse_path):
    folder = PUBLIC / "pai2020"
    jobs, out = ingest(folder, "pai")
    job_lines = [line.split(",") for line in (folder / "pai_job_table.csv").read_text().split()]
    assert jobs.height == len(job_lines) == 20
    got = rows(jobs)
    tasks: dict[str, list[list[str]]] = {}
    for line in (folder / "pai_task_table.csv").read_text().split():
        fields = line.split(",")
        tasks.setdefault(fields[0], []).append(fields)
    for name, _, user, status, start, end in job_lines:
        job = got[name]
        gpu_tasks = [t for t in tasks[name] if t[8]]
        want_gpus = sum(float(t[2]) * float(t[8]) / 100 for t in gpu_tasks)
        assert job["num_gpus"] == pytest.approx(want_gpus)  # percent of a GPU, per instance
        assert job["gpu_type"] == ("|".join(sorted({t[9] for t in gpu_tasks})) or None)
        assert job["user_name"] == user
        assert job["submit_time"] == datetime(1970, 1, 1) + timedelta(seconds=float(start))
        if end:
            assert job["end_time"] == datetime(1970, 1, 1) + timedelta(seconds=float(end))
        assert job["status"] == {"Terminated": "completed", "Failed": "failed"}.get(
            status, "running"
        )
    fractional = [j for j in got.values() if 0 < j["num_gpus"] < 1]
    assert fractional and all(j["num_gpus"] == 0.5 for j in fractional)
    assert "ask for more than 16 GPUs (up to 32)" in out


# -- Philly -----------------------------------------------------------------------------------


def test_philly_cluster_job_log_as_published(warehouse_path):
    path = PUBLIC / "philly_cluster_job_log.json"
    jobs, out = ingest(path, "philly")
    published = json.loads(path.read_text())
    assert jobs.height == len(published) == 24
    got = rows(jobs)
    fmt = "%Y-%m-%d %H:%M:%S"
    for element in published:
        job = got[element["jobid"]]
        attempts = element["attempts"]
        held = max(sum(len(d["gpus"]) for d in a["detail"]) for a in attempts)
        run = sum(
            (
                datetime.strptime(a["end_time"], fmt) - datetime.strptime(a["start_time"], fmt)
            ).total_seconds()
            for a in attempts
        )
        assert job["num_gpus"] == held
        assert job["duration_s"] == run
        assert job["submit_time"] == datetime.strptime(element["submitted_time"], fmt)
        assert job["status"] == {"Pass": "completed", "Killed": "killed"}.get(
            element["status"], "failed"
        )
    assert got["application_1506638472019_14023"]["num_gpus"] == 64
    assert "ask for more than 16 GPUs (up to 64)" in out


def test_a_philly_csv_without_a_job_id_gets_stable_ids_from_file_and_row(tmp_path):
    path = PUBLIC / "philly_jobs_without_id.csv"
    mapping = Mapping(
        columns={
            "submit_time": "submitted_time",
            "num_gpus": "num_gpus",
            "duration": "run_time_s",
            "status": "status",
            "vc": "vc",
            "user_name": "user",
        },
        time_format="%Y-%m-%d %H:%M:%S",
        status_map={"Pass": "completed"},
    )
    first = load_trace(path, "generic", mapping=mapping)
    # Jobs sharing a submit second are all kept: the id is the file name and line number.
    assert first.quarantine.height == 0 and first.jobs.height == 24
    assert first.jobs.get_column("job_id").to_list()[:3] == [
        "philly_jobs_without_id.csv:2",
        "philly_jobs_without_id.csv:3",
        "philly_jobs_without_id.csv:4",
    ]
    again = load_trace(path, "generic", mapping=mapping)
    assert again.jobs.equals(first.jobs)


def test_no_status_column_defaults_and_says_so(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text("submitted,gpus,run_s\n1700000000,1,60\n1700000001,2,\n")
    mapping = Mapping(
        columns={"submit_time": "submitted", "num_gpus": "gpus", "duration": "run_s"},
        epoch_unit="s",
    )
    loaded = load_trace(path, "generic", mapping=mapping)
    assert loaded.jobs.get_column("status").to_list() == ["completed", "unknown"]
    assert any(n.startswith("no status column") for n in loaded.notes)
    assert any("left out: 1 unknown" in n for n in loaded.notes)


# -- the mapping's options ------------------------------------------------------------------


def test_every_unit_converts(tmp_path):
    path = tmp_path / "units.csv"
    path.write_text("id,t,gpu,cpu,mem\nj1,1700000000,50,2500,2048\n")
    cases = {
        ("bytes", 2048 * 1e-9),
        ("KiB", 2048 * 1024 / 1e9),
        ("MiB", 2048 * 2**20 / 1e9),
        ("GiB", 2048 * 2**30 / 1e9),
        ("MB", 2.048),
        ("GB", 2048.0),
    }
    for unit, mem in cases:
        mapping = Mapping.from_dict(
            {
                "columns": {
                    "job_id": "id",
                    "submit_time": "t",
                    "num_gpus": "gpu",
                    "num_cpus": "cpu",
                    "mem_gb": "mem",
                },
                "time": {"epoch_unit": "s"},
                "units": {"num_gpus": "percent", "num_cpus": "milli", "mem_gb": unit},
            }
        )
        job = load_trace(path, "generic", mapping=mapping).jobs.row(0, named=True)
        assert job["mem_gb"] == pytest.approx(mem), unit
        assert job["num_gpus"] == 0.5 and job["num_cpus"] == 2.5


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"units": {"mem_gb": "parsecs"}}, "[units] mem_gb must be one of"),
        ({"units": {"epochs": "milli"}}, "[units] cannot convert 'epochs'"),
        ({"time": {"format": "%Y", "base": "2023-01-01"}}, "[time] base needs epoch_unit"),
        ({"time": {"epoch_unit": "s", "base": "yesterday"}}, "[time] base must be a date-time"),
        ({"extends": "philly-csv"}, "extends must name a shipped mapping"),
    ],
)
def test_bad_options_exit_2_naming_the_key(doc, message, tmp_path, warehouse_path, capsys):
    base = {"columns": {"submit_time": "creation_time", "num_gpus": "num_gpu"}}
    base.update(doc)
    base.setdefault("time", {"epoch_unit": "s"})
    lines = []
    for key in ("extends",):
        if key in base:
            lines.append(f"{key} = {json.dumps(base.pop(key))}")
    for section, table in base.items():
        lines.append(f"[{section}]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in table.items()]
    mapping = tmp_path / "bad.toml"
    mapping.write_text("\n".join(lines) + "\n")
    assert main(["ingest", str(OPENB), "--format", "generic", "--mapping", str(mapping)]) == 2
    err = capsys.readouterr().err
    assert message in err and "bad.toml" in err and "Traceback" not in err
    assert not warehouse_path.exists()


def test_every_shipped_mapping_loads():
    for name in SHIPPED_MAPPINGS:
        assert isinstance(shipped_mapping(name), Mapping)
    with pytest.raises(IngestError, match="cannot read mapping file"):
        load_trace(OPENB, "generic", mapping="no-such-mapping")
