"""RL-TAPS' decision in the arena's DL2 setting: at every decision slot, every GPU of the
cluster picks one of the N visible jobs, or none. The one encoder and the one decoder of
that decision, beside each other; no torch (the network is `models.rltaps.arena`).

The DL2 setting (`models.evaluation.EvalConfig`: 96 servers of 2 GPUs, window 20, 1200 s
slots, parameter-server jobs of the DL2 catalogue) is not RL-TAPS' topology of single-GPU
"servers" (`tracelib.sim.topology`), so the decision is carried over as follows:

- Job slots: the snapshot's visible jobs (the window, running and waiting, by arrival) are
  the N job slots, N = the window; slot N is the null slot (the GPU idles). Jobs beyond
  the window are not visible in this setting (no backlog cells).
- GPUs: server s's GPUs are (s, 0), (s, 1), ... (`GpuLayout`). GPU g choosing slot n puts
  one worker of job n on g's server; a job's workers are the GPUs that chose it (at most
  its `max_workers`; a worker must fit on the server next to the workers chosen before
  it). A CPU-only model's worker (cnn-text, dssm) chosen by a GPU runs on that server and
  leaves the GPU idle: RL-TAPS' decision has only GPUs to hand out.
- Preemption: every job is re-decided every slot; a running job that no GPU chooses is
  paused (the simulator charges its reallocation pause when it changes servers).
- Parameter servers, the half of the decision RL-TAPS does not make: a job given w workers
  gets `ps_count` PSs (rule `ps_rule`: "at-least-workers", its requested PSs raised to one
  per worker, the default; or "requested", its requested PSs as the evaluation's default
  allocation gives them), placed by the evaluation's default placement policy (DL2's load
  balancing: the least-loaded servers) on what the workers leave free. PSs the job already
  had stay where they are while they fit. A job none of whose PSs can be placed does not
  run (its workers are dropped: a PS job without a PS trains at speed 0).

Decoding order (the decoder visits the GPUs one after another, so each GPU's softmax sees
what the GPUs before it chose): first the GPUs a job holds now (`holders`, in GPU order),
so running jobs keep their GPUs first; then the free GPUs, those of the least-loaded servers
first and, on equally loaded servers, every server's first free GPU before any server's
second, so that new workers spread over empty servers unless the policy asks otherwise.

State (RL-TAPS' image, section 4.3, carried over), with named features:
- cluster image (horizon, G): GPU g's column is lit for as many rows as its holder job has
  slots left at its last observed speed, with value (slot + 1) / (N + 1) (DeepRM's colours);
- per job slot (`job_features`): model one-hot and JOB_SCALARS (below); empty slots are 0;
- per job and worker count k (`count_features`, a table over k = 0..max_workers): what the
  (k+1)-th GPU would mean to the job (COUNT_FEATURES);
- per GPU and job (`GpuDraft.pair`): PAIR_FEATURES; per GPU, NULL_FEATURES for the null slot.
Speeds are the catalogue's (the public analytical model) and the job's observed history,
never the simulator's truth (`Snapshot.oracle`).
"""

from __future__ import annotations

import bisect
import functools
import math
from dataclasses import dataclass, field, replace

import numpy as np

from tracelib.catalogue import DL2_CATALOGUE, JobType
from tracelib.scenarios.dl2 import dl2_small
from tracelib.sim.cluster import byte_rows
from tracelib.sim.config import ClusterConfig
from tracelib.sim.policy import PlacementPolicy
from tracelib.sim.snapshot import (
    Allocation,
    ClusterView,
    JobPlacement,
    JobView,
    Placement,
    Snapshot,
    read_only,
)

PS_RULES = ("at-least-workers", "requested")
"""How many PSs a job given w workers gets (`ps_count`)."""

