"""Training speed of placed jobs: measured speed x locality x contention.

    speed_j = base(m, w, p) * 1 / (1 - beta_m * l_j) * 1 / (1 + I_j)

base: the isolated speed (mini-batches/s) with the job's workers and PSs on different
servers. By default (`SpeedConfig.truth="measured"`) the DL2 authors' measured surface,
interpolated (`tracelib.sim.measured`); its (1, 1) point was measured with worker and PS on
one server, so that entry is divided by the locality speed-up below. With
truth="analytical", the catalogue's Optimus-form fit (`JobType.speed`): the model Optimus
starts from and OfflineRL trains in, never the truth of an evaluation. A catalogue model
without measurements (another catalogue) uses its analytical speed.
l_j: the job's locality, the smallest fraction of its PSs that any of its workers finds on
its own server (and of its workers any PS finds), 1 when the whole job shares one server;
beta_m: the model's locality gain (catalogue.locality_gain).
I_j: contention (`ContentionModel`): the job's iteration time on its slowest server with
every co-located task against with its own tasks only, minus 1.
Per-job and per-interval variation multiply on top in the engine. Coefficients come from
`tracelib.catalogue`; `SpeedConfig` only switches and scales them.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from itertools import chain
from typing import NamedTuple

import numpy as np

from tracelib.catalogue import (
    CHANNEL_LOAD,
    CONTENTION_SHARPNESS,
    CPU_LOAD,
    DL2_CATALOGUE,
    DL2_SIM_FACTS,
    SENSITIVITY,
    JobType,
    SimFacts,
    locality_gain,
    sim_facts_by_name,
)
from tracelib.sim.config import SpeedConfig
from tracelib.sim.measured import load_measured_speeds
from tracelib.sim.snapshot import JobPlacement

CHANNELS = ("cpu", "pcie", "net", "disk")
"""Shared server channels of the contention model, in `SimFacts.task_usage` order."""


def stretch(load: np.ndarray, sharpness: float = CONTENTION_SHARPNESS) -> np.ndarray:
    """h(U) = (1 + U^n)^(1/n): a channel's time stretch at total load U (smooth max(1, U))."""
    return (1.0 + np.power(load, sharpness)) ** (1.0 / sharpness)


class ContentionModel:
    """Slowdown of co-located jobs from shared channels (catalogue docstring, "Interference").

    Per model (by type_index): a worker's and a PS's use of each channel, (L, C) each, and
    the share of an iteration spent on each channel, (L, C)."""

    def __init__(
        self,
        facts: Sequence[SimFacts],
        load: float = CHANNEL_LOAD,
        sensitivity: float = SENSITIVITY,
        sharpness: float = CONTENTION_SHARPNESS,
        cpu_load: float = CPU_LOAD,
    ) -> None:
        usage = np.array([f.task_usage() for f in facts])  # (L, 2, C)
        scale = np.array([cpu_load] + [load] * (len(CHANNELS) - 1))  # (C,)
        self.worker_use = usage[:, 0, :] * scale  # (L, C)
        self.ps_use = usage[:, 1, :] * scale  # (L, C)
        profiles = np.array([f.profile for f in facts])  # (L, C)
        sens = np.array([f.intf_sensitivity for f in facts])  # (L,)
        self.share = sensitivity * sens[:, None] * profiles  # (L, C)
        self.sharpness = sharpness

    def slowdown(
        self,
        types: np.ndarray,
        placements: Sequence[JobPlacement],
        n_servers: int,
        rows: TaskRows | None = None,
    ) -> np.ndarray:
        """I_j >= 0 per job: its slowest server's iteration-time stretch over alone, minus 1.
        `rows`: `task_rows(placements, n_servers)`, when the caller has it already."""
        n = len(placements)
        out = np.zeros(n)
        rows = rows if rows is not None else task_rows(placements, n_servers)
        if not len(rows.job):
            return out
        job, server = rows.job, rows.server
        model = np.asarray(types, dtype=int)[job]
        own = (
            rows.workers[:, None] * self.worker_use[model] + rows.ps[:, None] * self.ps_use[model]
        )  # (rows, C): this job's load on the row's server
        load = np.zeros((n_servers, own.shape[1]))
        np.add.at(load, server, own)
        share = self.share[model]  # (rows, C)
        together = 1.0 + (share * (stretch(load[server], self.sharpness) - 1.0)).sum(axis=1)
        alone = 1.0 + (share * (stretch(own, self.sharpness) - 1.0)).sum(axis=1)
        np.maximum.at(out, job, together / alone - 1.0)
        return out


