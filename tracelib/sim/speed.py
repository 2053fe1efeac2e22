"""Training speed of placed jobs: catalogue speed x locality x interference.

    speed_j = base(w, p) * 1 / (1 - beta_m * l_j) * 1 / (1 + I_j)

base: the catalogue's Optimus-form speed (workers and PSs on different servers);
l_j: the job's locality, the smallest fraction of its PSs that any of its workers finds on
its own server (and of its workers any PS finds), 1 when the whole job shares one server;
beta_m: the model's locality gain (catalogue.locality_gain);
I_j: interference on the job's worst server, sum over other jobs k there of
S[m_j, m_k] * tasks_k / INTERFERENCE_TASK_UNIT (catalogue.interference_matrix).
Per-job and per-interval noise multiply on top in the engine. All coefficients come from
`tracelib.catalogue`; `SpeedConfig` only switches and scales them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from tracelib.catalogue import (
    DL2_CATALOGUE,
    DL2_SIM_FACTS,
    INTERFERENCE_TASK_UNIT,
    JobType,
    SimFacts,
    interference_matrix,
    locality_gain,
    sim_facts_by_name,
)
from tracelib.sim.config import SpeedConfig
from tracelib.sim.snapshot import JobPlacement


class SpeedModel:
    """Vectorized speed model over job types (indexed by `JobType.type_index`)."""

    def __init__(
        self,
        cfg: SpeedConfig | None = None,
        catalogue: tuple[JobType, ...] = DL2_CATALOGUE,
        facts: tuple[SimFacts, ...] = DL2_SIM_FACTS,
    ) -> None:
        self.cfg = cfg or SpeedConfig()
        ordered = sorted(catalogue, key=lambda jt: jt.type_index)
        if [jt.type_index for jt in ordered] != list(range(len(ordered))):
            raise ValueError("catalogue type_index values must be 0..L-1")
        named = sim_facts_by_name(facts)
        self.types = tuple(ordered)
        self.coef = np.array([jt.coefficients for jt in ordered])  # (L, 5)
        self.iters = np.array([float(jt.iters_per_epoch) for jt in ordered])  # (L,)
        self.beta = np.array([locality_gain(jt, named[jt.model]) for jt in ordered])  # (L,)
        if not self.cfg.locality:
            self.beta = np.zeros_like(self.beta)
        self.interference = interference_matrix(catalogue, facts) * self.cfg.interference_scale

    def base(self, types, workers, ps) -> np.ndarray:
        """Catalogue speed (mini-batches/s) for arrays of types, workers and PSs; 0 when a
        job lacks workers or PSs."""
        t = np.asarray(types, dtype=int)
        w = np.asarray(workers, dtype=float)
        p = np.asarray(ps, dtype=float)
        ok = (w > 0) & (p > 0)
        ws = np.where(ok, w, 1.0)
        pw = np.where(ok, p, 1.0)
        a, b, c, d, e = self.coef[t].T
        speed = 1.0 / (a / ws + b + c * ws / pw + d * ws + e * pw)
        return np.where(ok, speed, 0.0)

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
        """I_j: interference on each job's worst server (0 for a job alone everywhere)."""
        rows_job, rows_server, rows_tasks = [], [], []
        for i, pl in enumerate(placements):
            for server, n in Counter(pl.workers + pl.ps).items():
                rows_job.append(i)
                rows_server.append(server)
                rows_tasks.append(n)
        out = np.zeros(len(placements))
        if not rows_job:
            return out
        job = np.array(rows_job)
        server = np.array(rows_server)
        tasks = np.array(rows_tasks, dtype=float)
        model = np.asarray(types, dtype=int)[job]
        per_server = np.zeros((n_servers, self.interference.shape[0]))  # tasks by model
        np.add.at(per_server, (server, model), tasks)
        s_rows = self.interference[model]  # (rows, L): this job's sensitivity to each model
        load = (per_server[server] * s_rows).sum(axis=1) - s_rows[
            np.arange(len(job)), model
        ] * tasks
        np.maximum.at(out, job, load / INTERFERENCE_TASK_UNIT)
        return out

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