JOB_SCALARS = (
    "requested_workers",  # the job's requested workers / max_workers
    "requested_ps",  # its requested PSs / max_workers
    "remaining_slots",  # log1p(slots left at the request, catalogue speed) / log1p(scale)
    "progress",  # epochs done / estimated epochs, clipped to 1
    "running",  # 1 if it holds workers now
    "workers",  # workers now / max_workers
    "ps",  # PSs now / max_workers
    "waited_slots",  # log1p(slots since arrival) / log1p(scale), clipped to 1
    "observed_speed",  # last observed speed / catalogue speed at those counts / 2 (0.5: none)
    "cpu_only",  # its workers need no GPU
)
COUNT_FEATURES = (
    "below_request",  # k < requested workers
    "first_worker",  # k == 0: this GPU would start the job
    "over_request",  # k / requested workers / 4, clipped to 1
    "keeps_size",  # k < workers now: the job would keep its size
    "marginal_gain",  # log(catalogue speed with k+1 workers / with k), PSs by the rule; 1 at k=0
)
PAIR_FEATURES = (
    "holds_gpu",  # the job holds this GPU now
    "own_on_server",  # a GPU before this one on its server chose the job
    "other_on_server",  # a GPU before this one on its server chose another job
)
NULL_FEATURES = (
    "bias",  # 1
    "gpu_held",  # some job holds this GPU now
    "server_taken",  # a GPU before this one on its server chose a job
)


def job_features(n_types: int) -> tuple[str, ...]:
    """Column names of one job slot's row."""
    names = [jt.model for jt in sorted(DL2_CATALOGUE, key=lambda jt: jt.type_index)]
    names += [f"type{i}" for i in range(len(names), n_types)]
    return tuple(f"type={m}" for m in names[:n_types]) + JOB_SCALARS


@dataclass(frozen=True)
class ArenaEnvConfig:
    """The cluster and window the decision runs on, and how the state is scaled."""

    cluster: ClusterConfig = field(default_factory=dl2_small)
    """The evaluation's cluster (default: DL2's small setting, 96 servers of 2 GPUs)."""
    window: int = 20
    """N: job slots = the evaluation's window of visible jobs."""
    horizon: int = 10
    """Rows of the cluster image (RL-TAPS App. A: 10)."""
    n_types: int = len(DL2_CATALOGUE)
    """Model one-hot width (the DL2 catalogue's 8 models)."""
    max_workers: int = 16
    """Largest worker count the count table covers (the catalogue's cap)."""
    ps_rule: str = "at-least-workers"
    """PSs of a job given w workers: "at-least-workers" (max(requested, w)) or "requested"."""
    slots_scale: float = 200.0
    """remaining_slots and waited_slots saturate at this many slots (log scale)."""

    def __post_init__(self) -> None:
        if min(self.window, self.horizon, self.n_types, self.max_workers) < 1:
            raise ValueError("window, horizon, n_types and max_workers must be positive")
        if self.ps_rule not in PS_RULES:
            raise ValueError(f"ps_rule must be one of {PS_RULES}, got {self.ps_rule!r}")
        if self.slots_scale <= 1:
            raise ValueError("slots_scale must be above 1")
        if GpuLayout.of(self.cluster).n_gpus < 1:
            raise ValueError("the cluster has no GPU")

    @property
    def n_gpus(self) -> int:
        """M: GPUs of the cluster (whole GPUs per server)."""
        return GpuLayout.of(self.cluster).n_gpus

    @property
    def image_dim(self) -> int:
        """Cells of the cluster image (horizon x M)."""
        return self.horizon * self.n_gpus

    @property
    def job_dim(self) -> int:
        """Columns of a job slot's row."""
        return self.n_types + len(JOB_SCALARS)


