"""The Slurm collector on recorded samples of `squeue --json`, `sinfo --json` and
`sacct --json` (Slurm 24.05, data parser v0.0.40; tests/data/shadow/slurm/README.md), and on broken
variants of them: a bad item is skipped with its reason, a bad file is exit 2 naming it."""

from __future__ import annotations

import copy
import json
import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pipelines.cli import main
from tests.conftest import DATA
from tracelib.shadow.collect import CollectError, ItemError, expand_hostlist
from tracelib.shadow.collect_slurm import collect_slurm, gpu_request

SLURM = DATA / "shadow" / "slurm"


def load(name: str) -> dict:
    return json.loads((SLURM / f"{name}.json").read_text())


def collect(squeue=None, sinfo=None, sacct=None, **kw):
    return collect_slurm(squeue or load("squeue"), sinfo or load("sinfo"), sacct, **kw)


def test_the_samples_give_the_cluster_as_slurm_saw_it():
    got = collect(sacct=load("sacct"))
    snap = got.snapshot
    assert snap.cluster == "hpc-gpu"  # meta.slurm.cluster
    assert snap.time == datetime(2026, 11, 27, 10, tzinfo=UTC)  # squeue's last_update
    servers = {s.name: s for s in snap.servers}
    # The CPU partition's nodes have no GPU: not servers of the snapshot.
    assert sorted(servers) == ["gpu01", "gpu02", "gpu03", "gpu04", "gpu05"]
    assert servers["gpu03"].gpu_type == "v100" and servers["gpu03"].free_gpus == 2.0
    assert servers["gpu01"].free_gpus == 0.0 and servers["gpu04"].free_gpus == 4.0
    assert servers["gpu05"].free_gpus == 0.0  # drained: nothing starts there
    # A group's CPUs and allocated memory are shared evenly by its nodes (MB -> GiB).
    assert servers["gpu01"].free_cpus == 48.0
    assert servers["gpu01"].free_memory_gib == pytest.approx((515000 - 131072) / 1024)
    running = {j.id: j for j in snap.running}
    assert running["4101"].servers == ["gpu01", "gpu02"] and running["4101"].gpus == 8.0
    assert running["4101"].gpu_type == "a100"
    pending = {j.id: j for j in snap.pending}
    assert pending["4103"].gpus == 4.0  # tres_per_node 4 x node_count 1
    assert pending["4104"].gpus == 1.0 and pending["4104"].duration_estimate_s is None
    assert pending["4103"].duration_estimate_s == 7200.0  # time_limit 120 minutes
    assert [str(s) for s in got.skipped] == [
        "squeue: jobs[4] (job 4105): no GPU requested: not a GPU job",
        "sacct: jobs[5] (job 4100): no GPU requested: not a GPU job",
    ]


def test_observations_follow_each_job_to_its_end():
    got = collect(sacct=load("sacct"))
    kinds = {(o.job, o.kind): o for o in got.observations}
    assert {k for j, k in kinds if j == "4099"} == {"submitted", "started", "finished"}
    assert kinds[("4097", "preempted")].time == datetime(2026, 11, 27, 7, 30, tzinfo=UTC)
    assert ("4098", "failed") in kinds  # NODE_FAIL
    assert ("4096", "cancelled") in kinds and ("4096", "started") not in kinds  # cancelled pending
    # A pending job's start_time is Slurm's forecast, not a start.
    assert ("4103", "started") not in kinds
    assert kinds[("4101", "started")].servers == ["gpu01", "gpu02"]
    assert ("4101", "finished") not in kinds  # its end_time is the time limit, still ahead
    times = [o.time for o in got.observations]
    assert times == sorted(times)


def test_gres_and_tres_strings():
    assert gpu_request("gres/gpu:a100:4", "f") == (4.0, "a100")
    assert gpu_request("gres/gpu:2", "f") == (2.0, None)
    assert gpu_request("cpu=8,mem=64G,gres/gpu=8,gres/gpu:a100=8", "f") == (8.0, "a100")
    assert gpu_request("gpu:a100:4(IDX:0,2-3),gpu:a100:1(IDX:5)", "f") == (5.0, "a100")
    assert gpu_request("cpu=2,mem=4G", "f") == (None, None)
    with pytest.raises(ItemError, match="bad GPU count"):
        gpu_request("gres/gpu:a100:four", "tres_per_node")


