"""`schedlab serve-policy` through a real HTTP client against the running server (a child
process): decisions, the Kubernetes extender verbs, observations, health, metrics, the
token, oversized and malformed bodies, and kill -9 losing no acknowledged record."""

from __future__ import annotations

import copy
import json
import threading
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from pipelines.shadow.launch import ServerProcess
from tests.shadow.test_schemas import snapshot_body
from tracelib.shadow.spool import read_spool, spool_days

K8S = Path(__file__).parents[1] / "data" / "shadow" / "k8s"
TOKEN = "test-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
T = "2026-11-28T12:00:00Z"


def spooled(root: Path) -> list:
    """Every valid record of the spool (all days), and asserting nothing is quarantined."""
    records = []
    for day in spool_days(root):
        got, bad = read_spool(root, day)
        assert bad == [], bad
        records.extend(got)
    return records


def spool_lines(root: Path) -> int:
    return sum(len(p.read_bytes().splitlines()) for p in root.rglob("*.jsonl") if p.is_file())


@pytest.fixture(scope="module")
def fifo(tmp_path_factory):
    """A FIFO server with a token and a small body limit, and its spool directory."""
    spool = tmp_path_factory.mktemp("fifo") / "spool"
    args = ["--policy", "fifo", "--spool", str(spool), "--max-body-bytes", "65536"]
    with ServerProcess(args, env={"SCHEDLAB_SHADOW_TOKEN": TOKEN}) as server:
        with httpx.Client(base_url=server.url, headers=AUTH, timeout=30) as client:
            yield client, spool


def check_fits(snapshot: dict, decision: dict) -> None:
    """Every start is of a pending job, and the servers it uses had the free GPUs for it:
    GPUs summed over the decision's starts never exceed a server's free GPUs."""
    pending = {j["id"] for j in snapshot["pending"]}
    free = {s["name"]: s["free_gpus"] for s in snapshot["servers"]}
    started = [s["job"] for s in decision["start"]]
    assert set(started) <= pending and len(set(started)) == len(started)
    assert set(decision["wait"]) == pending - set(started)
    total_free = sum(free[n] for s in decision["start"] for n in set(s["servers"]))
    assert sum(s["gpus"] for s in decision["start"]) <= total_free + 1e-9
    for s in decision["start"]:
        assert all(n in free for n in s["servers"])


def test_decide_answers_and_spools_the_decision_first(fifo):
    client, spool = fifo
    body = snapshot_body()
    r = client.post("/v1/decide", json=body)
    assert r.status_code == 200, r.text
    decision = r.json()
    assert decision["policy"] == decision["policy_id"] == "fifo"
    assert decision["time"] == T and decision["latency_ms"] >= 0
    check_fits(body, decision)
    # The one pending job (1 GPU) fits server b (8 free GPUs) or a (1.5 free).
    assert [s["job"] for s in decision["start"]] == ["p1"]
    records = [r for r in spooled(spool) if r.kind == "decision"]
    mine = [r for r in records if r.payload["decision"]["decision_id"] == decision["decision_id"]]
    assert len(mine) == 1
    assert mine[0].payload["decision"] == decision
    assert mine[0].payload["snapshot"]["servers"][0]["free_gpus"] == 1.5


def test_a_full_cluster_starts_nothing(fifo):
    client, _ = fifo
    body = snapshot_body()
    for s in body["servers"]:
        s["free_gpus"] = 0.0
    r = client.post("/v1/decide", json=body)
    assert r.status_code == 200
    assert r.json()["start"] == [] and r.json()["wait"] == ["p1"]


def test_extender_filter_on_recorded_nodes(fifo):
    client, _ = fifo
    args = json.loads((K8S / "extender-args-nodes.json").read_text())
    r = client.post("/v1/extender/filter", json=args)
    assert r.status_code == 200, r.text
    result = r.json()
    kept = [n["metadata"]["name"] for n in result["nodes"]["items"]]
    assert kept == ["gpu-a100-01", "gpu-a100-02"]
    assert set(result["failedNodes"]) == {"gpu-v100-01", "gpu-a100-03"}
    assert "Tesla-V100" in result["failedNodes"]["gpu-v100-01"]
    assert result["error"] == ""


