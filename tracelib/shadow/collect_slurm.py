"""Slurm's JSON output -> a shadow `Snapshot` and `Observation`s.

Reads what Slurm 23.11 and 24.05 print with their default data parser (v0.0.40; v0.0.39
and v0.0.41 name these fields alike):

- `squeue --json`: `jobs[]` with `job_id`, `user_name`, `job_state` (a list: the base state
  and flags, e.g. ["PENDING", "REQUEUED"]), `submit_time` / `start_time` / `end_time` as
  `{"set", "infinite", "number"}` UNIX times, the GPU request in `tres_per_job`,
  `tres_per_node` ("gres/gpu:a100:4", per node, times `node_count`) or `tres_req_str`
  ("...,gres/gpu=8"), the allocation in `tres_alloc_str`, the hosts in `nodes` ("gpu[01-02]"),
  `cpus`, `memory_per_node` (MB), `time_limit` (minutes); `last_update` is the snapshot's time;
- `sinfo --json`: `sinfo[]`, one entry per group of nodes alike (state, partition, GRES in
  use), with `nodes.nodes` (host names), `gres.total` ("gpu:a100:4(S:0-1)") and `gres.used`
  ("gpu:a100:2(IDX:0-1)") per node, `cpus.total` / `cpus.idle` and `memory.allocated` (MB)
  summed over the group, `memory.maximum` (MB) per node. `scontrol show nodes --json`
  (`nodes[]`: `name`, `gres`, `gres_used`, `cpus`, `alloc_cpus`, `real_memory`,
  `alloc_memory`, `state`) is read too;
- `sacct --json` (optional): `jobs[]` with `user`, `state.current`, `time.submission` /
  `time.start` / `time.end` (plain UNIX times, 0 when unset), `nodes`, and
  `tres.requested` / `tres.allocated` as `[{"type": "gres", "name": "gpu", "count": 4}]`.

What becomes what: a PENDING job is pending; RUNNING, SUSPENDED or COMPLETING (still holding
its nodes) is running. Every job with a GPU request gives a `submitted` observation; one
with a start time that has passed (a pending job's `start_time` is Slurm's forecast, not a
start) gives `started`; a job in a final state gives `finished` (COMPLETED), `preempted`
(PREEMPTED), `cancelled` (CANCELLED) or `failed` (every other final state: FAILED, TIMEOUT,
NODE_FAIL, OUT_OF_MEMORY, BOOT_FAIL, DEADLINE). Jobs
without a GPU request are not the policy's to schedule: they are skipped and listed. A node
that is DOWN, DRAIN(ED/ING), FAIL or NOT_RESPONDING offers nothing free.
`duration_estimate_s` is the job's time limit, what Slurm's own backfill plans with.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from tracelib.shadow.collect import (
    Collected,
    CollectError,
    ItemError,
    Skipped,
    collected,
    epoch,
    expand_hostlist,
    job_observations,
    number,
    pending_job,
    reason,
    require_list,
    require_object,
    running_job,
)
from tracelib.shadow.schemas import (
    Observation,
    PendingJob,
    RunningJob,
    Server,
)

RUNNING_STATES = {"RUNNING", "COMPLETING", "SUSPENDED"}
FINAL_KINDS = {
    "COMPLETED": "finished",
    "PREEMPTED": "preempted",
    "FAILED": "failed",
    "TIMEOUT": "failed",
    "NODE_FAIL": "failed",
    "OUT_OF_MEMORY": "failed",
    "BOOT_FAIL": "failed",
    "DEADLINE": "failed",
    "CANCELLED": "cancelled",
}
"""A final Slurm job state -> the observation that ends the job."""
BASE_STATES = {"PENDING", "RUNNING", "SUSPENDED", *FINAL_KINDS}
"""Slurm's base job states; `job_state` lists one of them and any flags (COMPLETING,
REQUEUED, ...)."""
UNAVAILABLE = {"DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "NOT_RESPONDING"}
"""Node states (base or flag) in which nothing on a node can be started."""
MB_PER_GIB = 1024.0


def collect_slurm(
    squeue: Any,
    sinfo: Any,
    sacct: Any = None,
    *,
    cluster: str | None = None,
    now: datetime | None = None,
    files: tuple[str, str, str] = ("squeue", "sinfo", "sacct"),
) -> Collected:
    """The snapshot and observations of parsed `squeue --json`, `sinfo --json` (or
    `scontrol show nodes --json`) and, optionally, `sacct --json` output. `cluster`
    overrides the name Slurm reports (`meta.slurm.cluster`); `now` is the snapshot's time
    when squeue does not say (`last_update`). `files` names the inputs in messages.
    CollectError for an input unusable as a whole; a bad job or node is skipped, with its
    reason, in `Collected.skipped`."""
    f_queue, f_info, f_acct = files
    squeue = require_object(squeue, f_queue, "top level")
    sinfo = require_object(sinfo, f_info, "top level")
    jobs = require_list(squeue, "jobs", f_queue)
    name = cluster or _cluster_name(squeue, sinfo, jobs)
    if not name:
        raise CollectError(
            f_queue, "meta.slurm.cluster", "names no cluster: give one (--cluster NAME)"
        )
    try:
        time = epoch(squeue.get("last_update"), "last_update") or now
    except ItemError as exc:
        raise CollectError(f_queue, "last_update", str(exc)) from None
    if time is None:
        time = datetime.now(UTC)
    skipped: list[Skipped] = []
    servers = _servers(sinfo, f_info, skipped)
    known = {s.name for s in servers}
    running: list[RunningJob] = []
    pending: list[PendingJob] = []
    observations: dict[tuple[str, str], Observation] = {}
    seen: set[str] = set()
    for i, raw in enumerate(jobs):
        where = _where(i, raw)
        try:
            job = _squeue_job(raw)
            if job["gpus"] is None:
                skipped.append(Skipped(f_queue, where, "no GPU requested: not a GPU job"))
                continue
            if job["id"] in seen:
                raise ItemError(f"job_id: {job['id']} appears twice")
            seen.add(job["id"])
            state = job["state"]
            if state == "PENDING":
                pending.append(_pending(job))
            elif state in RUNNING_STATES:
                missing = [h for h in job["hosts"] if h not in known]
                if missing:
                    raise ItemError(f"nodes: runs on {missing[0]!r}, which sinfo does not list")
                running.append(_running(job, time))
            for obs in _observations(job, time):
                observations[(obs.kind, obs.job)] = obs
        except (ItemError, ValidationError) as exc:
            skipped.append(Skipped(f_queue, where, reason(exc)))
    if sacct is not None:
        for obs in _sacct_observations(sacct, f_acct, time, skipped):
            # squeue is the newer view of a job it still lists; sacct adds the rest.
            observations.setdefault((obs.kind, obs.job), obs)
    return collected(
        f_queue, name, time, servers, running, pending, list(observations.values()), skipped
    )


def _where(i: int, raw: Any) -> str:
    job_id = raw.get("job_id") if isinstance(raw, dict) else None
    return f"jobs[{i}]" + (f" (job {job_id})" if job_id is not None else "")


def _cluster_name(squeue: dict, sinfo: dict, jobs: list) -> str | None:
    for data in (squeue, sinfo):
        meta = data.get("meta")
        slurm = meta.get("slurm") if isinstance(meta, dict) else None
        name = slurm.get("cluster") if isinstance(slurm, dict) else None
        if isinstance(name, str) and name:
            return name
    for job in jobs:
        if isinstance(job, dict) and isinstance(job.get("cluster"), str) and job["cluster"]:
            return job["cluster"]
    return None


# -- GPU counts ----------------------------------------------------------------------------

_PARENS = re.compile(r"\([^)]*\)")


def _top_level(text: str) -> list[str]:
    """Comma-separated entries, commas inside parentheses ("IDX:0,2") kept."""
    return [p for p in (s.strip() for s in _PARENS.sub("", text).split(",")) if p]


def gpu_request(text: Any, name: str) -> tuple[float | None, str | None]:
    """(GPUs, GPU type) of a GRES or TRES string: "gres/gpu:a100:4", "gpu:4(S:0-1)",
    "cpu=8,gres/gpu=8,gres/gpu:a100=8". (None, None) when it names no GPU; an untyped count
    wins over typed ones (TRES strings list both), the type is the typed entry's."""
    if text is None or text in ("", "(null)", "N/A"):
        return None, None
    if not isinstance(text, str):
        raise ItemError(f"{name}: expected text, got {type(text).__name__}")
    untyped, typed, gpu_type = 0.0, 0.0, None
    found = False
    for entry in _top_level(text):
        key, eq, value = entry.partition("=")
        parts = key.removeprefix("gres/").split(":")
        if parts[0] != "gpu":
            continue
        if eq:  # TRES form: gres/gpu=8, gres/gpu:a100=8
            kind, count = (parts[1] if len(parts) > 1 else None), value
        elif len(parts) == 3:  # gpu:a100:4
            kind, count = parts[1], parts[2]
        elif len(parts) == 2 and parts[1].isdigit():  # gpu:4
            kind, count = None, parts[1]
        elif len(parts) == 2:  # gpu:a100 (one of that type)
            kind, count = parts[1], "1"
        else:
            kind, count = None, "1"
        try:
            n = float(count)
        except ValueError:
            raise ItemError(f"{name}: bad GPU count {count!r} in {text[:60]!r}") from None
        if not n >= 0 or n == float("inf"):
            raise ItemError(f"{name}: bad GPU count {count!r} in {text[:60]!r}")
        found = True
        if kind is None:
            untyped += n
        else:
            typed += n
            gpu_type = gpu_type or kind
    if not found:
        return None, None
    return (untyped if untyped > 0 else typed), gpu_type


