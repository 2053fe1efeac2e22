"""Free resources per server, bucketed so "which server fits this task" is cheap.

Servers with the same capacity and the same free resources are interchangeable for every
placement rule we use (they differ only by index), so `FreePool` keeps one sorted list of
server indices per distinct (capacity, free) pair. Homogeneous clusters with a few task
shapes have a handful of buckets, whatever the number of servers, so choosing a server is
O(buckets) instead of O(servers). This is what makes a 500-server slot cheap.
"""

from __future__ import annotations

from bisect import bisect_left, insort

import numpy as np

Vec = tuple[float, float, float]
_EPS = 1e-9


class FreePool:
    """Mutable free-resource tracker over servers (owned by one policy call, never shared).

    Free amounts are plain floats updated by subtraction and addition; with the catalogue's
    whole-unit demands they stay exact. Fractional demands may leave float residue, which
    only splits a bucket in two (and `fits` tolerates 1e-9)."""

    def __init__(self, capacity: np.ndarray, free: np.ndarray | None = None) -> None:
        cap = np.asarray(capacity, dtype=float)
        fr = cap if free is None else np.asarray(free, dtype=float)
        if cap.shape != fr.shape or cap.ndim != 2 or cap.shape[1] != 3:
            raise ValueError("capacity and free must both be (n_servers, 3)")
        self.n_servers = cap.shape[0]
        self._cap: list[Vec] = [tuple(c) for c in cap.tolist()]
        self._free: list[Vec] = [tuple(f) for f in fr.tolist()]
        self._buckets: dict[tuple[Vec, Vec], list[int]] = {}
        for s, key in enumerate(zip(self._cap, self._free, strict=True)):
            self._buckets.setdefault(key, []).append(s)

    # -- state -------------------------------------------------------------------------

    def free_of(self, server: int) -> Vec:
        """Free (GPU, CPU, memory) of one server."""
        return self._free[server]

    def free_array(self) -> np.ndarray:
        """Free resources of every server, (n_servers, 3)."""
        return np.array(self._free, dtype=float)

    def fits(self, server: int, demand: Vec) -> bool:
        """Whether `demand` fits on `server` now."""
        f = self._free[server]
        return f[0] + _EPS >= demand[0] and f[1] + _EPS >= demand[1] and f[2] + _EPS >= demand[2]

    def _move(self, server: int, new_free: Vec) -> None:
        old = (self._cap[server], self._free[server])
        bucket = self._buckets[old]
        del bucket[bisect_left(bucket, server)]
        if not bucket:
            del self._buckets[old]
        self._free[server] = new_free
        insort(self._buckets.setdefault((self._cap[server], new_free), []), server)

    def take_unchecked(self, server: int, demand: Vec) -> None:
        """`take` for a server a chooser just returned for this very demand."""
        f = self._free[server]
        self._move(server, (f[0] - demand[0], f[1] - demand[1], f[2] - demand[2]))

    def take(self, server: int, demand: Vec) -> None:
        """Use `demand` on `server`; raises if it does not fit."""
        f = self._free[server]
        if not (f[0] + _EPS >= demand[0] and f[1] + _EPS >= demand[1] and f[2] + _EPS >= demand[2]):
            raise ValueError(f"demand {demand} does not fit server {server} ({f})")
        self._move(server, (f[0] - demand[0], f[1] - demand[1], f[2] - demand[2]))

    def give(self, server: int, demand: Vec) -> None:
        """Release `demand` on `server`."""
        f = self._free[server]
        self._move(server, (f[0] + demand[0], f[1] + demand[1], f[2] + demand[2]))

    # -- choosing a server ---------------------------------------------------------------

    def _fitting(self, demand: Vec):
        for (cap, free), servers in self._buckets.items():
            if (
                free[0] + _EPS >= demand[0]
                and free[1] + _EPS >= demand[1]
                and free[2] + _EPS >= demand[2]
            ):
                yield cap, free, servers

    def any_fit(self, demand: Vec) -> bool:
        """Whether `demand` fits on some server."""
        return next(self._fitting(demand), None) is not None

    def first_fit(self, demand: Vec) -> int:
        """Lowest-index server where `demand` fits, -1 if none (bin packing)."""
        best = -1
        for _, _, servers in self._fitting(demand):
            if best < 0 or servers[0] < best:
                best = servers[0]
        return best

    def least_loaded(self, demand: Vec, rng: np.random.Generator | None = None) -> int:
        """A fitting server with the least load (used share summed over resources, as
        Harmony's load-balancing baseline); ties inside a bucket broken by `rng` (else the
        lowest index), ties between buckets by lowest index. -1 if none fits."""
        best_key: tuple[float, int] | None = None
        best_servers: list[int] = []
        for cap, free, servers in self._fitting(demand):
            load = sum((c - f) / c for c, f in zip(cap, free, strict=True) if c > 0)
            key = (round(load, 9), servers[0])
            if best_key is None or key < best_key:
                best_key, best_servers = key, servers
        if not best_servers:
            return -1
        if rng is None or len(best_servers) == 1:
            return best_servers[0]
        return best_servers[int(rng.integers(len(best_servers)))]

    def uniform(self, demand: Vec, rng: np.random.Generator) -> int:
        """A fitting server drawn uniformly at random, -1 if none."""
        groups = [servers for _, _, servers in self._fitting(demand)]
        total = sum(len(g) for g in groups)
        if total == 0:
            return -1
        r = int(rng.integers(total))
        for g in sorted(groups, key=lambda g: g[0]):
            if r < len(g):
                return g[r]
            r -= len(g)
        raise AssertionError("unreachable")

    def feasible_fit(self, demand: Vec) -> int:
        """A server chosen to keep later tasks placeable (allocation feasibility checks):
        GPU tasks go where most GPUs are free, other tasks where fewest GPUs are free (so
        they do not strand GPUs), then most CPU free; lowest index last. -1 if none."""
        # The hottest loop of an allocation step: written out, no generator.
        d0, d1, d2 = demand[0] - _EPS, demand[1] - _EPS, demand[2] - _EPS
        sign = -1.0 if demand[0] > _EPS else 1.0
        best_key = None
        best = -1
        for (_, (f0, f1, f2)), servers in self._buckets.items():
            if f0 >= d0 and f1 >= d1 and f2 >= d2:
                key = (sign * f0, -f1, -f2, servers[0])
                if best_key is None or key < best_key:
                    best_key, best = key, servers[0]
        return best

    def best_alignment(self, demand: Vec) -> float:
        """Tetris' packing score: the largest dot product, over servers where `demand` fits,
        of the demand and the server's free resources, both as shares of its capacity;
        -1 if it fits nowhere."""
        best = -1.0
        for cap, free, _ in self._fitting(demand):
            score = sum(d * f / (c * c) for d, f, c in zip(demand, free, cap, strict=True) if c > 0)
            best = max(best, score)
        return best