@dataclass(frozen=True)
class GpuLayout:
    """Which server each GPU sits on: GPU g is the `index[g]`-th GPU of `server[g]`."""

    server: tuple[int, ...]
    index: tuple[int, ...]

    @classmethod
    def of(cls, cluster: ClusterConfig) -> GpuLayout:
        """Whole GPUs of every server, servers in index order."""
        return cls.of_capacity(cluster.server_capacity())

    @classmethod
    def of_capacity(cls, capacity: np.ndarray) -> GpuLayout:
        """Whole GPUs of every server of a (servers, 3) capacity array (a snapshot's
        `ClusterView.capacity`), servers in index order."""
        per = [math.floor(g + 1e-9) for g in np.asarray(capacity)[:, 0]]
        server = tuple(s for s, n in enumerate(per) for _ in range(n))
        index = tuple(i for n in per for i in range(n))
        return cls(server, index)

    @property
    def n_gpus(self) -> int:
        return len(self.server)

    # Derived once per layout (a decision on a node list reads them for thousands of GPUs).

    @functools.cached_property
    def servers(self) -> np.ndarray:
        """(M,) int64: `server` as an array."""
        return np.asarray(self.server, dtype=np.int64)

    @functools.cached_property
    def indexes(self) -> np.ndarray:
        """(M,) int64: `index` as an array."""
        return np.asarray(self.index, dtype=np.int64)

    @functools.cached_property
    def gpus_of(self) -> dict[int, tuple[int, ...]]:
        """Server -> its GPUs, in index order."""
        out: dict[int, list[int]] = {}
        for g, s in enumerate(self.server):
            out.setdefault(s, []).append(g)
        return {s: tuple(gpus) for s, gpus in out.items()}


def resample_image(image: np.ndarray, horizon: int, n_gpus: int) -> np.ndarray:
    """A (horizon * M',) cluster image of M' GPUs as the (horizon * n_gpus,) image of a
    network built for n_gpus GPUs: the GPUs (in layout order) are laid on [0, 1) in equal
    widths, and each of the n_gpus columns is the mean of what covers its own width
    (area-weighted; a column between two GPUs mixes them). The image unchanged when
    M' == n_gpus."""
    m = image.size // horizon
    if m == n_gpus:
        return image
    rows = image.reshape(horizon, m)
    # Only the rows where some GPU is held: a row of zeros resamples to zeros, and each
    # output row is its own sums, so skipping the others changes no bit.
    drawn = np.flatnonzero(rows.any(axis=1))
    out = np.zeros((horizon, n_gpus), dtype=np.float32)
    if len(drawn):
        # einsum (numpy's own loops): the same sums whatever threads BLAS would use.
        out[drawn] = np.einsum("hm,mn->hn", rows[drawn], _resampling(m, n_gpus))
    return out.ravel()


@functools.lru_cache(maxsize=8)
def _resampling(m: int, n_gpus: int) -> np.ndarray:
    """(m, n_gpus) float32 weights of `resample_image` (read-only: shared between calls).
    Overlap of source column g, [g/m, (g+1)/m), with target column j, [j/n, (j+1)/n), in
    units of the target's width: each target column's weights sum to 1."""
    edges_src = np.arange(m + 1) / m
    edges_dst = np.arange(n_gpus + 1) / n_gpus
    lo = np.maximum(edges_src[:-1, None], edges_dst[None, :-1])
    hi = np.minimum(edges_src[1:, None], edges_dst[None, 1:])
    weight = (np.clip(hi - lo, 0.0, None) * n_gpus).astype(np.float32)
    weight.flags.writeable = False
    return weight


def ps_count(job: JobView, workers: int, rule: str) -> int:
    """PSs of `job` when given `workers` workers: none for models without PSs or without
    workers; else its requested PSs (at least 1), raised to `workers` under
    "at-least-workers"; capped at its `max_workers`."""
    if workers <= 0 or not any(d > 0 for d in job.ps_demand):
        return 0
    want = max(job.requested_ps, 1)
    if rule == "at-least-workers":
        want = max(want, workers)
    return min(want, job.max_workers)


def _nominal_speeds(jt: JobType, job: JobView, workers: np.ndarray, rule: str) -> np.ndarray:
    """Catalogue epochs/s of `job` with each of `workers` (>= 1) workers and its rule's PSs
    (`JobType.speed`, vectorized; PS-less models use the form with one PS)."""
    req = max(job.requested_ps, 1)
    ps = np.full(len(workers), float(req)) if rule == "requested" else np.maximum(workers, req)
    if not any(d > 0 for d in job.ps_demand):
        ps = np.ones(len(workers))
    ps = np.minimum(ps, job.max_workers)
    a, b, c, d, e = jt.coefficients
    denom = a / workers + b + c * workers / ps + d * workers + e * ps
    return 1.0 / denom / jt.iters_per_epoch


