"""The Kubernetes collector on recorded `kubectl get pods -A -o json` and `kubectl get
nodes -o json` samples (tests/data/shadow/k8s/README.md), and on broken variants of them."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime

import pytest

from pipelines.cli import main
from tests.conftest import DATA
from tracelib.shadow.collect import CollectError
from tracelib.shadow.collect_k8s import collect_k8s
from tracelib.shadow.kube import node_as_server, pod_as_pending
from tracelib.shadow.schemas import Node, Pod

K8S = DATA / "shadow" / "k8s"
NOW = datetime(2026, 11, 27, 10, tzinfo=UTC)


def load(name: str) -> dict:
    return json.loads((K8S / f"{name}.json").read_text())


def collect(pods=None, nodes=None):
    return collect_k8s(pods or load("pods"), nodes or load("nodes"), cluster="k8s", now=NOW)


def test_free_gpus_are_allocatable_minus_the_requests_of_live_pods():
    servers = {s.name: s for s in collect().snapshot.servers}
    assert sorted(servers) == ["gpu-node-1", "gpu-node-2", "gpu-node-3", "gpu-node-4"]
    # node 1: 8 allocatable, the running 8-GPU pod; node 2: 8, its preempted pod is Failed
    # (terminated: holds nothing) and the exporter asks no GPU; node 3: 4 - 2 running (the
    # Succeeded and OOMKilled pods there hold nothing); node 4 is cordoned.
    assert [servers[n].free_gpus for n in sorted(servers)] == [0.0, 8.0, 2.0, 0.0]
    assert servers["gpu-node-1"].gpu_type == "NVIDIA-A100-SXM4-40GB"
    # CPU: allocatable 95500m minus max(containers 32, init container 1) for node 1, and
    # minus the exporter's 250m for node 2.
    assert servers["gpu-node-1"].free_cpus == 63.5
    assert servers["gpu-node-2"].free_cpus == 95.25
    assert servers["gpu-node-1"].memory_gib == pytest.approx(1023.5)


def test_pods_become_running_and_pending_jobs():
    snap = collect().snapshot
    assert snap.time == NOW and snap.cluster == "k8s"
    running = {j.id: j for j in snap.running}
    assert sorted(running) == ["nlp/seq2seq-train-9qz4m", "vision/resnet50-train-x7k2p"]
    job = running["vision/resnet50-train-x7k2p"]
    assert job.servers == ["gpu-node-1"] and job.gpus == 8.0 and job.user == "vision"
    assert job.start_time == datetime(2026, 11, 27, 7, tzinfo=UTC)  # PodScheduled
    pending = {j.id: j for j in snap.pending}
    assert sorted(pending) == ["nlp/dssm-eval-k9j2w", "vision/vgg16-train-m3n5b"]
    assert pending["vision/vgg16-train-m3n5b"].gpu_type == "NVIDIA-A100-SXM4-40GB"
    assert pending["vision/vgg16-train-m3n5b"].memory_gib == 128.0


def test_observations_name_how_each_pod_ended():
    kinds = {(o.job, o.kind) for o in collect().observations}
    assert ("nlp/ctc-train-p2l9d", "preempted") in kinds  # DisruptionTarget condition
    assert ("nlp/wlm-train-b8c1x", "failed") in kinds  # OOMKilled
    assert ("vision/inception-train-4hd8s", "finished") in kinds
    assert ("vision/vgg16-train-m3n5b", "started") not in kinds
    assert not any(j.startswith("monitoring/") for j, _ in kinds)  # no GPU: not a job


def pods_with(index: int, mutate) -> dict:
    pods = copy.deepcopy(load("pods"))
    mutate(pods["items"][index])
    return pods


@pytest.mark.parametrize(
    ("index", "mutate", "reason"),
    [
        (5, lambda p: p["metadata"].pop("creationTimestamp"), "creationTimestamp: missing"),
        (
            5,
            lambda p: p["metadata"].update(creationTimestamp="yesterday"),
            "metadata.creationTimestamp: not an RFC 3339 time",
        ),
        (
            5,
            lambda p: p["spec"]["containers"][0]["resources"]["requests"].update(
                {"nvidia.com/gpu": "-2"}
            ),
            "requests.nvidia.com/gpu: not a Kubernetes quantity",
        ),
        (0, lambda p: p["spec"].update(nodeName="gpu-node-9"), "bound to 'gpu-node-9'"),
        (5, lambda p: p["status"].update(phase="Exploded"), "status.phase: unknown phase"),
        (5, lambda p: p["spec"].update(containers=[]), "spec.containers: missing"),
    ],
)
def test_a_bad_pod_is_skipped_with_its_reason(index, mutate, reason):
    got = collect(pods=pods_with(index, mutate))
    assert any(reason in str(s) for s in got.skipped), [str(s) for s in got.skipped]
    assert any(f"items[{index}]" in str(s) for s in got.skipped)
    assert len(got.snapshot.running) + len(got.snapshot.pending) == 3


def test_a_bad_node_is_skipped_and_the_pods_bound_to_it_too():
    nodes = copy.deepcopy(load("nodes"))
    nodes["items"][0]["status"]["allocatable"]["nvidia.com/gpu"] = "eight"
    got = collect(nodes=nodes)
    assert "gpu-node-1" not in {s.name for s in got.snapshot.servers}
    reasons = [str(s) for s in got.skipped]
    assert any("items[0] (gpu-node-1)" in r and "not a Kubernetes quantity" in r for r in reasons)
    assert any("resnet50" in r and "gpu-node-1" in r for r in reasons)


@pytest.mark.parametrize(
    ("pods", "nodes", "message"),
    [
        ("text", load("nodes"), "pods: top level: expected a JSON object"),
        ({"kind": "List"}, load("nodes"), "pods: items: missing"),
        (load("pods"), {"items": None}, "nodes: items: expected a list"),
    ],
)
def test_an_unusable_list_is_a_collect_error(pods, nodes, message):
    with pytest.raises(CollectError, match=message):
        collect_k8s(pods, nodes, now=NOW)


def test_cli(tmp_path, capsys):
    out = tmp_path / "k.json"
    args = ["collect", "k8s", "--pods", str(K8S / "pods.json"), "--nodes", str(K8S / "nodes.json")]
    assert main([*args, "--time", "2026-11-27T10:00:00Z", "--out", str(out)]) == 0
    written = json.loads(out.read_text())
    assert written["snapshot"]["time"] == "2026-11-27T10:00:00Z"
    assert written["snapshot"]["cluster"] == "kubernetes"
    capsys.readouterr()
    assert main([*args, "--time", "noon"]) == 2
    assert "--time" in capsys.readouterr().err


def test_cli_since_keeps_only_newer_observations(tmp_path, capsys):
    out = tmp_path / "k.json"
    args = ["collect", "k8s", "--pods", str(K8S / "pods.json"), "--nodes", str(K8S / "nodes.json")]
    args += ["--time", "2026-11-27T10:00:00Z", "--out", str(out)]
    assert main([*args, "--since", "2026-11-27T09:00:00Z"]) == 0
    kept = json.loads(out.read_text())["observe"]["observations"]
    assert [(o["job"], o["kind"]) for o in kept] == [
        ("vision/vgg16-train-m3n5b", "submitted"),
        ("nlp/dssm-eval-k9j2w", "submitted"),
        ("vision/inception-train-4hd8s", "finished"),
    ]
    assert main([*args, "--since", "\x1b[31mred"]) == 2
    err = capsys.readouterr().err
    assert "--since" in err and "\x1b" not in err


def test_one_list_of_pods_and_nodes_reads_the_same(tmp_path):
    both = {
        "apiVersion": "v1",
        "kind": "List",
        "items": load("nodes")["items"] + load("pods")["items"],
    }
    path = tmp_path / "all.json"
    path.write_text(json.dumps(both))
    out = tmp_path / "out.json"
    assert (
        main(
            [
                "collect",
                "k8s",
                "--pods",
                str(path),
                "--time",
                "2026-11-27T10:00:00Z",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert json.loads(out.read_text())["snapshot"] == collect(
        pods=both, nodes=both
    ).snapshot.model_copy(update={"cluster": "kubernetes"}).model_dump(mode="json")
    assert collect(pods=both, nodes=both).skipped == []


def test_the_collector_and_the_extender_map_gpus_and_types_alike():
    """One node and one pending pod of another vendor's GPUs, typed by GKE's label, a
    container giving only a GPU limit: the kubectl collector and the extender's models
    (what kube-scheduler sends) read the same GPUs and GPU type."""
    node = copy.deepcopy(load("nodes")["items"][1])
    node["metadata"]["labels"] = {"cloud.google.com/gke-accelerator": "nvidia-l4"}
    alloc = node["status"]["allocatable"]
    alloc["amd.com/gpu"] = alloc.pop("nvidia.com/gpu")
    pod = copy.deepcopy(next(p for p in load("pods")["items"] if not p["spec"].get("nodeName")))
    pod["spec"]["nodeSelector"] = {"cloud.google.com/gke-accelerator": "nvidia-l4"}
    resources = pod["spec"]["containers"][0]["resources"]
    gpus = resources.get("limits", {}).pop("nvidia.com/gpu", None)
    gpus = resources.get("requests", {}).pop("nvidia.com/gpu", gpus)
    resources.setdefault("limits", {})["amd.com/gpu"] = gpus  # a limit only
    snap = collect_k8s({"items": [pod]}, {"items": [node]}, cluster="k8s", now=NOW).snapshot
    (server,), (pending,) = snap.servers, snap.pending
    extender_server = node_as_server(Node.model_validate(node))
    extender_pod = pod_as_pending(Pod.model_validate(pod), NOW)
    assert (server.gpus, server.gpu_type) == (extender_server.gpus, "nvidia-l4")
    assert extender_server.gpu_type == "nvidia-l4" and server.gpus == 8
    assert (pending.gpus, pending.gpu_type) == (extender_pod.gpus, extender_pod.gpu_type)
    assert pending.gpu_type == "nvidia-l4" and pending.gpus == float(gpus)
