"""Kubernetes pod and node lists -> a shadow `Snapshot` and `Observation`s.

Reads `kubectl get pods -A -o json` and `kubectl get nodes -o json` (v1 `List`s of `Pod` and
`Node`; a `PodList` / `NodeList` reads the same), or the one List of both that `kubectl get
pods,nodes -A -o json` prints:

- GPUs and GPU types as the extender endpoints read them (`tracelib.shadow.kube`): a
  node's GPUs are its `status.allocatable` (else `capacity`) resources named `<vendor>/gpu`
  (`nvidia.com/gpu`, `amd.com/gpu`), its GPU type the first of the labels
  `nvidia.com/gpu.product` (NVIDIA's GPU feature discovery),
  `cloud.google.com/gke-accelerator` and `accelerator` it carries; CPU and memory from
  `allocatable` too. A node marked `spec.unschedulable` (cordoned) or whose `Ready`
  condition is not "True" offers nothing free. Nodes without GPUs are not servers of the
  snapshot, but pods on them are counted nowhere else either;
- free on a node = allocatable minus the requests of the pods bound to it
  (`spec.nodeName`) that have not terminated (phase neither Succeeded nor Failed). A pod's
  request of a resource is the larger of its containers' sum and its largest init
  container (how the scheduler counts it); a container that sets only a limit of a GPU
  resource requests that limit;
- a pod that requests GPUs is a job `namespace/name` of user `namespace` (the tenant):
  pending while its phase is Pending and it is bound to no node; running once bound and not
  terminated; submitted at `metadata.creationTimestamp`, started at its `PodScheduled`
  condition's transition (else `status.startTime`), ended at its containers' latest
  `finishedAt`. It ended `finished` (Succeeded), `preempted` (Failed with a
  `DisruptionTarget` condition of reason `PreemptionByScheduler`, or
  `PreemptionByKubeScheduler` before Kubernetes 1.27) or `failed` (any other Failed);
- its GPU type is the one its node selector names by those labels, if any.

The lists carry no time of their own: the snapshot is taken at `now`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from tracelib.shadow.collect import (
    Collected,
    ItemError,
    Skipped,
    collected,
    job_observations,
    pending_job,
    reason,
    require_list,
    require_object,
    rfc3339,
    running_job,
)
from tracelib.shadow.kube import container_gpus, gpu_amount, is_gpu_resource, node_gpu_type
from tracelib.shadow.schemas import (
    Observation,
    PendingJob,
    RunningJob,
    Server,
    parse_quantity,
)

PREEMPTION_REASONS = {"PreemptionByScheduler", "PreemptionByKubeScheduler"}
TERMINATED = {"Succeeded", "Failed"}
GIB = 2.0**30


def collect_k8s(
    pods: Any,
    nodes: Any,
    *,
    cluster: str = "kubernetes",
    now: datetime | None = None,
    files: tuple[str, str] = ("pods", "nodes"),
) -> Collected:
    """The snapshot (taken at `now`, default the current time) and observations of parsed
    `kubectl get pods -o json` and `kubectl get nodes -o json` output. CollectError for an
    input unusable as a whole; a bad pod or node is skipped, with its reason."""
    f_pods, f_nodes = files
    now = now or datetime.now(UTC)
    pod_items = _of_kind(
        require_list(require_object(pods, f_pods, "top level"), "items", f_pods), "Pod"
    )
    node_items = _of_kind(
        require_list(require_object(nodes, f_nodes, "top level"), "items", f_nodes), "Node"
    )
    skipped: list[Skipped] = []
    capacity: dict[str, dict[str, Any]] = {}
    for i, raw in node_items:
        try:
            node = _node(raw)
            if node["name"] in capacity:
                raise ItemError(f"metadata.name: node {node['name']!r} listed twice")
            capacity[node["name"]] = node
        except ItemError as exc:
            skipped.append(Skipped(f_nodes, _where("items", i, raw), str(exc)))
    used = {name: {"gpu": 0.0, "cpu": 0.0, "memory": 0.0} for name in capacity}
    running: list[RunningJob] = []
    pending: list[PendingJob] = []
    observations: list[Observation] = []
    for i, raw in pod_items:
        where = _where("items", i, raw)
        try:
            pod = _pod(raw)
            bound = pod["node"]
            if bound is not None and pod["phase"] not in TERMINATED:
                if bound not in used:
                    raise ItemError(f"spec.nodeName: bound to {bound!r}, which the node list lacks")
                for key in ("gpu", "cpu", "memory"):
                    used[bound][key] += pod[key]
            if not pod["gpu"]:
                continue  # counted against its node; not a job the policy schedules
            if bound is not None and pod["phase"] not in TERMINATED:
                if not capacity[bound]["gpus"]:
                    raise ItemError(f"spec.nodeName: {bound!r} has no GPU to run it")
                running.append(running_job(pod))
            elif bound is None and pod["phase"] == "Pending":
                pending.append(pending_job(pod))
            observations.extend(job_observations(pod, now))
        except (ItemError, ValidationError) as exc:
            skipped.append(Skipped(f_pods, where, reason(exc)))
    servers = []
    for name, node in capacity.items():
        if not node["gpus"]:
            continue
        take = used[name]
        servers.append(
            Server(
                name=name,
                gpu_type=node["gpu_type"],
                gpus=node["gpus"],
                free_gpus=_free(node, node["gpus"], take["gpu"]),
                cpus=node["cpu"],
                free_cpus=_free(node, node["cpu"], take["cpu"]),
                memory_gib=node["memory"] / GIB,
                free_memory_gib=_free(node, node["memory"], take["memory"]) / GIB,
            )
        )
    return collected(f_pods, cluster, now, servers, running, pending, observations, skipped)


def _of_kind(items: list, kind: str) -> list[tuple[int, Any]]:
    """(position, item) of the items of `kind`, or without a kind: `kubectl get pods,nodes
    -o json` lists both kinds in one List, and each reader takes its own."""
    return [
        (i, item)
        for i, item in enumerate(items)
        if not (isinstance(item, dict) and isinstance(item.get("kind"), str))
        or item["kind"] == kind
    ]


def _free(node: dict, total: float, taken: float) -> float:
    return 0.0 if not node["schedulable"] else max(0.0, total - taken)


def _where(key: str, i: int, raw: Any) -> str:
    meta = raw.get("metadata") if isinstance(raw, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    namespace = meta.get("namespace") if isinstance(meta, dict) else None
    label = f"{namespace}/{name}" if namespace else name
    return f"{key}[{i}]" + (f" ({str(label)[:80]})" if label else "")


def _object(raw: Any, key: str) -> dict:
    value = raw.get(key, {})
    if not isinstance(value, dict):
        raise ItemError(f"{key}: expected an object")
    return value


def _quantity(resources: dict, key: str, name: str) -> float:
    if key not in resources:
        return 0.0
    try:
        return parse_quantity(resources[key])
    except ValueError as exc:
        raise ItemError(f"{name}.{key}: {exc}") from None


def _gpus(resources: dict, name: str) -> dict[str, float]:
    """The GPU resources among `resources`, parsed (errors name `name.<resource>`)."""
    return {k: _quantity(resources, k, name) for k in resources if is_gpu_resource(str(k))}


def _node(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise ItemError("not a JSON object")
    meta, spec, status = _object(raw, "metadata"), _object(raw, "spec"), _object(raw, "status")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ItemError("metadata.name: missing")
    labels = meta.get("labels") or {}
    if not isinstance(labels, dict):
        raise ItemError("metadata.labels: expected an object")
    resources = status.get("allocatable") or status.get("capacity") or {}
    if not isinstance(resources, dict):
        raise ItemError("status.allocatable: expected an object")
    gpus = gpu_amount(_gpus(resources, "status.allocatable"))
    if gpus != int(gpus):
        raise ItemError(f"status.allocatable: not a whole number of GPUs ({gpus:g})")
    conditions = status.get("conditions") or []
    ready = next(
        (c.get("status") for c in conditions if isinstance(c, dict) and c.get("type") == "Ready"),
        "True",  # a list without conditions says nothing against the node
    )
    return {
        "name": name,
        "gpus": int(gpus),
        "gpu_type": node_gpu_type(labels),
        "cpu": _quantity(resources, "cpu", "status.allocatable"),
        "memory": _quantity(resources, "memory", "status.allocatable"),
        "schedulable": not spec.get("unschedulable", False) and ready == "True",
    }


def _requests(containers: Any, name: str) -> dict[str, float]:
    """Summed requests of a container list (a limit stands in for a missing GPU request)."""
    if containers is None:
        return {"gpu": 0.0, "cpu": 0.0, "memory": 0.0}
    if not isinstance(containers, list):
        raise ItemError(f"{name}: expected a list")
    total = {"gpu": 0.0, "cpu": 0.0, "memory": 0.0}
    for k, container in enumerate(containers):
        if not isinstance(container, dict):
            raise ItemError(f"{name}[{k}]: expected an object")
        resources = _object(container, "resources")
        requests, limits = _object(resources, "requests"), _object(resources, "limits")
        where = f"{name}[{k}].resources"
        total["gpu"] += container_gpus(
            _gpus(requests, where + ".requests"), _gpus(limits, where + ".limits")
        )
        total["cpu"] += _quantity(requests, "cpu", where + ".requests")
        total["memory"] += _quantity(requests, "memory", where + ".requests")
    return total


def _pod(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise ItemError("not a JSON object")
    meta, spec, status = _object(raw, "metadata"), _object(raw, "spec"), _object(raw, "status")
    name, namespace = meta.get("name"), meta.get("namespace") or "default"
    if not isinstance(name, str) or not name or not isinstance(namespace, str):
        raise ItemError("metadata.name: missing")
    created = rfc3339(meta.get("creationTimestamp"), "metadata.creationTimestamp")
    if created is None:
        raise ItemError("metadata.creationTimestamp: missing")
    if not spec.get("containers"):
        raise ItemError("spec.containers: missing")
    main = _requests(spec.get("containers"), "spec.containers")
    init = _requests(spec.get("initContainers"), "spec.initContainers")
    wants = {key: max(main[key], init[key]) for key in main}
    phase = status.get("phase", "Pending")
    if phase not in ("Pending", "Running", "Succeeded", "Failed", "Unknown"):
        raise ItemError(f"status.phase: unknown phase {str(phase)[:40]!r}")
    conditions = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
    scheduled = next(
        (
            c.get("lastTransitionTime")
            for c in conditions
            if c.get("type") == "PodScheduled" and c.get("status") == "True"
        ),
        None,
    )
    started = rfc3339(scheduled, "status.conditions[PodScheduled].lastTransitionTime")
    started = started or rfc3339(status.get("startTime"), "status.startTime")
    finished = None
    for k, cs in enumerate(status.get("containerStatuses") or []):
        terminated = (
            ((cs or {}).get("state") or {}).get("terminated") if isinstance(cs, dict) else None
        )
        if isinstance(terminated, dict):
            at = rfc3339(terminated.get("finishedAt"), f"status.containerStatuses[{k}].finishedAt")
            finished = at if finished is None or (at and at > finished) else finished
    preempted = any(
        c.get("type") == "DisruptionTarget"
        and c.get("status") == "True"
        and c.get("reason") in PREEMPTION_REASONS
        for c in conditions
    )
    node = spec.get("nodeName")
    if node is not None and (not isinstance(node, str) or not node):
        raise ItemError("spec.nodeName: not a node name")
    selector = spec.get("nodeSelector") or {}
    end_kind = None
    if phase in TERMINATED:
        end_kind = "finished" if phase == "Succeeded" else "failed"
        end_kind = "preempted" if preempted else end_kind
    return {
        "id": f"{namespace}/{name}",
        "user": namespace,
        "phase": phase,
        "node": node,
        "gpus": wants["gpu"],
        "gpu_type": node_gpu_type(selector) if isinstance(selector, dict) else None,
        "cpus": wants["cpu"],
        "memory_gib": wants["memory"] / GIB,
        "submit": created,
        "start": started,
        "end": finished,
        "end_kind": end_kind,
        "hosts": [] if node is None else [node],
        "limit_s": None,
        **wants,
    }