@dataclass
class ArenaStep:
    """One snapshot encoded: what the network reads and what the decoder needs."""

    jobs: tuple[JobView, ...]
    """The job slots' jobs (at most N; slot n is jobs[n])."""
    features: np.ndarray
    """(N, job_dim) float32 job rows (zeros past len(jobs))."""
    image: np.ndarray
    """(horizon * M,) float32 cluster image, row-major (horizon, M)."""
    counts: np.ndarray
    """(N, max_workers + 1, len(COUNT_FEATURES)) float32: features of each worker count."""
    holders: np.ndarray
    """(M,) int64: the slot holding each GPU now, -1 for none."""
    order: np.ndarray
    """(M,) int64: GPUs in decoding order."""
    caps: np.ndarray
    """(N,) int64: most workers each slot may get (0 for empty slots)."""
    demand: np.ndarray
    """(N, 3) float: one worker's (GPU, CPU, memory) per slot."""
    free: np.ndarray
    """(servers, 3) float: what workers may use (`ClusterView.available`)."""
    allowed: np.ndarray | None
    """(N, servers) bool: servers whose GPU type each slot's workers may use; None when the
    cluster has no types."""
    kind: list[int]
    """Per server, its kind: servers of equal free resources and GPU type mask alike."""


JobRows = tuple[np.ndarray, np.ndarray]
"""What `encode` computes of a job from its type and request alone: its nominal speed at
1..max_workers workers (max_workers,) and its count-feature table (max_workers + 1,
len(COUNT_FEATURES)) but the column of the workers it holds."""


def _job_rows(jt: JobType, job: JobView, cfg: ArenaEnvConfig) -> JobRows:
    k = np.arange(cfg.max_workers + 1, dtype=float)
    req_w = max(job.requested_workers, 1)
    speed = _nominal_speeds(jt, job, k[1:], cfg.ps_rule)  # (max_workers,): 1.. workers
    gain = np.ones_like(k)  # gain[k]: from k to k + 1 workers (the last: masked by the cap)
    gain[1:-1] = np.log(speed[1:] / speed[:-1])
    gain[-1] = -1.0
    table = np.zeros((cfg.max_workers + 1, len(COUNT_FEATURES)), dtype=np.float32)
    table[:, 0] = k < job.requested_workers
    table[:, 1] = k == 0
    table[:, 2] = np.minimum(k / req_w / 4.0, 1.0)
    table[:, 4] = np.clip(gain, -1.0, 1.0)
    return speed, table