def _text(raw: dict, key: str) -> str | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ItemError(f"{key}: expected text, got {type(value).__name__}")
    return value


def _squeue_job(raw: Any) -> dict[str, Any]:
    """The fields of one `squeue --json` job that a snapshot and its observations need."""
    if not isinstance(raw, dict):
        raise ItemError(f"not a JSON object ({type(raw).__name__})")
    job_id = raw.get("job_id")
    if isinstance(job_id, bool) or not isinstance(job_id, int | str) or job_id in ("", None):
        raise ItemError("job_id: missing")
    states = raw.get("job_state")
    if isinstance(states, str):  # data parsers before v0.0.39 print one word
        states = [states]
    if not isinstance(states, list) or not states or not all(isinstance(s, str) for s in states):
        raise ItemError("job_state: expected a list of states")
    base = [s for s in states if s in BASE_STATES]
    if not base:
        raise ItemError(f"job_state: no known job state in {str(states)[:80]}")
    # COMPLETING is a flag on the base state: the job still holds its nodes.
    state = "COMPLETING" if "COMPLETING" in states and base[0] != "PENDING" else base[0]
    nodes_needed = number(raw.get("node_count"), "node_count") or 1.0
    gpus, gpu_type = gpu_request(_text(raw, "tres_alloc_str"), "tres_alloc_str")
    if gpus is None:
        gpus, gpu_type = gpu_request(_text(raw, "tres_per_job"), "tres_per_job")
    if gpus is None:
        per_node, gpu_type = gpu_request(_text(raw, "tres_per_node"), "tres_per_node")
        gpus = None if per_node is None else per_node * nodes_needed
    if gpus is None:
        gpus, gpu_type = gpu_request(_text(raw, "tres_req_str"), "tres_req_str")
    if gpu_type is None:
        for key in ("tres_per_node", "tres_per_job"):
            gpu_type = gpu_type or gpu_request(_text(raw, key), key)[1]
    memory = number(raw.get("memory_per_node"), "memory_per_node")
    limit = number(raw.get("time_limit"), "time_limit")
    user = _text(raw, "user_name")
    return {
        "id": str(job_id),
        "state": state,
        "user": user or None,
        "gpus": gpus if gpus else None,
        "gpu_type": gpu_type,
        "cpus": number(raw.get("cpus"), "cpus"),
        "memory_gib": None if memory is None else memory * nodes_needed / MB_PER_GIB,
        "submit": epoch(raw.get("submit_time"), "submit_time"),
        "start": epoch(raw.get("start_time"), "start_time"),
        "end": epoch(raw.get("end_time"), "end_time"),
        "end_kind": FINAL_KINDS.get(state),
        "hosts": expand_hostlist(_text(raw, "nodes") or "", "nodes"),
        "limit_s": limit * 60.0 if limit else None,
    }