def test_host_lists_expand_as_slurm_writes_them():
    assert expand_hostlist("gpu[01-03,07],login1") == ["gpu01", "gpu02", "gpu03", "gpu07", "login1"]
    assert expand_hostlist("r[1-2]-n[1-2]") == ["r1-n1", "r1-n2", "r2-n1", "r2-n2"]
    assert expand_hostlist("None assigned") == []
    for bad in ("gpu[01-", "gpu[3-1]", "gpu[a-b]", "n[0-99999999]"):
        with pytest.raises(ItemError):
            expand_hostlist(bad)


def broken(mutate) -> dict:
    data = copy.deepcopy(load("squeue"))
    mutate(data["jobs"])
    return data


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda jobs: jobs[2].pop("job_id"), "jobs[2]: job_id: missing"),
        (lambda jobs: jobs[2].update(job_state="PENDING?"), "jobs[2] (job 4103): job_state"),
        (
            lambda jobs: jobs[2].update(submit_time={"set": True, "number": "yesterday"}),
            "jobs[2] (job 4103): submit_time: not a UNIX time",
        ),
        (
            lambda jobs: jobs[2].update(tres_per_node="gres/gpu:a100:lots"),
            "jobs[2] (job 4103): tres_per_node: bad GPU count",
        ),
        (
            lambda jobs: jobs[0].update(nodes="gpu[01-02,99]"),
            "jobs[0] (job 4101): nodes: runs on 'gpu99', which sinfo does not list",
        ),
        (lambda jobs: jobs.__setitem__(2, ["not", "a", "job"]), "jobs[2]: not a JSON object"),
        (
            lambda jobs: jobs.append(copy.deepcopy(jobs[0])),
            "jobs[6] (job 4101): job_id: 4101 appears twice",
        ),
    ],
)
def test_a_bad_job_is_skipped_with_its_reason(mutate, reason):
    got = collect(squeue=broken(mutate))
    assert any(reason in str(s) for s in got.skipped), [str(s) for s in got.skipped]
    # The other jobs still make the snapshot.
    assert len(got.snapshot.running) + len(got.snapshot.pending) >= 3


def test_a_bad_node_group_is_skipped_and_its_jobs_with_it():
    sinfo = load("sinfo")
    sinfo["sinfo"][0]["gres"]["total"] = "gpu:a100:x"
    got = collect(sinfo=sinfo)
    assert "sinfo: sinfo[0]: gres.total: bad GPU count" in [
        str(s)[: len("sinfo: sinfo[0]: gres.total: bad GPU count")] for s in got.skipped
    ]
    assert "gpu01" not in {s.name for s in got.snapshot.servers}
    assert any("4101" in str(s) and "gpu01" in str(s) for s in got.skipped)


def test_scontrol_node_lists_read_too():
    nodes = {
        "nodes": [
            {"name": "gpu01", "gres": "gpu:a100:8(S:0-1)", "gres_used": "gpu:a100:6(IDX:0-5)",
             "cpus": 64, "alloc_cpus": 48, "real_memory": 512000, "alloc_memory": 256000,
             "state": ["MIXED"]},
            {"name": "gpu02", "gres": "gpu:a100:8(S:0-1)", "gres_used": "gpu:a100:0(IDX:N/A)",
             "cpus": 64, "alloc_cpus": 0, "real_memory": 512000, "alloc_memory": 0,
             "state": ["DOWN", "NOT_RESPONDING"]},
        ]
    }  # fmt: skip
    squeue = {"jobs": [], "meta": {"slurm": {"cluster": "c"}}}
    servers = {s.name: s for s in collect_slurm(squeue, nodes).snapshot.servers}
    assert servers["gpu01"].free_gpus == 2.0 and servers["gpu01"].free_cpus == 16.0
    assert servers["gpu02"].free_gpus == 0.0  # down