def encode(
    snap: Snapshot,
    cfg: ArenaEnvConfig,
    layout: GpuLayout,
    memo: dict[tuple, JobRows] | None = None,
) -> ArenaStep:
    """The state and decoder inputs of one decision. `memo`: a caller's store of
    `_job_rows` by what they depend on (jobs alike in type and request share them), kept
    across decisions: a policy encoding a long queue batch by batch at every decision
    computes them once per kind of job."""
    n_slots, n_gpus = cfg.window, layout.n_gpus
    jobs = snap.jobs[:n_slots]
    slot_of = {j.job_id: k for k, j in enumerate(jobs)}
    types = snap.job_types
    features = np.zeros((n_slots, cfg.job_dim), dtype=np.float32)
    counts = np.zeros((n_slots, cfg.max_workers + 1, len(COUNT_FEATURES)), dtype=np.float32)
    caps = np.zeros(n_slots, dtype=np.int64)
    demand = np.zeros((n_slots, 3))
    left_slots = np.zeros(n_slots)  # at the last observed speed (0: not running)
    log_scale = math.log1p(cfg.slots_scale)
    k = np.arange(cfg.max_workers + 1, dtype=float)
    for n, job in enumerate(jobs):
        jt = types[job.model]
        cap = min(job.max_workers, cfg.max_workers)
        caps[n], demand[n] = cap, job.worker_demand
        req_w = max(job.requested_workers, 1)
        left = max(job.remaining_epochs_est, 0.01 * job.epochs_est)
        if memo is None:
            speed, table = _job_rows(jt, job, cfg)
        else:
            key = (jt, job.requested_workers, job.requested_ps, job.max_workers, job.ps_demand)
            rows = memo.get(key)
            if rows is None:
                rows = memo[key] = _job_rows(jt, job, cfg)
            speed, table = rows
        at_request = left / max(float(speed[min(req_w, cap, cfg.max_workers) - 1]), 1e-12)
        observed = 0.5
        if job.history and job.workers > 0:
            sample = job.history[-1]
            nominal = jt.speed(sample.workers, max(sample.ps, 1))
            ratio = sample.speed / nominal if nominal > 0 else 1.0
            observed = min(ratio / 2.0, 1.0)
            if sample.speed > 0:
                left_slots[n] = left * jt.iters_per_epoch / sample.speed / snap.slot_s
        elif job.workers > 0:
            left_slots[n] = left / max(jt.epochs_per_second(job.workers, max(job.ps, 1)), 1e-12)
            left_slots[n] /= snap.slot_s
        if job.type_index < cfg.n_types:
            features[n, job.type_index] = 1.0
        features[n, cfg.n_types :] = (
            min(job.requested_workers / cap, 1.0),
            min(job.requested_ps / cap, 1.0),
            min(math.log1p(at_request / snap.slot_s) / log_scale, 1.0),
            min(job.epochs_done / job.epochs_est, 1.0) if job.epochs_est > 0 else 0.0,
            float(bool(job.placement.workers)),
            min(len(job.placement.workers) / cap, 1.0),
            min(len(job.placement.ps) / cap, 1.0),
            min(math.log1p(max(snap.time_s - job.arrival_s, 0.0) / snap.slot_s) / log_scale, 1.0),
            observed,
            float(job.worker_demand[0] <= 0),
        )
        counts[n] = table
        counts[n, :, 3] = k < len(job.placement.workers)
    holders = _holders(snap, jobs, slot_of, layout)
    image = np.zeros((cfg.horizon, n_gpus), dtype=np.float32)
    held = np.flatnonzero(holders >= 0)
    if len(held):
        # Each held GPU's column: its holder's slot mark down to the slots it has left
        # (at least one row), all columns at once.
        slot = holders[held]
        rows = np.maximum(np.minimum(np.ceil(left_slots[slot] - 1e-9), cfg.horizon), 1)
        marks = (slot + 1) / (n_slots + 1)  # (H,)
        down = np.arange(cfg.horizon)[:, None] < rows[None, :]  # (horizon, H)
        image[:, held] = np.where(down, marks[None, :], 0.0)
    capacity = snap.cluster.capacity
    load = ((capacity - snap.cluster.free) / np.where(capacity > 0, capacity, 1.0)).sum(axis=1)
    load = np.round(load, 9)  # equal loads compare equal
    free_gpus = np.flatnonzero(holders < 0)
    server, index = layout.servers, layout.indexes
    # Free GPUs: least-loaded servers first, then each server's first free GPU before any
    # second (rank of the GPU among its server's free GPUs), then server order.
    rank = np.zeros(n_gpus, dtype=np.int64)
    by_server = np.argsort(server[free_gpus], kind="stable")  # free GPUs, server by server
    grouped = server[free_gpus][by_server]
    starts = np.flatnonzero(np.r_[True, grouped[1:] != grouped[:-1]])  # each server's first
    within = np.arange(len(free_gpus)) - np.repeat(starts, np.diff(np.r_[starts, len(grouped)]))
    rank[free_gpus[by_server]] = within
    keys = (index[free_gpus], server[free_gpus], rank[free_gpus], load[server[free_gpus]])
    free_order = free_gpus[np.lexsort(keys)]
    order = np.concatenate([np.flatnonzero(holders >= 0), free_order]).astype(np.int64)
    allowed = None
    server_types = snap.cluster.gpu_types
    if server_types is not None:
        allowed = np.ones((n_slots, len(server_types)), dtype=bool)
        # Each distinct type once (a node list has thousands of servers of a few types).
        distinct: dict[str | None, int] = {}
        code = np.array(
            [distinct.setdefault(t, len(distinct)) for t in server_types], dtype=np.int64
        )
        for n, job in enumerate(jobs):
            if job.gpu_types is not None and job.worker_demand[0] > 0:
                allowed[n] = np.array([t in job.gpu_types for t in distinct])[code]
    free = np.array(snap.cluster.available, dtype=float)
    return ArenaStep(
        jobs=jobs,
        features=features,
        image=image.ravel(),
        counts=counts,
        holders=holders,
        order=order,
        caps=caps,
        demand=demand,
        free=free,
        allowed=allowed,
        kind=_kinds(free, allowed),
    )


