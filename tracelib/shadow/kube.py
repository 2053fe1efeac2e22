"""Kubernetes objects as shadow-mode wire models: a Pod as a pending job, a Node as a server.

The one mapping of Kubernetes resources to GPUs, shared by the extender endpoints (pods and
nodes kube-scheduler sends) and the `kubectl` collector (`collect_k8s`):

- GPUs are the extended resources whose name ends in "/gpu" (nvidia.com/gpu, amd.com/gpu);
  a container requests its request of each, else its limit (Kubernetes defaults an
  extended resource's missing request to its limit and requires the two to be equal);
- a node's GPU type is the first of `GPU_TYPE_LABELS` it carries; a pod's the value its
  nodeSelector gives one of those labels.

Quantities in memory are bytes, converted to GiB.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from tracelib.shadow.schemas import Node, PendingJob, Pod, Server

GPU_TYPE_LABELS = (
    "nvidia.com/gpu.product",
    "cloud.google.com/gke-accelerator",
    "accelerator",
)
"""Node labels naming the GPU model, by the tools that set them (NVIDIA's GPU feature
discovery, GKE, the common convention)."""

GIB = 2.0**30


def is_gpu_resource(name: str) -> bool:
    """Whether a resource name is a GPU (an extended resource `<vendor>/gpu`)."""
    return name.endswith("/gpu")


def gpu_amount(resources: Mapping[str, float]) -> float:
    """The GPUs among a node's resources (allocatable or capacity)."""
    return sum(v for k, v in resources.items() if is_gpu_resource(k))


def container_gpus(requests: Mapping[str, float], limits: Mapping[str, float]) -> float:
    """The GPUs a container requests: per GPU resource its request, else its limit."""
    names = {k for k in (*requests, *limits) if is_gpu_resource(k)}
    return sum(requests.get(k, limits.get(k, 0.0)) for k in names)


def pod_gpus(pod: Pod) -> float:
    """GPUs a pod asks for, summed over its containers."""
    return sum(
        container_gpus(c.resources.requests, c.resources.limits) for c in pod.spec.containers
    )


def pod_id(pod: Pod) -> str:
    """A pod's job id: "namespace/name" (the namespace defaults to "default")."""
    return f"{pod.metadata.namespace or 'default'}/{pod.metadata.name}"


def node_gpu_type(labels: Mapping[str, object]) -> str | None:
    """The GPU type a node's (or a nodeSelector's) labels name, if any (the first of
    `GPU_TYPE_LABELS` whose value is a non-empty string)."""
    for key in GPU_TYPE_LABELS:
        value = labels.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def pod_as_pending(pod: Pod, now: datetime) -> PendingJob:
    """A GPU pod as a pending job (submitted at its creation time, else `now`). ValueError
    for a pod without GPUs (not a job a GPU scheduler decides)."""
    gpus = pod_gpus(pod)
    if gpus <= 0:
        raise ValueError(f"pod {pod_id(pod)} asks for no GPU")
    requests = [c.resources.requests for c in pod.spec.containers]
    return PendingJob(
        id=pod_id(pod),
        user=pod.metadata.namespace or "default",
        gpus=gpus,
        gpu_type=node_gpu_type(pod.spec.node_selector),
        cpus=sum(r.get("cpu", 0.0) for r in requests),
        memory_gib=sum(r.get("memory", 0.0) for r in requests) / GIB,
        submit_time=pod.metadata.creation_timestamp or now,
    )


def node_as_server(node: Node) -> Server:
    """A node as a server whose free resources are its allocatable ones: kube-scheduler
    calls an extender with the nodes its own filters kept, which already have room for the
    pod; what other pods use is not in the Node object."""
    alloc = node.status.allocatable or node.status.capacity
    gpus = int(gpu_amount(alloc))
    cpus = alloc.get("cpu", 0.0)
    memory = alloc.get("memory", 0.0) / GIB
    return Server(
        name=node.metadata.name,
        gpu_type=node_gpu_type(node.metadata.labels),
        gpus=gpus,
        free_gpus=float(gpus),
        cpus=cpus,
        free_cpus=cpus,
        memory_gib=memory,
        free_memory_gib=memory,
    )