class TaskRows(NamedTuple):
    """Where placed jobs' tasks are: one row per (job, server) holding some of the job's
    tasks, by job then server (what locality and contention both read)."""

    job: np.ndarray
    """(R,) index of the job in the placements."""
    server: np.ndarray
    """(R,)"""
    workers: np.ndarray
    """(R,) the job's workers on that server."""
    ps: np.ndarray
    """(R,) the job's PSs on that server."""
    n_workers: np.ndarray
    """(J,) workers per job."""
    n_ps: np.ndarray
    """(J,) PSs per job."""


def task_rows(placements: Sequence[JobPlacement], n_servers: int = 0) -> TaskRows:
    """The `TaskRows` of some jobs' placements (`n_servers`: a hint; any count works)."""
    n = len(placements)
    n_w = np.array([len(pl.workers) for pl in placements], dtype=np.int64)
    n_p = np.array([len(pl.ps) for pl in placements], dtype=np.int64)
    srv_w = np.fromiter(chain.from_iterable(pl.workers for pl in placements), np.int64, n_w.sum())
    srv_p = np.fromiter(chain.from_iterable(pl.ps for pl in placements), np.int64, n_p.sum())
    # One key per (job, server) holding its tasks; counts of workers and PSs per key.
    span = max(n_servers, int(srv_w.max(initial=-1)) + 1, int(srv_p.max(initial=-1)) + 1, 1)
    keys_w = np.repeat(np.arange(n), n_w) * span + srv_w
    keys_p = np.repeat(np.arange(n), n_p) * span + srv_p
    keys, inv = np.unique(np.concatenate([keys_w, keys_p]), return_inverse=True)
    rows_w = np.bincount(inv[: len(keys_w)], minlength=len(keys))
    rows_p = np.bincount(inv[len(keys_w) :], minlength=len(keys))
    return TaskRows(keys // span, keys % span, rows_w, rows_p, n_w, n_p)


@cache
def _measured_tables(
    catalogue: tuple[JobType, ...], path: str | None
) -> tuple[np.ndarray, np.ndarray]:
    """(L, cap + 1, cap + 1) measured speed tables and an (L,) mask of measured models."""
    measured = load_measured_speeds(path)
    cap = max(jt.max_workers for jt in catalogue)
    tables = np.zeros((len(catalogue), cap + 1, cap + 1))
    has = np.zeros(len(catalogue), dtype=bool)
    for jt in catalogue:
        if jt.model in measured.points:
            tables[jt.type_index] = measured.table(jt.model, cap)
            has[jt.type_index] = True
    tables.setflags(write=False)
    has.setflags(write=False)
    return tables, has


class SpeedModel:
    """Vectorized speed model over job types (indexed by `JobType.type_index`)."""

    def __init__(
        self,
        cfg: SpeedConfig | None = None,
        catalogue: tuple[JobType, ...] = DL2_CATALOGUE,
        facts: tuple[SimFacts, ...] = DL2_SIM_FACTS,
        contention: ContentionModel | None = None,
    ) -> None:
        """`contention` replaces the catalogue's (calibration tries other coefficients)."""
        self.cfg = cfg or SpeedConfig()
        ordered = sorted(catalogue, key=lambda jt: jt.type_index)
        if [jt.type_index for jt in ordered] != list(range(len(ordered))):
            raise ValueError("catalogue type_index values must be 0..L-1")
        named = sim_facts_by_name(facts)
        self.types = tuple(ordered)
        self.coef = np.array([jt.coefficients for jt in ordered])  # (L, 5)
        self.iters = np.array([float(jt.iters_per_epoch) for jt in ordered])  # (L,)
        self.beta = np.array([locality_gain(jt, named[jt.model]) for jt in ordered])  # (L,)
        self.contention = contention or ContentionModel([named[jt.model] for jt in ordered])
        self.table: np.ndarray | None = None
        """(L, cap + 1, cap + 1) isolated speeds when truth is measured."""
        if self.cfg.truth == "measured":
            tables, has = _measured_tables(tuple(ordered), self.cfg.measurements)
            tables = tables.copy()
            cap = tables.shape[1] - 1
            w, p = np.meshgrid(np.arange(cap + 1), np.arange(cap + 1), indexing="ij")
            for jt in ordered:
                t = jt.type_index
                if has[t]:
                    # Measured with worker and PS on one server: the spread speed is less.
                    tables[t, 1, 1] *= 1.0 - self.beta[t]
                else:
                    tables[t] = self._analytical(np.full(w.shape, t), w, p)
            tables.setflags(write=False)
            self.table = tables
        if not self.cfg.locality:
            self.beta = np.zeros_like(self.beta)
        self.interference_scale = self.cfg.interference_scale

    def _analytical(self, t: np.ndarray, w: np.ndarray, p: np.ndarray) -> np.ndarray:
        ok = (w > 0) & (p > 0)
        ws = np.where(ok, w, 1.0)
        pw = np.where(ok, p, 1.0)
        a, b, c, d, e = np.moveaxis(self.coef[t], -1, 0)
        speed = 1.0 / (a / ws + b + c * ws / pw + d * ws + e * pw)
        return np.where(ok, speed, 0.0)

    def base(self, types, workers, ps) -> np.ndarray:
        """Isolated speed (mini-batches/s, spread placement) for arrays of types, workers
        and PSs; 0 when a job lacks workers or PSs."""
        t = np.asarray(types, dtype=int)
        if self.table is None:
            return self._analytical(
                t, np.asarray(workers, dtype=float), np.asarray(ps, dtype=float)
            )
        cap = self.table.shape[1] - 1
        w = np.clip(np.asarray(workers, dtype=int), 0, cap)
        p = np.clip(np.asarray(ps, dtype=int), 0, cap)
        return self.table[t, w, p]

    def locality(
        self, placements: Sequence[JobPlacement], rows: TaskRows | None = None
    ) -> np.ndarray:
        """l_j in [0, 1] per job (0 for jobs without both workers and PSs). `rows`:
        `task_rows(placements)`, when the caller has it already."""
        out = np.zeros(len(placements))
        if rows is None:
            rows = task_rows(placements)
        if not len(rows.job):
            return out
        # Per job: the fewest PSs beside any of its workers' servers, and the fewest workers
        # beside any of its PSs' servers (rows are grouped by job).
        none = np.iinfo(np.int64).max
        starts = np.flatnonzero(np.concatenate(([True], rows.job[1:] != rows.job[:-1])))
        jobs = rows.job[starts]
        ps_by_workers = np.minimum.reduceat(np.where(rows.workers > 0, rows.ps, none), starts)
        workers_by_ps = np.minimum.reduceat(np.where(rows.ps > 0, rows.workers, none), starts)
        n_w, n_p = rows.n_workers[jobs], rows.n_ps[jobs]
        both = (n_w > 0) & (n_p > 0)
        out[jobs[both]] = np.minimum(
            ps_by_workers[both] / n_p[both], workers_by_ps[both] / n_w[both]
        )
        return out

    def interference_load(
        self,
        types: Sequence[int],
        placements: Sequence[JobPlacement],
        n_servers: int,
        rows: TaskRows | None = None,
    ) -> np.ndarray:
        """I_j: contention slowdown on each job's slowest server (0 for a job alone)."""
        if self.interference_scale == 0:
            return np.zeros(len(placements))
        t = np.asarray(types, dtype=int)
        return self.contention.slowdown(t, placements, n_servers, rows) * self.interference_scale

    def placed(
        self,
        types: Sequence[int],
        workers: Sequence[int],
        ps: Sequence[int],
        placements: Sequence[JobPlacement],
        n_servers: int,
    ) -> np.ndarray:
        """Speed of each job given every job's placement (noise not included)."""
        t = np.asarray(types, dtype=int)
        base = self.base(t, workers, ps)
        rows = task_rows(placements, n_servers)  # shared by locality and contention
        local = 1.0 / (1.0 - self.beta[t] * self.locality(placements, rows))
        interf = 1.0 / (1.0 + self.interference_load(t, placements, n_servers, rows))
        return base * local * interf