def _kinds(free: np.ndarray, allowed: np.ndarray | None) -> list[int]:
    """Per server, its kind: equal free resources (`free`, (servers, 3)) and equal columns
    of `allowed` ((N, servers)) make one kind; kinds are numbered in order of their first
    server."""
    n = len(free)
    # Bytes compare as the values do once -0.0 is +0.0 (adding 0.0 does that). Not
    # `equal_rows`: on a node list most servers are a kind of their own, and splitting the
    # sorted rows into one array per kind costs ten times this at every decision.
    parts = [np.ascontiguousarray(free + 0.0).view(np.uint8).reshape(n, 8 * free.shape[1])]
    if allowed is not None:
        parts.append(np.ascontiguousarray(allowed.T, dtype=np.uint8))
    first, which = byte_rows(np.ascontiguousarray(np.concatenate(parts, axis=1)))
    number = np.empty(len(first), dtype=np.int64)
    number[np.argsort(first)] = np.arange(len(first))
    return number[which].tolist()


def _holders(
    snap: Snapshot, jobs: tuple[JobView, ...], slot_of: dict[int, int], layout: GpuLayout
) -> np.ndarray:
    """The slot holding each GPU now: on every server, the workers there (jobs in slot
    order) take its GPUs from the first; -1 where no visible job's worker is."""
    holders = np.full(layout.n_gpus, -1, dtype=np.int64)
    per_server: dict[int, int] = {}
    for job in jobs:
        n = slot_of[job.job_id]
        for s in job.placement.workers:
            gpus = layout.gpus_of.get(s, ())
            i = per_server.get(s, 0)
            if i < len(gpus):
                holders[gpus[i]] = n
                per_server[s] = i + 1
    return holders


def next_breaks(held: np.ndarray, kinds: np.ndarray) -> list[int]:
    """For each position p of a decoding order (M,) and one past its end, the first later
    position that starts another plain run: a GPU `held` or of another `kinds` than the one
    before it; M where none does."""
    m = len(held)
    breaks = np.flatnonzero(held[1:] | (kinds[1:] != kinds[:-1])) + 1  # (B,) sorted
    after = np.searchsorted(breaks, np.arange(m), side="right")
    return [*np.append(breaks, m)[after].tolist(), m]


