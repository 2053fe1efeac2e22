"""The shadow-mode wire format as pydantic v2 models, and the Kubernetes scheduler-extender
messages.

Everything here arrives from outside (a collector, a kube-scheduler, anyone who can reach the
port), so every model forbids unknown fields, bounds every string and list, and accepts only
finite non-negative numbers and timezone-aware times. A validation error names the field's
path (e.g. `servers.3.free_gpus`).

The extender models follow the JSON of `k8s.io/kube-scheduler/extender/v1` (`ExtenderArgs`,
`ExtenderFilterResult`, `HostPriority`); the Pod and Node objects inside them are read only as
far as placement needs (names, labels, resource requests and allocatable quantities) and
ignore the many other fields a real API object carries.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    model_validator,
)

SCHEMA_VERSION = 1

MAX_SERVERS = 20_000
MAX_JOBS = 100_000
MAX_OBSERVATIONS = 10_000
MAX_SERVERS_PER_JOB = 4_096

Name = Annotated[str, StringConstraints(min_length=1, max_length=256)]
"""A server name, job id, user, model or GPU type."""
ClusterName = Annotated[str, StringConstraints(min_length=1, max_length=128)]
Amount = Annotated[float, Field(ge=0, allow_inf_nan=False)]
"""A finite quantity >= 0 (GPUs may be fractional: a shared GPU)."""
Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Count = Annotated[int, Field(ge=0, le=1_000_000)]
ServerNames = Annotated[list[Name], Field(max_length=MAX_SERVERS_PER_JOB)]
Version = Literal[1]


def _not_a_number(value: object) -> object:
    # Lax datetime parsing would read 12 as a Unix time; the wire format has RFC 3339 only.
    if isinstance(value, int | float):
        raise ValueError("a time is an RFC 3339 string with a zone, not a number")
    return value


Time = Annotated[AwareDatetime, BeforeValidator(_not_a_number)]
"""An RFC 3339 time with a zone."""


class _Wire(BaseModel):
    """Base of the wire models: unknown fields are errors, values immutable once parsed."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Server(_Wire):
    """One machine of the live cluster and what is free on it now."""

    name: Name
    gpu_type: Name | None = None
    gpus: Count
    free_gpus: Amount
    cpus: Amount
    free_cpus: Amount
    memory_gib: Amount
    free_memory_gib: Amount

    @model_validator(mode="after")
    def _free_within_capacity(self) -> Server:
        # Written out, not looped over names: it runs once per server of every snapshot.
        if self.free_gpus > self.gpus + 1e-9:
            raise ValueError("free_gpus: exceeds gpus")
        if self.free_cpus > self.cpus + 1e-9:
            raise ValueError("free_cpus: exceeds cpus")
        if self.free_memory_gib > self.memory_gib + 1e-9:
            raise ValueError("free_memory_gib: exceeds memory_gib")
        return self


class RunningJob(_Wire):
    """A job the real scheduler runs now."""

    id: Name
    user: Name | None = None
    gpus: Positive
    gpu_type: Name | None = None
    servers: ServerNames
    submit_time: Time
    start_time: Time
    model: Name | None = None
    duration_estimate_s: Positive | None = None


class PendingJob(_Wire):
    """A job waiting for the real scheduler to start it."""

    id: Name
    user: Name | None = None
    gpus: Positive
    gpu_type: Name | None = None
    cpus: Amount | None = None
    memory_gib: Amount | None = None
    submit_time: Time
    model: Name | None = None
    duration_estimate_s: Positive | None = None