def test_extender_filter_with_node_names_only_keeps_them(fifo):
    client, _ = fifo
    args = json.loads((K8S / "extender-args-nodenames.json").read_text())
    r = client.post("/v1/extender/filter", json=args)
    assert r.status_code == 200
    assert r.json()["nodenames"] == args["nodenames"]


def test_extender_prioritize_scores_the_policy_s_servers(fifo):
    client, spool = fifo
    args = json.loads((K8S / "extender-args-nodes.json").read_text())
    # As kube-scheduler calls it: with the nodes its filters (and ours) kept.
    args["nodes"]["items"] = args["nodes"]["items"][:2]
    before = len(spooled(spool))
    assert not [r for r in spooled(spool) if r.cluster == "kubernetes"]
    r = client.post("/v1/extender/prioritize", json=args)
    assert r.status_code == 200, r.text
    priorities = r.json()
    assert [p["host"] for p in priorities] == ["gpu-a100-01", "gpu-a100-02"]
    assert all(p["score"] in (0, 10) for p in priorities)
    assert any(p["score"] == 10 for p in priorities)
    records = spooled(spool)
    assert len(records) == before + 1
    [decision] = [r.payload for r in records if r.cluster == "kubernetes"]
    assert decision["snapshot"]["pending"][0]["id"] == "ml-research/train-bert-7f9c4"
    assert decision["snapshot"]["pending"][0]["gpus"] == 2


def test_observe_spools_every_observation(fifo):
    client, spool = fifo
    batch = {
        "schema_version": 1,
        "cluster": "lab",
        "observations": [
            {"kind": "submitted", "job": "j9", "time": T, "gpus": 2, "user": "u"},
            {"kind": "started", "job": "j9", "time": T, "servers": ["a"]},
            {"kind": "finished", "job": "j9", "time": "2026-11-28T13:00:00Z"},
        ],
    }
    r = client.post("/v1/observe", json=batch)
    assert r.status_code == 200 and r.json() == {"accepted": 3}
    observed = [r.payload for r in spooled(spool) if r.kind == "observation"]
    assert [o["kind"] for o in observed[-3:]] == ["submitted", "started", "finished"]


def test_health_needs_no_token_but_everything_else_does(fifo):
    client, _ = fifo
    bare = httpx.Client(base_url=str(client.base_url))
    assert bare.get("/healthz").json()["policy"] == "fifo"
    for method, path in (("GET", "/metrics"), ("POST", "/v1/decide"), ("POST", "/v1/observe")):
        r = bare.request(method, path, json=snapshot_body())
        assert r.status_code == 401 and r.json()["detail"][0]["field"] == "authorization"
        wrong = bare.request(method, path, headers={"Authorization": f"Bearer {TOKEN}x"})
        assert wrong.status_code == 401


def test_metrics_count_requests_latency_and_errors(fifo):
    client, _ = fifo
    client.post("/v1/decide", json=snapshot_body())
    client.post("/v1/decide", content=b"{")
    text = client.get("/metrics").text
    assert 'shadow_requests_total{endpoint="/v1/decide",status="200"}' in text
    assert 'shadow_requests_total{endpoint="/v1/decide",status="400"}' in text
    assert 'shadow_request_seconds_bucket{endpoint="/v1/decide",le="0.05"}' in text
    assert 'shadow_errors_total{kind="invalid_body"}' in text
    assert 'shadow_errors_total{kind="unauthorized"}' in text
    assert 'shadow_spool_records_total{kind="decision"}' in text


def test_oversized_bodies_are_refused_before_parsing(fifo):
    client, spool = fifo
    before = spool_lines(spool)
    big = b'{"pad":"' + b"x" * 70_000 + b'"}'
    r = client.post("/v1/decide", content=big)
    assert r.status_code == 413 and r.json()["detail"][0]["field"] == "body"

    def chunks():  # no Content-Length: counted while it streams
        for _ in range(40):
            yield b"x" * 4096

    r = client.post("/v1/observe", content=chunks())
    assert r.status_code == 413
    assert spool_lines(spool) == before