class GpuDraft:
    """The decision being decoded: which GPUs chose which slot so far. The policy asks for
    each GPU's mask and features in `step.order`, then records its choice.

    A GPU is plain when no job holds it and no GPU of its server chose anything yet in
    this decision: then its features are all zero but the null slot's bias, and its mask
    depends only on its server's kind (capacity and GPU type) and on which slots are still
    below their cap. Consecutive plain GPUs of one kind therefore share one softmax until
    one of them chooses a job (`plain_run`), which lets a decoder settle a run of them at
    once (every GPU starts on the null slot).

    `closed` (M,) marks GPUs this decision may not hand out (taken by an earlier batch of
    jobs, `models.rltaps.arena`): their only choice is the null slot and they end plain
    runs, as held GPUs do."""

    def __init__(
        self,
        step: ArenaStep,
        layout: GpuLayout,
        n_slots: int,
        closed: np.ndarray | None = None,
    ) -> None:
        self.step = step
        self.n_slots = n_slots
        self.server = layout.server
        self.closed = np.zeros(layout.n_gpus, dtype=bool) if closed is None else closed
        self.k = np.zeros(n_slots, dtype=np.int64)
        """GPUs each slot got so far."""
        self.free = step.free.copy()
        self.on_server: dict[int, list[int]] = {}
        """Slots chosen so far per server."""
        self.choices = np.full(layout.n_gpus, n_slots, dtype=np.int64)
        """(M,) slot per GPU (by GPU index; N: null)."""
        self.open = np.zeros(n_slots, dtype=bool)
        """Slots with a job below its cap."""
        self.open[: len(step.jobs)] = step.caps[: len(step.jobs)] > 0
        # (servers, N) bool: each slot's worker fits on each server as the draft stands
        # (and its GPU type is allowed there), all at once; a choice marks its server's row
        # for doing again when next read.
        self._fits = (step.demand[None, :, :] <= self.free[:, None, :] + 1e-9).all(axis=2)
        if step.allowed is not None:
            self._fits &= step.allowed.T
        self._stale: set[int] = set()
        """Servers whose row of `_fits` a choice made out of date."""
        self.kind = step.kind
        self._position = np.empty(layout.n_gpus, dtype=np.int64)
        self._position[step.order] = np.arange(layout.n_gpus)
        self._gpus_of = layout.gpus_of
        # Plain runs: the next position (in step.order) where the GPU is held or of another
        # server kind than the one before it (static), and the sorted positions of GPUs whose
        # server got a choice in this decision (dynamic).
        held = ((step.holders >= 0) | self.closed)[step.order]
        kinds = np.asarray(self.kind, dtype=np.int64)[layout.servers[step.order]]
        self._next_break = next_breaks(held, kinds)
        self._touched: list[int] = []

    def plain(self, g: int) -> bool:
        """Whether GPU g is plain (class docstring)."""
        return (
            self.step.holders[g] < 0 and not self.closed[g] and self.server[g] not in self.on_server
        )

    def plain_run(self, position: int) -> int:
        """How many GPUs from `position` in `step.order` on are plain and of the kind of the
        first (0 if that one is not plain)."""
        if not self.plain(int(self.step.order[position])):
            return 0
        end = self._next_break[position]
        later = bisect.bisect_right(self._touched, position)
        if later < len(self._touched):
            end = min(end, self._touched[later])
        return end - position

    def mask(self, g: int) -> np.ndarray:
        """(N + 1,) bool: slots GPU g may choose (a present job below its cap whose worker
        fits on g's server next to those chosen before; the null slot always)."""
        out = np.empty(self.n_slots + 1, dtype=bool)
        out[-1] = True
        if self.closed[g]:
            out[:-1] = False
            return out
        s = self.server[g]
        if s in self._stale:
            self._stale.discard(s)
            fits = (self.step.demand <= self.free[s] + 1e-9).all(axis=1)
            if self.step.allowed is not None:
                fits &= self.step.allowed[:, s]
            self._fits[s] = fits
        np.logical_and(self._fits[s], self.open, out=out[:-1])
        return out

    def pair(self, g: int) -> np.ndarray:
        """(N, len(PAIR_FEATURES)) bool features of GPU g with every slot."""
        out = np.zeros((self.n_slots, len(PAIR_FEATURES)), dtype=bool)
        h = self.step.holders[g]
        if h >= 0:
            out[h, 0] = True
        chosen = self.on_server.get(self.server[g])
        if chosen:
            out[:, 2] = True
            for n in set(chosen):
                out[n, 1] = True
                # "other" means a job other than this one chose a GPU of the server.
                out[n, 2] = any(c != n for c in chosen)
        return out

    def null(self, g: int) -> np.ndarray:
        """(len(NULL_FEATURES),) bool features of GPU g's null slot."""
        return np.array(
            [True, self.step.holders[g] >= 0, self.server[g] in self.on_server], dtype=bool
        )

    def choose(self, g: int, n: int) -> None:
        """Record GPU g's choice of slot n (N: null)."""
        self.choices[g] = n
        if n >= self.n_slots:
            return
        s = self.server[g]
        self.k[n] += 1
        self.free[s] -= self.step.demand[n]
        self._stale.add(s)
        self.on_server.setdefault(s, []).append(n)
        if len(self.on_server[s]) == 1:  # the server's GPUs are no longer plain
            for other in self._gpus_of[s]:
                bisect.insort(self._touched, int(self._position[other]))
        if self.k[n] >= self.step.caps[n]:
            self.open[n] = False