@pytest.mark.parametrize(
    ("squeue", "sinfo", "message"),
    [
        ([1, 2], load("sinfo"), "squeue: top level: expected a JSON object, got list"),
        ({"meta": {}}, load("sinfo"), "squeue: jobs: missing"),
        ({"jobs": {}}, load("sinfo"), "squeue: jobs: expected a list, got dict"),
        (load("squeue"), {"partitions": []}, "sinfo: sinfo: missing"),
        ({"jobs": []}, load("sinfo") | {"meta": {}}, "names no cluster"),
    ],
)
def test_an_unusable_file_is_a_collect_error_naming_file_and_field(squeue, sinfo, message):
    with pytest.raises(CollectError, match=message):
        collect_slurm(squeue, sinfo)


def test_cli_writes_the_snapshot_and_observations(tmp_path, capsys):
    out = tmp_path / "out.json"
    args = ["collect", "slurm", "--squeue", str(SLURM / "squeue.json"), "--sinfo"]
    args += [str(SLURM / "sinfo.json"), "--sacct", str(SLURM / "sacct.json"), "--out", str(out)]
    assert main([*args, "--cluster", "lab"]) == 0
    written = json.loads(out.read_text())
    assert written["snapshot"]["cluster"] == "lab"
    assert written["observe"]["cluster"] == "lab"
    assert len(written["observe"]["observations"]) == 17
    err = capsys.readouterr().err
    assert "lab at 2026-11-27 10:00:00 UTC: 5 servers, 2 running, 2 pending" in err
    assert "skipped" in err and "job 4105" in err


def test_cli_bad_file_exits_2_naming_it(tmp_path, capsys):
    bad = tmp_path / "squeue.json"
    bad.write_text('{"jobs": [')
    code = main(["collect", "slurm", "--squeue", str(bad), "--sinfo", str(SLURM / "sinfo.json")])
    err = capsys.readouterr().err
    assert code == 2 and str(bad) in err and "not JSON" in err and "Traceback" not in err
    missing = tmp_path / "nope.json"
    code = main(["collect", "slurm", "--squeue", str(missing), "--sinfo", str(bad)])
    assert code == 2 and str(missing) in capsys.readouterr().err


def test_cli_post_to_nothing_fails_clearly(capsys):
    args = ["collect", "slurm", "--squeue", str(SLURM / "squeue.json"), "--sinfo"]
    code = main([*args, str(SLURM / "sinfo.json"), "--post", "http://127.0.0.1:9"])
    err = capsys.readouterr().err
    assert code == 1 and "not sent" in err and "127.0.0.1:9" in err


class _Recorder(BaseHTTPRequestHandler):
    """A stand-in decision service: records each request, answers as the service does (or
    with 401 without the right token)."""

    seen: list = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.seen.append((self.path, self.headers.get("Authorization"), body))
        if self.headers.get("Authorization") != "Bearer s3cret-token-0123456789":
            answer, code = {"detail": [{"field": "authorization", "message": "bad token"}]}, 401
        elif self.path == "/v1/decide":
            answer, code = {"decision_id": "d" * 32, "start": [{"job": "4104"}], "wait": []}, 200
        else:
            answer, code = {"accepted": len(body["observations"])}, 200
        data = json.dumps(answer).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def service():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    _Recorder.seen = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", _Recorder.seen
    server.shutdown()
    server.server_close()


def test_cli_posts_the_snapshot_and_the_observations(service, capsys, monkeypatch):
    url, seen = service
    args = ["collect", "slurm", "--squeue", str(SLURM / "squeue.json"), "--sinfo"]
    args += [str(SLURM / "sinfo.json"), "--post", url]
    monkeypatch.setenv("SCHEDLAB_SHADOW_TOKEN", "s3cret-token-0123456789")
    assert main(args) == 0
    assert [(path, auth) for path, auth, _ in seen] == [
        ("/v1/decide", "Bearer s3cret-token-0123456789"),
        ("/v1/observe", "Bearer s3cret-token-0123456789"),
    ]
    assert seen[0][2]["schema_version"] == 1 and len(seen[0][2]["pending"]) == 2
    assert seen[1][2]["cluster"] == "hpc-gpu" and len(seen[1][2]["observations"]) == 9
    assert "decision " + "d" * 32 + " starts 1 job(s), 9 observation(s)" in capsys.readouterr().err
    monkeypatch.setenv("SCHEDLAB_SHADOW_TOKEN", "wrong")
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "/v1/decide answered 401" in err and "bad token" in err
