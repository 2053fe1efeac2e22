"""LIF-Line and LIF-Quad (Least Interference First): Harmony's interference-model baselines.

Harmony section VI.B: LIF "builds a linear or non-linear interference model by assuming
that task slowdown is a function of CPU and bandwidth usage. To determine coefficients in
the interference model, we profile the performance of each ML model under different CPU and
bandwidth usages and use a least-square solver [...] linear function and quadratic function
fit our measured traces best [...] When placing a worker/PS, the algorithm calculates an
interference score (i.e., performance slowdown of all workers/PSs on a server) for each
server and selects the server with the least interference" (after TRACON [31] and Bu et
al. [11]). Here:

- Usage: what profiling each model alone measures on the channels LIF watches, by default
  CPU and network (`LIF_CHANNELS`), read from the catalogue's per-model usage profile
  (`SimFacts.intf_cpu`, `intf_net`). A task on a server sees the load u (one value per
  channel): the summed usage of the *other* jobs' tasks there. LIF does not see the PCIe and
  disk channels, the models' sensitivities or the simulator's 1 / (1 + I) form, so it is a
  model of the interference, not the interference itself (Harmony Fig. 9(b): LIF is good
  for CPU-bound CTC, poor where other channels matter).
- Slowdown of a task of model m under load u: LIF-Line a_m . u; LIF-Quad adds every product
  u_c u_c' (c <= c'). No intercept: a task alone does not slow down. One coefficient vector
  per model, fitted by least squares on interference samples (`tracelib.interference`), the
  target being the sample's slowdown 1 - measured / isolated speed.
- A synchronous job is as slow as its slowest server, so a sample's load is the load of the
  job's server with the highest predicted slowdown: the fit alternates between picking that
  server (at first: the highest total load) and refitting, until the picks settle.
  Models absent from the samples get the coefficients fitted on all samples pooled.
- `LifModel.fit_error`: mean relative error of the predicted speed (isolated speed times
  1 - predicted slowdown) against the measured speed, Harmony Fig. 9(a)'s measure.
- Placement (`LIFPlacement`): tasks a job keeps stay where they are (as every placement
  policy in `tracelib.sim.placement`); new tasks are placed one at a time, job by job in
  arrival order (a job's workers and PSs alternating), each on the fitting server where the
  predicted interference rises least: the sum over jobs of their predicted slowdown (a job's
  worst server), i.e. the new task's own job and the jobs it joins. Harmony's score sums
  the slowdown of the tasks on the one server; counting each job once at its worst server
  keeps a job from being split across busy servers. Ties go to a server already holding
  the job's tasks (locality), then the lowest index. If some task fits nowhere, the new
  tasks are placed again GPU tasks first (as `tracelib.sim.placement` orders them), and if
  that fails too, everything from an empty cluster (tasks that still do not fit are left
  out, the job runs with fewer). Fixed jobs (Harmony's running jobs) count as co-located
  load but are never moved.

Registry factories `lif_line` / `lif_quad` fit on a small default sample set
(`DEFAULT_FIT_SAMPLES`, collected once per process and cached).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cache
from typing import Literal

import numpy as np
import polars as pl

from tracelib.catalogue import DL2_CATALOGUE, DL2_SIM_FACTS, sim_facts_by_name
from tracelib.interference import InterferenceConfig, collect_samples, placement_counts
from tracelib.sim.cluster import Vec, is_share
from tracelib.sim.placement import Task, _gpu_first, _shrink
from tracelib.sim.snapshot import Allocation, JobPlacement, JobView, Placement, Snapshot

Kind = Literal["line", "quad"]
KINDS: tuple[str, ...] = ("line", "quad")
LIF_CHANNELS: tuple[str, ...] = ("cpu", "net")
"""The resources LIF models interference on (Harmony: "CPU and bandwidth usage")."""
CHANNELS: tuple[str, ...] = ("cpu", "pcie", "net", "disk")
"""Every channel of the catalogue's usage profiles (`SimFacts.profile` order)."""
MAX_SLOWDOWN = 0.95
"""Predicted slowdowns are clipped to [0, MAX_SLOWDOWN]."""
DEFAULT_FIT_SAMPLES = InterferenceConfig(n_samples=2000, seed=0)
"""What the registry's `lif-line` / `lif-quad` fit on: a small Harmony-testbed sample set."""
_EPS = 1e-9


def usage_matrix(channels: tuple[str, ...] = LIF_CHANNELS) -> np.ndarray:
    """Per-model usage of each channel, (L, C) by catalogue type_index."""
    unknown = sorted(set(channels) - set(CHANNELS))
    if unknown or not channels:
        raise ValueError(f"channels must be a non-empty subset of {CHANNELS}, got {channels}")
    named = sim_facts_by_name(DL2_SIM_FACTS)
    ordered = sorted(DL2_CATALOGUE, key=lambda jt: jt.type_index)
    profiles = np.array([named[jt.model].profile for jt in ordered])  # (L, 4)
    return profiles[:, [CHANNELS.index(c) for c in channels]]


