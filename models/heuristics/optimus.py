"""Optimus (Peng et al., EuroSys'18) as the DL2 and Chic papers use it as a baseline.

Speed model per job: speed(w, p) = 1 / (a/w + b + c*w/p + d*w + e*p), fitted online by
non-negative least squares (relative error) to the (workers, PSs, speed) points the job has
been *observed* at (`JobView.history`, merged per configuration, weighted by time), once it
has at least `min_points` distinct configurations. Before that, once the job has run: the
same fit on its observations together with its pre-run profile (`PROFILE`: the catalogue's
coefficients for the model, scaled by how fast the job actually ran against them, at a
handful of configurations it was not observed at), as Optimus fits on pre-run and online
points together. Before any run: the catalogue prior.

Allocation: every job (by arrival) first gets one worker and one PS while they fit; then
repeatedly the single task (a worker or a PS of some job) with the largest reduction of the
job's estimated remaining time per unit of dominant resource is added, while that reduction
is positive and the task fits. Decisions every 600 s (Optimus' interval; Chic's baseline);
registered also every 300 s ("optimus-300", Chic's other baseline) and at every arrival and
completion ("optimus-events"): Optimus at its best interval, measured in the arena (0.94 of
Optimus-600's average JCT, at 300 s 0.97, at 150 s 0.95), is the strongest fair baseline.

`OptimusOracle` ("optimus-oracle") uses the simulator's true isolated speed of each job
instead (`Snapshot.oracle`): an upper reference for the fitted version, not a baseline the
papers ran.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import nnls

from models.heuristics.common import remaining_epochs
from tracelib.catalogue import JobType
from tracelib.sim.builder import AllocationBuilder
from tracelib.sim.snapshot import Allocation, JobView, Snapshot, SpeedSample

SpeedFn = Callable[[int, int], float]


def fit_speed_model(
    points: list[tuple[int, int, float, float]],
) -> tuple[float, float, float, float, float] | None:
    """NNLS fit of (a..e) to (workers, PSs, speed, weight) points, relative error; None when
    the fit is degenerate (all coefficients zero)."""
    kept = [pt for pt in points if pt[2] > 0]
    if not kept:
        return None
    # Rows (1/w, 1, w/p, w, p) x speed x sqrt(weight), built as whole columns: the fit
    # runs for every job at every decision.
    w, p, s, wt = np.array(kept, dtype=float).T
    root = np.sqrt(wt)
    a = np.column_stack((1.0 / w, np.ones_like(w), w / p, w, p)) * s[:, None] * root[:, None]
    # Columns differ by orders of magnitude (1/w vs p); NNLS is invariant to positive column
    # scaling, and scaled columns keep it from stalling on ill-conditioned points.
    norms = np.linalg.norm(a, axis=0)
    norms[norms == 0] = 1.0
    try:
        scaled, _ = nnls(a / norms, root, maxiter=50 * a.shape[1])
    except RuntimeError:  # no convergence: keep the prior
        return None
    theta = scaled / norms
    if not np.any(theta > 0):
        return None
    return tuple(float(x) for x in theta)  # type: ignore[return-value]


Sums = dict[tuple[int, int], list[float]]
"""Per (workers, PSs): [sum of speed x duration, sum of duration], in history order."""


def _accumulate(acc: Sums, samples: tuple[SpeedSample, ...]) -> Sums:
    for s in samples:
        if s.workers > 0 and s.ps > 0 and s.duration_s > 0:
            a = acc.setdefault((s.workers, s.ps), [0.0, 0.0])
            a[0] += s.speed * s.duration_s
            a[1] += s.duration_s
    return acc


def _points(acc: Sums) -> list[tuple[int, int, float, float]]:
    return [(w, p, a[0] / a[1], a[1]) for (w, p), a in sorted(acc.items())]


def merged_points(history: tuple[SpeedSample, ...]) -> list[tuple[int, int, float, float]]:
    """Observations merged per (workers, PSs): time-weighted mean speed, weight = time."""
    return _points(_accumulate({}, history))


class MergedHistories:
    """`merged_points` of each job's history, carried forward as the history grows.

    A job's history only grows during a run (the simulator appends a sample per interval),
    and merging it whole at every decision made Optimus quadratic in a job's length (half
    of the fidelity checks' minutes). The sums are extended with the new samples only, in
    the same order, so the points are exactly `merged_points(history)`; a history that does
    not extend the one seen before (another run, or a job id reused) is merged from
    scratch."""

    def __init__(self) -> None:
        self._seen: dict[int, tuple[tuple[SpeedSample, ...], Sums]] = {}

    def points(self, job_id: int, history: tuple[SpeedSample, ...]):
        """`merged_points(history)` of job `job_id`."""
        seen, acc = self._seen.get(job_id, ((), {}))
        n = len(seen)
        if len(history) < n or history[:n] != seen:
            n, acc = 0, {}
        _accumulate(acc, history[n:])
        self._seen[job_id] = (history, acc)
        return _points(acc)

    def configurations(self) -> dict[int, int]:
        """Per job merged so far, how many distinct (workers, PSs) it was observed at (its
        own fit needs `Optimus.min_points` of them)."""
        return {job_id: len(acc) for job_id, (_, acc) in self._seen.items()}


def _speed_fn(theta: tuple[float, ...], scale: float = 1.0) -> SpeedFn:
    a, b, c, d, e = theta

    def speed(w: int, p: int) -> float:
        if w <= 0 or p <= 0:
            return 0.0
        return scale / (a / w + b + c * w / p + d * w + e * p)

    return speed


PROFILE = ((1, 1), (2, 1), (2, 2), (4, 2), (4, 4), (8, 4), (8, 8))
"""(workers, PSs) of Optimus' pre-run profile (a few steps at a handful of configurations
before the job's run); its speeds are the catalogue prior's, scaled to the job's level."""
PROFILE_WEIGHT_S = 60.0
"""Weight of one profile point, in seconds of observation (a pre-run of a few steps)."""