def _pending(job: dict) -> PendingJob:
    if job["submit"] is None:
        raise ItemError("submit_time: not set")
    return pending_job(job)


def _running(job: dict, now: datetime) -> RunningJob:
    if job["submit"] is None or job["start"] is None:
        raise ItemError("submit_time/start_time: not set for a running job")
    if not job["hosts"]:
        raise ItemError("nodes: a running job lists no node")
    return running_job(job)


def _observations(job: dict, now: datetime) -> list[Observation]:
    """What one job's record shows happened to it by `now`."""
    if job["submit"] is None:
        raise ItemError("submit_time: not set")
    if job["state"] == "PENDING":
        job = {**job, "start": None}  # its start_time is a forecast
    return job_observations(job, now)


# -- nodes ---------------------------------------------------------------------------------


def _servers(sinfo: dict, file: str, skipped: list[Skipped]) -> list[Server]:
    """Every node with GPUs, once (a node in several partitions is listed once per
    partition), from `sinfo[]` or `nodes[]`."""
    if "sinfo" in sinfo:
        entries, read = require_list(sinfo, "sinfo", file), _sinfo_group
        label = "sinfo"
    elif "nodes" in sinfo:
        entries, read = require_list(sinfo, "nodes", file), _scontrol_node
        label = "nodes"
    else:
        raise CollectError(
            file,
            "sinfo",
            "missing: expected `sinfo --json` (a `sinfo` list) or `scontrol show nodes --json` "
            "(a `nodes` list)",
        )
    servers: dict[str, Server] = {}
    for i, entry in enumerate(entries):
        try:
            for server in read(entry):
                servers.setdefault(server.name, server)
        except (ItemError, ValidationError) as exc:
            skipped.append(Skipped(file, f"{label}[{i}]", reason(exc)))
    return list(servers.values())


