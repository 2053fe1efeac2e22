"""Kubernetes objects as shadow-mode wire models: a Pod as a pending job, a Node as a server.

GPUs are the extended resources whose name ends in "/gpu" (nvidia.com/gpu, amd.com/gpu);
a container's limit counts (Kubernetes requires an extended resource's request to equal
its limit), else its request. A node's GPU type is the first of `GPU_TYPE_LABELS` it
carries; a pod's the value its nodeSelector gives one of those labels. Quantities in
memory are bytes, converted to GiB.
"""

from __future__ import annotations

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


def _gpu_amount(resources: dict[str, float]) -> float:
    return sum(v for k, v in resources.items() if k.endswith("/gpu"))


def pod_gpus(pod: Pod) -> float:
    """GPUs a pod asks for, summed over its containers."""
    total = 0.0
    for c in pod.spec.containers:
        limit = _gpu_amount(c.resources.limits)
        total += limit if limit > 0 else _gpu_amount(c.resources.requests)
    return total


def pod_id(pod: Pod) -> str:
    """A pod's job id: "namespace/name" (the namespace defaults to "default")."""
    return f"{pod.metadata.namespace or 'default'}/{pod.metadata.name}"


def node_gpu_type(labels: dict[str, str]) -> str | None:
    """The GPU type a node's (or a nodeSelector's) labels name, if any."""
    return next((labels[k] for k in GPU_TYPE_LABELS if labels.get(k)), None)


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
    gpus = int(_gpu_amount(alloc))
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