def features(load: np.ndarray, kind: str) -> np.ndarray:
    """Regressors of a load (..., C): itself (line), plus u_c * u_c' for c <= c' (quad)."""
    if kind == "line":
        return load
    if kind != "quad":
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    c = load.shape[-1]
    i, j = np.triu_indices(c)
    return np.concatenate([load, load[..., i] * load[..., j]], axis=-1)


def foreign_load(
    types: np.ndarray, tasks: np.ndarray, usage: np.ndarray, group: np.ndarray | None = None
) -> np.ndarray:
    """Load each job sees on each server from the other jobs' tasks, (jobs, servers, C).

    `tasks` (jobs, servers): each job's task count per server; `group` (jobs,): which cluster
    (sample set) a job belongs to (all one cluster if None)."""
    g = np.zeros(len(types), dtype=np.int64) if group is None else np.asarray(group)
    own = tasks[:, :, None] * usage[np.asarray(types)][:, None, :]  # (jobs, servers, C)
    total = np.zeros((int(g.max(initial=-1)) + 1, *own.shape[1:]))
    np.add.at(total, g, own)
    return total[g] - own


@dataclass(frozen=True, eq=False)
class LifModel:
    """A fitted LIF interference model (arrays read-only)."""

    kind: str
    """"line" or "quad"."""
    channels: tuple[str, ...]
    usage: np.ndarray
    """(L, C) per-model usage of each channel, by type_index."""
    coef: np.ndarray
    """(L, P) per-model coefficients on `features(load, kind)`, by type_index."""
    fit_error: float
    """Mean relative error of predicted speed on the samples it was fitted on."""
    n_samples: int
    fitted_models: tuple[str, ...] = field(default=())
    """Models with samples of their own (others use the pooled fit)."""

    def task_slowdown(self, types: np.ndarray, load: np.ndarray) -> np.ndarray:
        """Predicted slowdown of tasks of `types` (...) under `load` (..., C), clipped."""
        pred = (features(load, self.kind) * self.coef[np.asarray(types)]).sum(axis=-1)
        return np.clip(pred, 0.0, MAX_SLOWDOWN)

    def job_slowdown(
        self, types: np.ndarray, tasks: np.ndarray, group: np.ndarray | None = None
    ) -> np.ndarray:
        """Predicted slowdown of each job (its worst server), (jobs,); args as
        `foreign_load`."""
        load = foreign_load(types, tasks, self.usage, group)
        per_server = self.task_slowdown(np.asarray(types)[:, None], load)
        return np.where(tasks > 0, per_server, 0.0).max(axis=1, initial=0.0)