def test_a_cluster_name_never_leaves_the_spool(fifo):
    client, spool = fifo
    body = snapshot_body()
    body["cluster"] = "../../etc"
    assert client.post("/v1/decide", json=body).status_code == 200
    files = {p.relative_to(spool).parts[0] for p in spool.rglob("*.jsonl")}
    assert "etc" in files and all(".." not in f for f in files)
    assert not (spool.parent.parent / "etc").exists()


def test_an_unwritable_spool_answers_503_and_claims_nothing(fifo):
    client, spool = fifo
    today = datetime.now(UTC).date().isoformat()
    blocked = spool / "broken" / f"{today}.jsonl"
    blocked.mkdir(parents=True)  # the day's file cannot be opened: as a failing disk
    try:
        body = snapshot_body()
        body["cluster"] = "broken"
        r = client.post("/v1/decide", json=body)
        assert r.status_code == 503 and r.json()["error"] == "spool"
        batch = _observe_body()
        batch["cluster"] = "broken"
        assert client.post("/v1/observe", json=batch).status_code == 503
    finally:
        blocked.rmdir()


# --- malformed input ---------------------------------------------------------------------


def _set(path: str, value):
    """A mutation setting `path` (dotted, list indices as numbers) to `value`."""

    def mutate(body):
        *head, last = path.split(".")
        node = body
        for key in head:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
        return body

    return mutate


def _drop(path: str):
    def mutate(body):
        *head, last = path.split(".")
        node = body
        for key in head:
            node = node[int(key)] if isinstance(node, list) else node[key]
        del node[last]
        return body

    return mutate


def _observe_body() -> dict:
    return {
        "schema_version": 1,
        "cluster": "lab",
        "observations": [{"kind": "submitted", "job": "j", "time": T, "gpus": 1}],
    }


def _extender_body() -> dict:
    return json.loads((K8S / "extender-args-nodes.json").read_text())