class Snapshot(_Wire):
    """Body of `POST /v1/decide`: the live cluster's state at `time`."""

    schema_version: Version
    cluster: ClusterName
    time: Time
    servers: Annotated[list[Server], Field(max_length=MAX_SERVERS)]
    running: Annotated[list[RunningJob], Field(max_length=MAX_JOBS)] = []
    pending: Annotated[list[PendingJob], Field(max_length=MAX_JOBS)] = []

    @model_validator(mode="after")
    def _consistent(self) -> Snapshot:
        names = [s.name for s in self.servers]
        if len(set(names)) != len(names):
            raise ValueError(f"servers: duplicate name {_first_duplicate(names)!r}")
        ids = [j.id for j in self.running] + [j.id for j in self.pending]
        if len(set(ids)) != len(ids):
            raise ValueError(f"running/pending: duplicate job id {_first_duplicate(ids)!r}")
        known = set(names)
        for i, job in enumerate(self.running):
            unknown = [s for s in job.servers if s not in known]
            if unknown:
                raise ValueError(f"running.{i}.servers: unknown server {unknown[0]!r}")
        return self


class StartedJob(_Wire):
    """One pending job the policy would start, and where."""

    job: Name
    gpus: Amount
    servers: ServerNames
    workers: Count | None = None
    ps: Count | None = None


class Decision(_Wire):
    """Response of `POST /v1/decide`: what the policy would do with the snapshot."""

    schema_version: Version = SCHEMA_VERSION
    decision_id: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{32}$")]
    policy: Name
    policy_id: Name
    time: Time
    """The snapshot's time."""
    latency_ms: Amount
    start: Annotated[list[StartedJob], Field(max_length=MAX_JOBS)]
    wait: Annotated[list[Name], Field(max_length=MAX_JOBS)]


ObservationKind = Literal["submitted", "started", "finished", "failed", "preempted", "cancelled"]


class Observation(_Wire):
    """What the real scheduler did or what happened to a job."""

    kind: ObservationKind
    job: Name
    time: Time
    user: Name | None = None
    gpus: Positive | None = None
    gpu_type: Name | None = None
    servers: ServerNames | None = None
    model: Name | None = None
    duration_estimate_s: Positive | None = None

    @model_validator(mode="after")
    def _carries_what_its_kind_needs(self) -> Observation:
        # A trace can only be rebuilt from observations if a submission says how big the
        # job is and a start says where it ran.
        if self.kind == "submitted" and self.gpus is None:
            raise ValueError("gpus: required when kind is 'submitted'")
        if self.kind == "started" and not self.servers:
            raise ValueError("servers: required when kind is 'started'")
        return self


class ObserveBatch(_Wire):
    """Body of `POST /v1/observe`."""

    schema_version: Version
    cluster: ClusterName
    observations: Annotated[list[Observation], Field(min_length=1, max_length=MAX_OBSERVATIONS)]


def _first_duplicate(values: list[str]) -> str:
    seen: set[str] = set()
    for v in values:
        if v in seen:
            return v
        seen.add(v)
    raise ValueError("no duplicate")


# --- Kubernetes quantities ---------------------------------------------------------------

_QUANTITY = re.compile(
    r"^([+]?[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$"
)
_SUFFIX = {
    None: 1.0,
    "n": 1e-9,
    "u": 1e-6,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
    "Ki": 2.0**10,
    "Mi": 2.0**20,
    "Gi": 2.0**30,
    "Ti": 2.0**40,
    "Pi": 2.0**50,
    "Ei": 2.0**60,
}


def parse_quantity(value: str | int | float) -> float:
    """A Kubernetes resource quantity ("2", "500m", "16Gi", "1.5e3") as a float in its base
    unit (cores, bytes, devices). Raises ValueError on anything else, negatives included."""
    if isinstance(value, bool):
        raise ValueError("a quantity is a number or a string such as '500m' or '16Gi'")
    if isinstance(value, int | float):
        number = float(value)
    else:
        text = str(value).strip()
        match = _QUANTITY.match(text) if len(text) <= 64 else None
        if match is None:
            raise ValueError(f"not a Kubernetes quantity: {text[:64]!r}")
        number = float(match.group(1)) * _SUFFIX[match.group(2)]
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"not a finite non-negative quantity: {value!r}")
    return number