def decision(
    snap: Snapshot,
    step: ArenaStep,
    choices: np.ndarray,
    layout: GpuLayout,
    cfg: ArenaEnvConfig,
    placement: PlacementPolicy,
    rng: np.random.Generator,
) -> tuple[Allocation, Placement]:
    """The allocation and placement per-GPU `choices` (M,) mean: workers where their GPUs
    are, PSs by `cfg.ps_rule` placed by `placement` on what the workers leave free (PSs a job
    already had stay while they fit). Jobs left without a PS do not run."""
    n_slots = cfg.window
    workers: dict[int, list[int]] = {}
    choices = np.asarray(choices)
    for g in np.flatnonzero(choices < min(n_slots, len(step.jobs))).tolist():
        workers.setdefault(int(choices[g]), []).append(layout.server[g])
    capacity = snap.cluster.capacity
    pool = snap.cluster.pool()
    for n, servers in workers.items():
        for s in servers:
            pool.take_unchecked(s, step.jobs[n].worker_demand)
    # PSs each job keeps: where it had them, while they fit beside the new workers.
    views, alloc_ps = [], {}
    for n in sorted(workers):
        job = step.jobs[n]
        want = ps_count(job, len(workers[n]), cfg.ps_rule)
        kept = []
        for s in job.placement.ps[:want]:
            if pool.fits(s, job.ps_demand):
                pool.take_unchecked(s, job.ps_demand)
                kept.append(s)
        views.append(replace(job, placement=JobPlacement.of((), kept)))
        alloc_ps[job.job_id] = (0, want)
    # The placement policy sees the kept PSs as the jobs' placement and the workers as
    # reserved: it keeps the first and places the rest on what is left.
    for view in views:
        for s in view.placement.ps:
            pool.give(s, view.ps_demand)
    reserved = read_only(capacity - pool.free_array())
    cluster = ClusterView(
        capacity,
        reserved,
        reserved,
        gpu_types=snap.cluster.gpu_types,
        reserved_shares=snap.cluster.reserved_shares,
    )
    ps_snap = replace(snap, cluster=cluster, jobs=tuple(views))
    placed_ps = placement.place(ps_snap, Allocation.of(alloc_ps), rng) if views else None
    # Whatever the placement policy returned, keep only what fits the servers' summed
    # capacity (what the engine checks): a policy that ignores `reserved` must not
    # overfill a server.
    available = np.asarray(snap.cluster.available, dtype=float)
    free: dict[int, list[float]] = {}  # the servers written so far (the rest: `available`)

    # Unrolled over (GPU, CPU, memory): this runs for every task of every decision.
    def take(server: int, demand: tuple[float, float, float]) -> bool:
        row = free.get(server)
        g, c, m = available[server].tolist() if row is None else row
        dg, dc, dm = demand
        if g + 1e-9 < dg or c + 1e-9 < dc or m + 1e-9 < dm:
            return False
        free[server] = [g - dg, c - dc, m - dm]
        return True

    def give(server: int, demand: tuple[float, float, float]) -> None:
        (g, c, m), (dg, dc, dm) = free[server], demand
        free[server] = [g + dg, c + dc, m + dm]

    counts: dict[int, tuple[int, int]] = {}
    jobs: dict[int, JobPlacement] = {}
    for n in sorted(workers):
        job = step.jobs[n]
        taken_w = [s for s in workers[n] if take(s, job.worker_demand)]
        ps_servers = placed_ps.get(job.job_id).ps if placed_ps is not None else ()
        taken_p = [s for s in ps_servers if take(s, job.ps_demand)]
        needs_ps = any(d > 0 for d in job.ps_demand)
        if not taken_w or (needs_ps and not taken_p):
            for s in taken_w:
                give(s, job.worker_demand)
            for s in taken_p:
                give(s, job.ps_demand)
            continue
        counts[job.job_id] = (len(taken_w), len(taken_p))
        jobs[job.job_id] = JobPlacement.of(taken_w, taken_p)
    return Allocation.of(counts), Placement.of(jobs)