def _frame_arrays(frame: pl.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(types, tasks per server, sample-set group) of interference sample rows."""
    w, p = placement_counts(frame)
    group = (
        frame.select(pl.struct("source", "seed", "sample_set").rank("dense").alias("g"))["g"]
        .to_numpy()
        .astype(np.int64)
        - 1
    )
    return frame["type_index"].to_numpy().astype(np.int64), w + p, group


def _lstsq(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.linalg.lstsq(x, y, rcond=None)[0]


def measured_usage(frame: pl.DataFrame, n_types: int) -> np.ndarray:
    """A one-channel usage profile, (n_types, 1) by type_index, for job types the catalogue
    has no profile of (Gavel's): the mean slowdown of the jobs that share a sample set with
    a job of the type, i.e. how hard it presses on what it shares (a GPU, for Gavel). A type
    that presses on nobody in `frame` gets the mean over the types that do."""
    group = pl.struct("source", "seed", "sample_set")
    rows = frame.select(group.rank("dense").alias("g"), "job_in_set", "type_index", "slowdown")
    pairs = rows.join(rows, on="g", suffix="_other").filter(
        pl.col("job_in_set") != pl.col("job_in_set_other")
    )
    pressed = pairs.group_by("type_index_other").agg(pl.col("slowdown").mean())
    usage = np.full((n_types, 1), np.nan)
    for t, value in pressed.iter_rows():
        usage[int(t), 0] = value
    fill = np.nanmean(usage) if np.isfinite(usage).any() else 0.0
    return np.where(np.isfinite(usage), usage, fill)


def fit_lif(
    frame: pl.DataFrame,
    kind: Kind = "line",
    channels: tuple[str, ...] = LIF_CHANNELS,
    max_rounds: int = 20,
    usage: np.ndarray | None = None,
) -> LifModel:
    """Fit LIF-Line (`kind="line"`) or LIF-Quad (`"quad"`) on interference samples (rows
    with the `interference_samples` columns). `usage` (L, C) replaces the catalogue's
    profile on `channels` for job types outside the catalogue (`measured_usage`)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if frame.height == 0:
        raise ValueError("no samples to fit on")
    if usage is None:
        usage = usage_matrix(channels)
        names = {jt.type_index: jt.model for jt in DL2_CATALOGUE}
    else:
        usage = np.array(usage, dtype=float)
        names = dict(frame.select("type_index", "model").unique().iter_rows())
    types, tasks, group = _frame_arrays(frame)
    slowdown = frame["slowdown"].to_numpy()
    x_all = features(foreign_load(types, tasks, usage, group), kind)  # (N, S, P)
    occupied = tasks > 0
    rows = np.arange(len(types))
    n_types = usage.shape[0]
    present = np.unique(types)

    # First pick: each job's server with the most foreign load.
    load_sum = foreign_load(types, tasks, usage, group).sum(axis=-1)
    pick = np.where(occupied, load_sum, -np.inf).argmax(axis=1)
    coef = np.zeros((n_types, x_all.shape[-1]))
    for _ in range(max_rounds):
        x = x_all[rows, pick]
        pooled = _lstsq(x, slowdown)
        coef[:] = pooled
        for m in present:
            sel = types == m
            coef[m] = _lstsq(x[sel], slowdown[sel])
        pred = (x_all * coef[types][:, None, :]).sum(axis=-1)
        new_pick = np.where(occupied, pred, -np.inf).argmax(axis=1)
        if np.array_equal(new_pick, pick):
            break
        pick = new_pick

    coef.flags.writeable = False
    usage.flags.writeable = False
    model = LifModel(
        kind=kind,
        channels=tuple(channels),
        usage=usage,
        coef=coef,
        fit_error=0.0,
        n_samples=len(types),
        fitted_models=tuple(names[int(m)] for m in present),
    )
    error = relative_error(model, frame)
    return replace(model, fit_error=float(error.mean()))


def relative_error(model: LifModel, frame: pl.DataFrame) -> np.ndarray:
    """|predicted - measured| / measured speed per sample row."""
    types, tasks, group = _frame_arrays(frame)
    pred = frame["isolated_speed"].to_numpy() * (1.0 - model.job_slowdown(types, tasks, group))
    measured = frame["measured_speed"].to_numpy()
    return np.abs(pred - measured) / measured


@dataclass(frozen=True, eq=False)
class LIFPlacement:
    """Least Interference First placement with a fitted LIF model (Harmony's baseline)."""

    model: LifModel

    @property
    def name(self) -> str:
        """ "lif-line" or "lif-quad"."""
        return f"lif-{self.model.kind}"

    def place(self, snap: Snapshot, alloc: Allocation, rng: np.random.Generator) -> Placement:
        """Kept tasks stay; each new task to the server where predicted interference rises
        least. Deterministic (`rng` is not used)."""
        jobs = [(j, *alloc.get(j.job_id)) for j in snap.jobs if alloc.get(j.job_id) != (0, 0)]
        views: list[JobView] = list(snap.fixed_jobs) + [j for j, _, _ in jobs]
        column = {v.job_id: i for i, v in enumerate(views)}
        types = np.array([v.type_index for v in views], dtype=np.int64)
        n_servers = snap.cluster.n_servers
        context = np.zeros((n_servers, len(views)))  # tasks of the fixed jobs
        for v in snap.fixed_jobs:
            np.add.at(context[:, column[v.job_id]], list(v.placement.workers + v.placement.ps), 1)

        out: dict[int, tuple[list[int], list[int]]] = {}
        missing: list[tuple[JobView, int, int]] = []
        counts = context.copy()
        used = np.zeros_like(snap.cluster.capacity)
        for job, w, p in jobs:
            kept_w = _shrink(job.placement.workers, min(w, len(job.placement.workers)))
            kept_p = _shrink(job.placement.ps, min(p, len(job.placement.ps)))
            out[job.job_id] = (kept_w, kept_p)
            missing.append((job, w - len(kept_w), p - len(kept_p)))
            for servers, demand in ((kept_w, job.worker_demand), (kept_p, job.ps_demand)):
                np.add.at(counts[:, column[job.job_id]], servers, 1)
                np.add.at(used, servers, np.asarray(demand))
        available = snap.cluster.available
        out_kept = out
        kept = (counts, out)
        attempts = [
            (available - used, kept, _job_by_job(missing)),
            (available - used, kept, _gpu_first(snap, missing)),
            (
                available,
                (context, {j.job_id: ([], []) for j, _, _ in jobs}),
                _gpu_first(snap, jobs),
            ),
        ]
        kept_shares: dict[int, list[float]] = {}
        for job, _, _ in jobs:
            if is_share(job.worker_demand[0]):
                for server in out_kept[job.job_id][0]:
                    kept_shares.setdefault(server, []).append(job.worker_demand[0])
        allowed = {job.job_id: job.gpu_types for job, _, _ in jobs}
        for free, (start_counts, start_out), tasks in attempts:
            counts = start_counts.copy()
            out = {jid: (list(w), list(p)) for jid, (w, p) in start_out.items()}
            pool = snap.cluster.pool(free, kept_shares if start_out is out_kept else None)
            if self._place_tasks(pool, counts, types, column, tasks, out, allowed):
                break
        return Placement.of({jid: JobPlacement.of(w, p) for jid, (w, p) in out.items()})

    def server_slowdowns(self, counts: np.ndarray, types: np.ndarray) -> np.ndarray:
        """Predicted slowdown of each job's tasks on each server, (servers, jobs); 0 where
        the job has no task. `counts` (servers, jobs) task counts, `types` (jobs,)."""
        usage = self.model.usage[types]  # (J, C)
        total = counts @ usage  # (S, C)
        foreign = total[:, None, :] - counts[:, :, None] * usage[None, :, :]  # (S, J, C)
        return np.where(counts > 0, self.model.task_slowdown(types[None, :], foreign), 0.0)

    def increase(self, counts: np.ndarray, types: np.ndarray, job: int) -> np.ndarray:
        """Rise of the summed predicted job slowdown (each job: its worst server) if one task
        of column `job` went to each server, (servers,)."""
        now = self.server_slowdowns(counts, types)  # (S, J)
        plus = counts.copy()
        plus[:, job] += 1
        # Row s of `plus` is server s with the task added there; rows are independent.
        added = self.server_slowdowns(plus, types)  # (S, J): row s after adding on s
        # Each job's worst server other than s: the best, or the runner-up where s is best.
        n_servers = now.shape[0]
        top = now.argmax(axis=0)  # (J,)
        best = now.max(axis=0)
        second = np.sort(now, axis=0)[-2] if n_servers > 1 else np.zeros_like(best)
        others = np.where(np.arange(n_servers)[:, None] == top[None, :], second, best)
        after = np.maximum(others, added).sum(axis=1)  # (S,)
        return after - best.sum()

    def _place_tasks(self, pool, counts, types, column, tasks, out, allowed) -> bool:
        ok = True
        for job_id, role, demand in tasks:
            j = column[job_id]
            if pool.plain and allowed[job_id] is None and not is_share(demand[0]):
                free = pool.free_array()
                fits = (free + _EPS >= np.asarray(demand)).all(axis=1)
            else:  # GPU types or shared GPUs: the pool knows which servers fit
                fits = pool.fitting_mask(_vec(demand), allowed[job_id])
            if not fits.any():
                ok = False
                continue
            delta = self.increase(counts, types, j)
            candidates = np.flatnonzero(fits)
            order = np.lexsort(
                (candidates, -counts[candidates, j], np.round(delta[candidates], 12))
            )
            server = int(candidates[order[0]])
            pool.take(server, _vec(demand), allowed[job_id])
            counts[server, j] += 1
            out[job_id][0 if role == "w" else 1].append(server)
        return ok


def _job_by_job(jobs: list[tuple[JobView, int, int]]) -> list[Task]:
    """Every task of one job before the next (by arrival), workers and PSs alternating: a
    job's PS is placed knowing where its workers went."""
    out: list[Task] = []
    for job, w, p in jobs:
        pair = [(job.job_id, "w", job.worker_demand), (job.job_id, "p", job.ps_demand)]
        out += pair * min(w, p) + pair[:1] * (w - p) + pair[1:] * (p - w)
    return out


def _vec(d) -> Vec:
    return (float(d[0]), float(d[1]), float(d[2]))


@cache
def default_samples() -> pl.DataFrame:
    """`DEFAULT_FIT_SAMPLES` collected once per process."""
    return collect_samples(DEFAULT_FIT_SAMPLES)


@cache
def default_model(kind: Kind) -> LifModel:
    """LIF fitted on `default_samples()`, once per process and kind."""
    return fit_lif(default_samples(), kind)


def lif_line() -> LIFPlacement:
    """LIF-Line fitted on the default sample set (registry factory "lif-line")."""
    return LIFPlacement(default_model("line"))


def lif_quad() -> LIFPlacement:
    """LIF-Quad fitted on the default sample set (registry factory "lif-quad")."""
    return LIFPlacement(default_model("quad"))