def fitted_speed(
    job: JobView,
    jt: JobType,
    min_points: int = 5,
    points: list[tuple[int, int, float, float]] | None = None,
) -> SpeedFn:
    """The job's speed model: NNLS on its observations (`points`: `merged_points` of its
    history, computed when None), else the scaled catalogue prior."""
    points = merged_points(job.history) if points is None else points
    if len(points) >= min_points:
        theta = fit_speed_model(points)
        if theta is not None:
            return _speed_fn(theta)
    prior = _speed_fn(jt.coefficients)
    if not points:
        return prior
    # Scale the prior to the job's observed level (time-weighted over its observations).
    ratio = sum(wt * s / prior(w, p) for w, p, s, wt in points) / sum(pt[3] for pt in points)
    # Optimus fits on its pre-run profile points together with the online ones: the profile
    # (the scaled prior at PROFILE configurations the job was not observed at, each worth
    # `PROFILE_WEIGHT_S` seconds of observation) fills the configurations a job never ran
    # at, so a job kept at one or two configurations still gets a fit that bends toward
    # what it showed. Without it a job settled at one configuration never refits.
    seen = {(w, p) for w, p, _, _ in points}
    profile = [
        (w, p, ratio * prior(w, p), PROFILE_WEIGHT_S) for w, p in PROFILE if (w, p) not in seen
    ]
    theta = fit_speed_model(points + profile)
    if theta is not None:
        return _speed_fn(theta)
    return _speed_fn(jt.coefficients, ratio)


@dataclass(frozen=True)
class Optimus:
    """Greedy marginal-gain allocation on online-fitted speed models (see module doc)."""

    name: str = "optimus"
    interval_s: float | None = 600.0
    uses_oracle: bool = False
    trigger: str | None = None
    """"events": decide at every arrival and completion instead of every `interval_s`
    (registered as "optimus-events"; None: the simulator's trigger)."""
    min_points: int = 5
    """Distinct observed (workers, PSs) configurations before the job's own fit is used."""
    merged: MergedHistories = field(
        default_factory=MergedHistories, init=False, repr=False, compare=False
    )
    """Each job's merged observations so far (a memo: decisions are those of merging the
    whole history every time)."""

    def speed_model(self, snap: Snapshot, job: JobView) -> SpeedFn:
        """The job's estimated speed(w, p)."""
        points = self.merged.points(job.job_id, job.history)
        return fitted_speed(job, snap.job_types[job.model], self.min_points, points)

    def allocate(self, snap: Snapshot) -> Allocation:
        """One pair per job, then the best task per dominant share while it helps."""
        return self.allocate_in_order(snap)[0]

    def allocate_in_order(self, snap: Snapshot) -> tuple[Allocation, list[tuple[int, int, int]]]:
        """`allocate`'s allocation and the additions that built it, in Optimus' order:
        (row of the job in `AllocationBuilder(snap).jobs`, workers added, PSs added), first
        the pairs by arrival, then one task at a time by marginal gain. DL2's recorder
        replays this order (`models/dl2/recorder.py`, order "teacher")."""
        builder = AllocationBuilder(snap)
        jobs = builder.jobs
        speed = [self.speed_model(snap, j) for j in jobs]
        work = [remaining_epochs(j) * snap.job_types[j.model].iters_per_epoch for j in jobs]
        steps: list[tuple[int, int, int]] = []
        for i in range(len(jobs)):
            if builder.add(i, 1, 1):
                steps.append((i, 1, 1))

        def gains(i: int) -> list[tuple[float, int]]:
            """(gain per dominant share, kind) for one more worker (0) / PS (1) of job i."""
            w, p = builder.workers[i], builder.ps[i]
            now = speed[i](w, p)
            if now <= 0:
                return []
            t_now = work[i] / now
            out = []
            for kind, (dw, dp), share in (
                (0, (1, 0), builder.worker_share(i)),
                (1, (0, 1), builder.ps_share(i)),
            ):
                nxt = speed[i](w + dw, p + dp)
                if nxt > now and share > 0:
                    out.append(((t_now - work[i] / nxt) / share, kind))
            return out

        version = [0] * len(jobs)
        heap: list[tuple[float, int, int, int]] = []  # (-gain, job, kind, version)
        for i in range(len(jobs)):
            for g, kind in gains(i):
                heapq.heappush(heap, (-g, i, kind, 0))
        blocked: set[tuple[int, int]] = set()
        while heap:
            _, i, kind, ver = heapq.heappop(heap)
            if ver != version[i] or (i, kind) in blocked:
                continue
            if not builder.add(i, 1 - kind, kind):
                blocked.add((i, kind))  # the cluster (or the cap) has no room for it
                continue
            steps.append((i, 1 - kind, kind))
            version[i] += 1
            for g, k in gains(i):
                if (i, k) not in blocked:
                    heapq.heappush(heap, (-g, i, k, version[i]))
        return builder.allocation(), steps


@dataclass(frozen=True)
class OptimusOracle(Optimus):
    """Optimus with the true isolated speed model of every job (an oracle, labelled so)."""

    name: str = "optimus-oracle"
    uses_oracle: bool = True

    def speed_model(self, snap: Snapshot, job: JobView) -> SpeedFn:
        """The job's true isolated speed(w, p), from the simulator's oracle."""
        if snap.oracle is None:
            raise ValueError("optimus-oracle needs the simulator's speed oracle")
        oracle, job_id = snap.oracle, job.job_id
        return lambda w, p: oracle.speed(job_id, w, p) if w > 0 and p > 0 else 0.0