def _unavailable(states: Any) -> bool:
    if isinstance(states, str):
        states = [states]
    return isinstance(states, list) and any(s in UNAVAILABLE for s in states)


def _gpu_server(
    name: str,
    gpu_type: str | None,
    gpus: tuple[float, float],
    cpus: tuple[float, float],
    memory_gib: tuple[float, float],
    *,
    down: bool,
) -> Server:
    """A GPU node as a server: `gpus` is (total, used), `cpus` and `memory_gib` are (total,
    free); a node that is down or draining offers nothing free."""
    total, used = gpus
    return Server(
        name=name,
        gpu_type=gpu_type,
        gpus=int(total),
        free_gpus=0.0 if down else max(0.0, min(total, total - used)),
        cpus=cpus[0],
        free_cpus=0.0 if down else cpus[1],
        memory_gib=memory_gib[0],
        free_memory_gib=0.0 if down else memory_gib[1],
    )


def _sinfo_group(entry: Any) -> list[Server]:
    """The GPU nodes of one `sinfo --json` entry (nodes alike; sums over the group are
    shared evenly between its nodes)."""
    if not isinstance(entry, dict):
        raise ItemError("not a JSON object")
    nodes = entry.get("nodes") if isinstance(entry.get("nodes"), dict) else {}
    names = nodes.get("nodes")
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        raise ItemError("nodes.nodes: expected a list of host names")
    gres = entry.get("gres") if isinstance(entry.get("gres"), dict) else {}
    total, gpu_type = gpu_request(gres.get("total"), "gres.total")
    if not total:
        return []  # no GPU: not a server the policy places on
    used = gpu_request(gres.get("used"), "gres.used")[0] or 0.0
    n = max(len(names), 1)
    cpus = entry.get("cpus") if isinstance(entry.get("cpus"), dict) else {}
    memory = entry.get("memory") if isinstance(entry.get("memory"), dict) else {}
    cpu_total = number(cpus.get("total"), "cpus.total") or 0.0
    cpu_idle = number(cpus.get("idle"), "cpus.idle") or 0.0
    mem_node = number(memory.get("maximum"), "memory.maximum") or 0.0
    mem_alloc = number(memory.get("allocated"), "memory.allocated") or 0.0
    state = (entry.get("node") or {}).get("state") if isinstance(entry.get("node"), dict) else None
    down = _unavailable(state)
    return [
        _gpu_server(
            name,
            gpu_type,
            (total, used),
            (cpu_total / n, min(cpu_idle / n, cpu_total / n)),
            (mem_node / MB_PER_GIB, max(0.0, mem_node - mem_alloc / n) / MB_PER_GIB),
            down=down,
        )
        for name in names
    ]


