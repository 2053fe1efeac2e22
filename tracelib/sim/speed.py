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

from collections import Counter
from collections.abc import Sequence
from functools import cache

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
        self, types: np.ndarray, placements: Sequence[JobPlacement], n_servers: int
    ) -> np.ndarray:
        """I_j >= 0 per job: its slowest server's iteration-time stretch over alone, minus 1."""
        n = len(placements)
        out = np.zeros(n)
        n_w = np.array([len(pl.workers) for pl in placements], dtype=np.int64)
        n_p = np.array([len(pl.ps) for pl in placements], dtype=np.int64)
        if not (n_w.sum() + n_p.sum()):
            return out
        # One key per (job, server) holding its tasks; counts of workers and PSs per key.
        srv_w = np.fromiter((s for pl in placements for s in pl.workers), np.int64, n_w.sum())
        srv_p = np.fromiter((s for pl in placements for s in pl.ps), np.int64, n_p.sum())
        keys_w = np.repeat(np.arange(n), n_w) * n_servers + srv_w
        keys_p = np.repeat(np.arange(n), n_p) * n_servers + srv_p
        keys, inv = np.unique(np.concatenate([keys_w, keys_p]), return_inverse=True)
        rows_w = np.bincount(inv[: len(keys_w)], minlength=len(keys))
        rows_p = np.bincount(inv[len(keys_w) :], minlength=len(keys))
        job, server = keys // n_servers, keys % n_servers
        model = np.asarray(types, dtype=int)[job]
        own = (
            rows_w[:, None] * self.worker_use[model] + rows_p[:, None] * self.ps_use[model]
        )  # (rows, C): this job's load on the row's server
        load = np.zeros((n_servers, own.shape[1]))
        np.add.at(load, server, own)
        share = self.share[model]  # (rows, C)
        together = 1.0 + (share * (stretch(load[server], self.sharpness) - 1.0)).sum(axis=1)
        alone = 1.0 + (share * (stretch(own, self.sharpness) - 1.0)).sum(axis=1)
        np.maximum.at(out, job, together / alone - 1.0)
        return out


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

    def locality(self, placements: Sequence[JobPlacement]) -> np.ndarray:
        """l_j in [0, 1] per job (0 for jobs without both workers and PSs)."""
        out = np.zeros(len(placements))
        for i, pl in enumerate(placements):
            if not pl.workers or not pl.ps:
                continue
            w_on, p_on = Counter(pl.workers), Counter(pl.ps)
            worker_side = min(p_on.get(s, 0) for s in w_on) / len(pl.ps)
            ps_side = min(w_on.get(s, 0) for s in p_on) / len(pl.workers)
            out[i] = min(worker_side, ps_side)
        return out

    def interference_load(
        self, types: Sequence[int], placements: Sequence[JobPlacement], n_servers: int
    ) -> np.ndarray:
        """I_j: contention slowdown on each job's slowest server (0 for a job alone)."""
        if self.interference_scale == 0:
            return np.zeros(len(placements))
        t = np.asarray(types, dtype=int)
        return self.contention.slowdown(t, placements, n_servers) * self.interference_scale

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
        local = 1.0 / (1.0 - self.beta[t] * self.locality(placements))
        interf = 1.0 / (1.0 + self.interference_load(t, placements, n_servers))
        return base * local * interf