def _gpu_limit(body):  # "nvidia.com/gpu" has dots: set it directly
    body["pod"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "two"
    return body


MALFORMED = [
    # (endpoint, body maker, mutation, field the error names)
    ("/v1/decide", snapshot_body, _drop("servers"), "servers"),
    ("/v1/decide", snapshot_body, _drop("time"), "time"),
    ("/v1/decide", snapshot_body, _drop("schema_version"), "schema_version"),
    ("/v1/decide", snapshot_body, _set("schema_version", 2), "schema_version"),
    ("/v1/decide", snapshot_body, _set("cluster", ""), "cluster"),
    ("/v1/decide", snapshot_body, _set("cluster", "c" * 129), "cluster"),
    ("/v1/decide", snapshot_body, _set("time", "2026-11-28T12:00:00"), "time"),
    ("/v1/decide", snapshot_body, _set("time", "yesterday"), "time"),
    ("/v1/decide", snapshot_body, _set("surprise", 1), "surprise"),
    ("/v1/decide", snapshot_body, _set("servers", {"a": 1}), "servers"),
    ("/v1/decide", snapshot_body, _set("servers.0.gpus", -1), "servers.0.gpus"),
    ("/v1/decide", snapshot_body, _set("servers.0.gpus", 2.5), "servers.0.gpus"),
    ("/v1/decide", snapshot_body, _set("servers.0.free_gpus", 5), "servers.0.free_gpus"),
    ("/v1/decide", snapshot_body, _set("servers.0.free_cpus", 33), "servers.0.free_cpus"),
    ("/v1/decide", snapshot_body, _set("servers.0.cpus", "lots"), "servers.0.cpus"),
    ("/v1/decide", snapshot_body, _set("servers.0.memory_gib", "inf"), "servers.0.memory_gib"),
    ("/v1/decide", snapshot_body, _set("servers.0.name", ""), "servers.0.name"),
    ("/v1/decide", snapshot_body, _set("servers.0.name", "n" * 300), "servers.0.name"),
    ("/v1/decide", snapshot_body, _set("servers.1.name", "a"), "servers"),
    ("/v1/decide", snapshot_body, _set("servers.0.rack", "r1"), "servers.0.rack"),
    ("/v1/decide", snapshot_body, _set("pending.0.gpus", 0), "pending.0.gpus"),
    ("/v1/decide", snapshot_body, _set("pending.0.gpus", None), "pending.0.gpus"),
    (
        "/v1/decide",
        snapshot_body,
        _set("pending.0.duration_estimate_s", -5),
        "pending.0.duration_estimate_s",
    ),
    ("/v1/decide", snapshot_body, _set("pending.0.submit_time", 12), "pending.0.submit_time"),
    ("/v1/decide", snapshot_body, _drop("pending.0.id"), "pending.0.id"),
    ("/v1/decide", snapshot_body, _set("pending.0.id", "r1"), "running/pending"),
    ("/v1/decide", snapshot_body, _set("running.0.servers", ["nowhere"]), "running.0.servers"),
    ("/v1/decide", snapshot_body, _set("running.0.start_time", "soon"), "running.0.start_time"),
    ("/v1/decide", snapshot_body, _set("running", [1, 2]), "running.0"),
    ("/v1/observe", _observe_body, _set("observations", []), "observations"),
    ("/v1/observe", _observe_body, _set("observations.0.kind", "exploded"), "observations.0.kind"),
    ("/v1/observe", _observe_body, _drop("observations.0.gpus"), "observations.0.gpus"),
    (
        "/v1/observe",
        _observe_body,
        _set("observations.0.time", "2026-13-01T00:00:00Z"),
        "observations.0.time",
    ),
    ("/v1/observe", _observe_body, _set("observations.0.job", ""), "observations.0.job"),
    (
        "/v1/observe",
        _observe_body,
        _set("observations.0.kind", "started"),
        "observations.0.servers",
    ),
    ("/v1/observe", _observe_body, _drop("cluster"), "cluster"),
    ("/v1/extender/filter", _extender_body, _drop("pod"), "pod"),
    ("/v1/extender/filter", _extender_body, _drop("nodes"), "nodes"),
    ("/v1/extender/filter", _extender_body, _set("nodes.items", "all"), "nodes.items"),
    (
        "/v1/extender/prioritize",
        _extender_body,
        _gpu_limit,
        "pod.spec.containers.0.resources.limits",
    ),
    ("/v1/extender/prioritize", _extender_body, _drop("pod.metadata"), "pod.metadata"),
    (
        "/v1/extender/prioritize",
        _extender_body,
        _set("pod.spec.containers", []),
        "pod.spec.containers",
    ),
    (
        "/v1/extender/prioritize",
        _extender_body,
        _set("nodes.items.0.status.allocatable.cpu", "-3"),
        "nodes.items.0.status.allocatable.cpu",
    ),
]


RAW = [
    # (endpoint, raw bytes, field)
    ("/v1/decide", b"{not json", "body"),
    ("/v1/decide", b"", "body"),
    ("/v1/decide", b"[]", "body"),
    ("/v1/observe", b'{"schema_version": 1, "cluster": "c", "observations": [', "body"),
    ("/v1/extender/filter", b"null", "body"),
]


def test_the_corpus_is_large_enough():
    assert len(MALFORMED) + len(RAW) >= 30


@pytest.mark.parametrize(("endpoint", "make", "mutate", "field"), MALFORMED)
def test_malformed_bodies_are_refused_naming_the_field(fifo, endpoint, make, mutate, field):
    client, spool = fifo
    before = spool_lines(spool)
    r = client.post(endpoint, json=mutate(copy.deepcopy(make())))
    assert 400 <= r.status_code < 500, r.text
    fields = [d["field"] for d in r.json()["detail"]]
    assert any(f == field or f.startswith(field + ".") for f in fields), fields
    assert spool_lines(spool) == before


@pytest.mark.parametrize(("endpoint", "raw", "field"), RAW)
def test_bodies_that_are_not_the_model_are_refused(fifo, endpoint, raw, field):
    client, spool = fifo
    before = spool_lines(spool)
    r = client.post(endpoint, content=raw, headers={"Content-Type": "application/json"})
    assert r.status_code in (400, 422), r.text
    assert r.json()["detail"][0]["field"] == field
    assert spool_lines(spool) == before


# --- durability --------------------------------------------------------------------------


def _workers_of(pid: int) -> list[int]:
    """Running processes whose parent is `pid` (/proc)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == str(pid) and fields[0] not in ("Z", "X"):
            out.append(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")  # a zombie has died; only its parent's reaping is left


def test_worker_processes_share_the_spool_and_the_metrics(tmp_path):
    spool = tmp_path / "spool"
    with ServerProcess(["--policy", "fifo", "--spool", str(spool), "--workers", "2"]) as server:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            ids = [
                client.post("/v1/decide", json=snapshot_body()).json()["decision_id"]
                for _ in range(6)
            ]
            text = client.get("/metrics").text
    assert 'shadow_requests_total{endpoint="/v1/decide",status="200"} 6.0' in text
    assert 'shadow_spool_records_total{kind="decision"} 6.0' in text
    records = [r for day in spool_days(spool) for r in read_spool(spool, day)[0]]
    assert [r.payload["decision"]["decision_id"] for r in records] == ids
    assert [r.seq for r in records] == list(range(1, 7))


@pytest.mark.parametrize("workers", [1, 2])
def test_kill_9_loses_no_acknowledged_record(tmp_path, workers):
    """Requests from four threads; SIGKILL of the service while they run; every
    acknowledged decision and observation is in the spool, the worker processes die with
    the service, and a restarted server appends after them."""
    spool = tmp_path / "spool"
    acked: list[str] = []
    lock = threading.Lock()
    server = ServerProcess(["--policy", "fifo", "--spool", str(spool), "--workers", str(workers)])
    if workers > 1:
        children = _workers_of(server.proc.pid)
        assert len(children) >= workers  # the workers (and multiprocessing's tracker)
    stop = threading.Event()

    def send(k: int) -> None:
        with httpx.Client(base_url=server.url, timeout=10) as client:
            n = 0
            while not stop.is_set():
                n += 1
                try:
                    if n % 2:
                        r = client.post("/v1/decide", json=snapshot_body())
                        key = r.json()["decision_id"] if r.status_code == 200 else None
                    else:
                        batch = _observe_body()
                        batch["observations"][0]["job"] = f"t{k}-{n}"
                        r = client.post("/v1/observe", json=batch)
                        key = f"t{k}-{n}" if r.status_code == 200 else None
                except httpx.TransportError:
                    return
                if key:
                    with lock:
                        acked.append(key)

    threads = [threading.Thread(target=send, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for _ in range(1200):  # at most a minute
        if len(acked) >= 40:
            break
        threading.Event().wait(0.05)
    server.kill()
    stop.set()
    for t in threads:
        t.join()
    if workers > 1:  # the workers die with the service (none left answering)
        for _ in range(100):
            if not [c for c in children if _alive(c)]:
                break
            threading.Event().wait(0.05)
        assert not [c for c in children if _alive(c)]
    records = []
    for day in spool_days(spool):
        got, _ = read_spool(spool, day)  # a torn last line, if any, is quarantined
        records.extend(got)
    present = {r.payload["decision"]["decision_id"] for r in records if r.kind == "decision"}
    present |= {r.payload["job"] for r in records if r.kind == "observation"}
    assert set(acked) <= present
    with ServerProcess(["--policy", "fifo", "--spool", str(spool)]) as again:
        assert httpx.post(f"{again.url}/v1/observe", json=_observe_body()).status_code == 200
    after = [r for day in spool_days(spool) for r in read_spool(spool, day)[0]]
    assert len(after) == len(records) + 1


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--policy", "no-such-policy"], "no warehouse"),
        (["--policy", "fifo", "--host", "example.org"], "--host"),
        (["--policy", "fifo", "--token", "short"], "--token"),
        (["--policy", "fifo", "--max-body-bytes", "10"], "--max-body-bytes"),
        (["--policy", "fifo", "--workers", "0"], "--workers"),
    ],
)
def test_bad_serve_arguments_exit_2_with_one_line(tmp_path, capsys, argv, says):
    from pipelines.cli import main

    warehouse = ["--warehouse", str(tmp_path / "missing.duckdb"), "--spool", str(tmp_path / "s")]
    assert main(["serve-policy", *argv, *warehouse]) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err and err.count("\n") == 1