def _scontrol_node(entry: Any) -> list[Server]:
    """One node of `scontrol show nodes --json` (`nodes[]`), if it has GPUs."""
    if not isinstance(entry, dict):
        raise ItemError("not a JSON object")
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise ItemError("name: missing")
    total, gpu_type = gpu_request(entry.get("gres"), "gres")
    if not total:
        return []
    used = gpu_request(entry.get("gres_used"), "gres_used")[0] or 0.0
    cpus = number(entry.get("cpus"), "cpus") or 0.0
    alloc_cpus = number(entry.get("alloc_cpus"), "alloc_cpus") or 0.0
    memory = number(entry.get("real_memory"), "real_memory") or 0.0
    alloc_mem = number(entry.get("alloc_memory"), "alloc_memory") or 0.0
    down = _unavailable(entry.get("state"))
    return [
        _gpu_server(
            name,
            gpu_type,
            (total, used),
            (cpus, max(0.0, cpus - alloc_cpus)),
            (memory / MB_PER_GIB, max(0.0, memory - alloc_mem) / MB_PER_GIB),
            down=down,
        )
    ]


# -- sacct ---------------------------------------------------------------------------------


def _tres_gpus(tres: Any, name: str) -> tuple[float | None, str | None]:
    """(GPUs, type) of a sacct TRES list `[{"type": "gres", "name": "gpu:a100", "count": 4}]`."""
    if tres is None:
        return None, None
    if not isinstance(tres, list):
        raise ItemError(f"{name}: expected a list")
    parts = []
    for item in tres:
        if isinstance(item, dict) and item.get("type") == "gres":
            parts.append(f"gres/{item.get('name')}={item.get('count')}")
    return gpu_request(",".join(parts), name)


def _sacct_observations(
    sacct: Any, file: str, now: datetime, skipped: list[Skipped]
) -> list[Observation]:
    """The lifetimes sacct records: submitted, started, and how each ended."""
    sacct = require_object(sacct, file, "top level")
    out: list[Observation] = []
    for i, raw in enumerate(require_list(sacct, "jobs", file)):
        where = _where(i, raw)
        try:
            if not isinstance(raw, dict):
                raise ItemError("not a JSON object")
            job_id = raw.get("job_id")
            if isinstance(job_id, bool) or not isinstance(job_id, int | str) or job_id == "":
                raise ItemError("job_id: missing")
            times = raw.get("time")
            state = raw.get("state")
            if not isinstance(times, dict):
                raise ItemError("time: expected an object")
            if not isinstance(state, dict) or not isinstance(state.get("current"), list):
                raise ItemError("state.current: expected a list of states")
            tres = raw.get("tres") if isinstance(raw.get("tres"), dict) else {}
            gpus, gpu_type = _tres_gpus(tres.get("allocated"), "tres.allocated")
            if gpus is None:
                gpus, gpu_type = _tres_gpus(tres.get("requested"), "tres.requested")
            if not gpus:
                skipped.append(Skipped(file, where, "no GPU requested: not a GPU job"))
                continue
            user = raw.get("user")
            limit = number(times.get("limit"), "time.limit")
            current = (state["current"] or ["UNKNOWN"])[0]
            job = {
                "id": str(job_id),
                "state": current,
                "user": user if isinstance(user, str) and user else None,
                "gpus": gpus,
                "gpu_type": gpu_type,
                "submit": epoch(times.get("submission"), "time.submission"),
                "start": epoch(times.get("start"), "time.start"),
                "end": epoch(times.get("end"), "time.end"),
                "end_kind": FINAL_KINDS.get(current),
                "hosts": expand_hostlist(raw.get("nodes") or "", "nodes"),
                "limit_s": limit * 60.0 if limit else None,
            }
            out.extend(_observations(job, now))
        except (ItemError, ValidationError) as exc:
            skipped.append(Skipped(file, where, reason(exc)))
    return out