Quantity = Annotated[float, BeforeValidator(parse_quantity)]
ResourceList = Annotated[
    dict[Annotated[str, StringConstraints(max_length=253)], Quantity], Field(max_length=64)
]
Labels = Annotated[
    dict[
        Annotated[str, StringConstraints(max_length=317)],
        Annotated[str, StringConstraints(max_length=63)],
    ],
    Field(max_length=256),
]
K8sName = Annotated[str, StringConstraints(min_length=1, max_length=253)]


class _K8s(BaseModel):
    """Base of the Kubernetes object models: the fields placement reads are validated, the
    rest of a real API object is ignored (not stored)."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)


class ObjectMeta(_K8s):
    """`metadata` of a Pod or Node."""

    name: K8sName
    namespace: K8sName | None = None
    uid: Annotated[str, StringConstraints(max_length=128)] | None = None
    labels: Labels = {}
    creation_timestamp: Time | None = Field(None, alias="creationTimestamp")


class ResourceRequirements(_K8s):
    """A container's `resources`."""

    requests: ResourceList = {}
    limits: ResourceList = {}


class Container(_K8s):
    """A container of a Pod spec."""

    name: K8sName
    resources: ResourceRequirements = ResourceRequirements()


class PodSpec(_K8s):
    """The parts of a Pod's `spec` placement reads."""

    containers: Annotated[list[Container], Field(min_length=1, max_length=128)]
    node_selector: Labels = Field({}, alias="nodeSelector")
    scheduler_name: K8sName | None = Field(None, alias="schedulerName")


class Pod(_K8s):
    """A `v1.Pod` as the scheduler sends it (metadata and spec)."""

    metadata: ObjectMeta
    spec: PodSpec


class NodeStatus(_K8s):
    """A Node's `status`: what it has and what pods may use."""

    capacity: ResourceList = {}
    allocatable: ResourceList = {}


class Node(_K8s):
    """A `v1.Node`."""

    metadata: ObjectMeta
    status: NodeStatus = NodeStatus()


class NodeList(_K8s):
    """A `v1.NodeList`."""

    api_version: Annotated[str, StringConstraints(max_length=64)] | None = Field(
        None, alias="apiVersion"
    )
    kind: Annotated[str, StringConstraints(max_length=64)] | None = None
    items: Annotated[list[Node], Field(max_length=MAX_SERVERS)]


class _Extender(BaseModel):
    """Base of the extender messages: unknown top-level fields are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class ExtenderArgs(_Extender):
    """What kube-scheduler posts to an extender's filter and prioritize verbs (Go fields
    `Pod`, `Nodes`, `NodeNames`): the pod and either the candidate nodes or, when the
    extender is node-cache capable, only their names."""

    pod: Pod = Field(alias="pod")
    nodes: NodeList | None = Field(None, alias="nodes")
    node_names: Annotated[list[K8sName], Field(max_length=MAX_SERVERS)] | None = Field(
        None, alias="nodenames"
    )

    @model_validator(mode="after")
    def _has_candidates(self) -> ExtenderArgs:
        if self.nodes is None and self.node_names is None:
            raise ValueError("nodes: one of nodes or nodenames is required")
        return self


class ExtenderFilterResult(_Extender):
    """The filter verb's answer (Go fields `Nodes`, `NodeNames`, `FailedNodes`,
    `FailedAndUnresolvableNodes`, `Error`)."""

    nodes: NodeList | None = Field(None, alias="nodes")
    node_names: list[str] | None = Field(None, alias="nodenames")
    failed_nodes: dict[str, str] = Field(default_factory=dict, alias="failedNodes")
    failed_and_unresolvable_nodes: dict[str, str] = Field(
        default_factory=dict, alias="failedAndUnresolvableNodes"
    )
    error: str = Field("", alias="error")


class HostPriority(_Extender):
    """One element of the prioritize verb's answer (Go fields `Host`, `Score`)."""

    host: K8sName = Field(alias="host")
    score: int = Field(alias="score")
