"""Free resources per server, bucketed so "which server fits this task" is cheap.

Servers with the same capacity and the same free resources are interchangeable for every
placement rule we use (they differ only by index), so `FreePool` keeps one sorted list of
server indices per distinct (capacity, free) pair. Homogeneous clusters with a few task
shapes have a handful of buckets, whatever the number of servers, so choosing a server is
O(buckets) instead of O(servers). This is what makes a 500-server slot cheap.

Two things real traces need, neither of which changes a homogeneous whole-GPU cluster (its
buckets, and so every choice, stay exactly as they were):

- GPU types: a server may have a GPU type, and a task that uses a GPU may be restricted to
  servers of some types (`allowed`); tasks without GPUs go anywhere.
- GPU sharing: a task asking for less than one GPU (0.46) takes that share of one GPU, and
  several such tasks share a GPU while their shares add up to at most one. A server keeps
  which of its GPUs are partly used and by which shares (`_shared`: one tuple of shares per
  partly used GPU); its other free GPUs are whole. Which GPU a task uses is bookkeeping of
  the pool only (a placement names servers, not GPUs), so a pool rebuilt for a decision
  packs the shares already placed on each server again, largest first.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Mapping, Sequence

import numpy as np

Vec = tuple[float, float, float]
_EPS = 1e-9
Shared = tuple[tuple[float, ...], ...]
"""Per partly used GPU of a server, the shares of the tasks on it (canonically sorted)."""


def is_share(gpu: float) -> bool:
    """Whether a task's GPU demand is a share of one GPU (strictly between 0 and 1)."""
    return _EPS < gpu < 1.0 - _EPS


def _share_add(shared: Shared, share: float) -> Shared:
    """`shared` with one more task of `share` on the fullest GPU it fits (best fit), or on a
    whole GPU of its own."""
    best = -1
    for k, gpu in enumerate(shared):
        if sum(gpu) + share <= 1.0 + _EPS and (best < 0 or sum(gpu) > sum(shared[best])):
            best = k
    gpus = list(shared)
    if best < 0:
        gpus.append((share,))
    else:
        gpus[best] = tuple(sorted((*gpus[best], share)))
    return tuple(sorted(gpus, key=lambda g: (sum(g), g)))


def _share_remove(shared: Shared, share: float) -> Shared:
    """`shared` without one task of `share` (on the first GPU holding one)."""
    for k, gpu in enumerate(shared):
        for m, x in enumerate(gpu):
            if abs(x - share) <= _EPS:
                rest = gpu[:m] + gpu[m + 1 :]
                gpus = [*shared[:k], *([rest] if rest else []), *shared[k + 1 :]]
                return tuple(sorted(gpus, key=lambda g: (sum(g), g)))
    raise ValueError(f"no task of GPU share {share} to release")


def _gpu_fits(free_gpu: float, shared: Shared, gpu: float) -> bool:
    """Whether a task of `gpu` GPUs fits the GPUs of a server (whole GPUs for 1 or more,
    room on one GPU for a share)."""
    if gpu <= _EPS:
        return True
    if not shared:
        return free_gpu + _EPS >= (1.0 if gpu < 1.0 - _EPS else gpu)
    partly_free = sum(1.0 - sum(g) for g in shared)
    whole = free_gpu - partly_free
    if gpu < 1.0 - _EPS:
        return whole + _EPS >= 1.0 or any(sum(g) + gpu <= 1.0 + _EPS for g in shared)
    return whole + _EPS >= gpu


class FreePool:
    """Mutable free-resource tracker over servers (owned by one policy call, never shared).

    Free amounts are plain floats updated by subtraction and addition; with the catalogue's
    whole-unit demands they stay exact. Fractional demands may leave float residue, which
    only splits a bucket in two (and `fits` tolerates 1e-9). Every chooser takes `allowed`,
    the GPU types a GPU task may use (None: any server)."""

    def __init__(
        self,
        capacity: np.ndarray,
        free: np.ndarray | None = None,
        *,
        gpu_types: Sequence[str | None] | None = None,
        shares: Mapping[int, Sequence[float]] | None = None,
    ) -> None:
        """`gpu_types`: each server's GPU type (None: untyped); `shares`: per server, the GPU
        shares of tasks already on it, which `free` already excludes."""
        cap = np.asarray(capacity, dtype=float)
        fr = cap if free is None else np.asarray(free, dtype=float)
        if cap.shape != fr.shape or cap.ndim != 2 or cap.shape[1] != 3:
            raise ValueError("capacity and free must both be (n_servers, 3)")
        self.n_servers = cap.shape[0]
        self._cap: list[Vec] = [tuple(c) for c in cap.tolist()]
        self._free: list[Vec] = [tuple(f) for f in fr.tolist()]
        self._types: list[str | None] = (
            list(gpu_types) if gpu_types is not None else [None] * self.n_servers
        )
        if len(self._types) != self.n_servers:
            raise ValueError("gpu_types must name one type (or None) per server")
        self._shared: list[Shared] = [()] * self.n_servers
        for server, held in (shares or {}).items():
            packed: Shared = ()
            for share in sorted(held, reverse=True):  # first fit decreasing
                packed = _share_add(packed, share)
            self._shared[server] = packed
        # The plain case (no types, no shares) keeps the original, fastest loops.
        self._plain = all(t is None for t in self._types) and not any(self._shared)
        self._buckets: dict[tuple, list[int]] = {}
        for s in range(self.n_servers):
            self._buckets.setdefault(self._key(s), []).append(s)

    @property
    def plain(self) -> bool:
        """No GPU types and no shared GPU: every server is a plain vector of free amounts."""
        return self._plain

    def _key(self, server: int) -> tuple:
        return (self._cap[server], self._free[server], self._shared[server], self._types[server])

    # -- state -------------------------------------------------------------------------

    def free_of(self, server: int) -> Vec:
        """Free (GPU, CPU, memory) of one server."""
        return self._free[server]

    def free_array(self) -> np.ndarray:
        """Free resources of every server, (n_servers, 3)."""
        return np.array(self._free, dtype=float)

    def _ok(self, free: Vec, shared: Shared, gtype, demand: Vec, allowed) -> bool:
        if not (free[1] + _EPS >= demand[1] and free[2] + _EPS >= demand[2]):
            return False
        if demand[0] <= _EPS:
            return True
        if allowed is not None and gtype not in allowed:
            return False
        return _gpu_fits(free[0], shared, demand[0])

    def fits(self, server: int, demand: Vec, allowed: frozenset[str] | None = None) -> bool:
        """Whether `demand` fits on `server` now (`allowed`: GPU types a GPU task may use)."""
        f = self._free[server]
        if self._plain and allowed is None and not is_share(demand[0]):
            return (
                f[0] + _EPS >= demand[0] and f[1] + _EPS >= demand[1] and f[2] + _EPS >= demand[2]
            )
        return self._ok(f, self._shared[server], self._types[server], demand, allowed)

    def fitting_mask(self, demand: Vec, allowed: frozenset[str] | None = None) -> np.ndarray:
        """Servers where `demand` fits now, (n_servers,) bool."""
        return np.array([self.fits(s, demand, allowed) for s in range(self.n_servers)])

    def _move(self, server: int, new_free: Vec, new_shared: Shared | None = None) -> None:
        old = self._key(server)
        bucket = self._buckets[old]
        del bucket[bisect_left(bucket, server)]
        if not bucket:
            del self._buckets[old]
        self._free[server] = new_free
        if new_shared is not None:
            self._shared[server] = new_shared
            self._plain = self._plain and not new_shared
        insort(self._buckets.setdefault(self._key(server), []), server)

    def take_unchecked(self, server: int, demand: Vec) -> None:
        """`take` for a server a chooser just returned for this very demand."""
        f = self._free[server]
        shared = _share_add(self._shared[server], demand[0]) if is_share(demand[0]) else None
        self._move(server, (f[0] - demand[0], f[1] - demand[1], f[2] - demand[2]), shared)

    def take(self, server: int, demand: Vec, allowed: frozenset[str] | None = None) -> None:
        """Use `demand` on `server`; raises if it does not fit."""
        if not self.fits(server, demand, allowed):
            raise ValueError(f"demand {demand} does not fit server {server} ({self._free[server]})")
        self.take_unchecked(server, demand)

    def give(self, server: int, demand: Vec) -> None:
        """Release `demand` on `server`."""
        f = self._free[server]
        shared = _share_remove(self._shared[server], demand[0]) if is_share(demand[0]) else None
        self._move(server, (f[0] + demand[0], f[1] + demand[1], f[2] + demand[2]), shared)

    # -- choosing a server ---------------------------------------------------------------

    def _fitting(self, demand: Vec, allowed: frozenset[str] | None = None):
        if self._plain and allowed is None and not is_share(demand[0]):
            for (cap, free, _, _), servers in self._buckets.items():
                if (
                    free[0] + _EPS >= demand[0]
                    and free[1] + _EPS >= demand[1]
                    and free[2] + _EPS >= demand[2]
                ):
                    yield cap, free, servers
            return
        for (cap, free, shared, gtype), servers in self._buckets.items():
            if self._ok(free, shared, gtype, demand, allowed):
                yield cap, free, servers

    def any_fit(self, demand: Vec, allowed: frozenset[str] | None = None) -> bool:
        """Whether `demand` fits on some server."""
        return next(self._fitting(demand, allowed), None) is not None

    def first_fit(self, demand: Vec, allowed: frozenset[str] | None = None) -> int:
        """Lowest-index server where `demand` fits, -1 if none (bin packing)."""
        best = -1
        for _, _, servers in self._fitting(demand, allowed):
            if best < 0 or servers[0] < best:
                best = servers[0]
        return best

    def least_loaded(
        self,
        demand: Vec,
        rng: np.random.Generator | None = None,
        allowed: frozenset[str] | None = None,
    ) -> int:
        """A fitting server with the least load (used share summed over resources, as
        Harmony's load-balancing baseline); ties inside a bucket broken by `rng` (else the
        lowest index), ties between buckets by lowest index. -1 if none fits."""
        best_key: tuple[float, int] | None = None
        best_servers: list[int] = []
        for cap, free, servers in self._fitting(demand, allowed):
            load = sum((c - f) / c for c, f in zip(cap, free, strict=True) if c > 0)
            key = (round(load, 9), servers[0])
            if best_key is None or key < best_key:
                best_key, best_servers = key, servers
        if not best_servers:
            return -1
        if rng is None or len(best_servers) == 1:
            return best_servers[0]
        return best_servers[int(rng.integers(len(best_servers)))]

    def uniform(
        self, demand: Vec, rng: np.random.Generator, allowed: frozenset[str] | None = None
    ) -> int:
        """A fitting server drawn uniformly at random, -1 if none."""
        groups = [servers for _, _, servers in self._fitting(demand, allowed)]
        total = sum(len(g) for g in groups)
        if total == 0:
            return -1
        r = int(rng.integers(total))
        for g in sorted(groups, key=lambda g: g[0]):
            if r < len(g):
                return g[r]
            r -= len(g)
        raise AssertionError("unreachable")

    def feasible_fit(self, demand: Vec, allowed: frozenset[str] | None = None) -> int:
        """A server chosen to keep later tasks placeable (allocation feasibility checks):
        GPU tasks go where most GPUs are free, other tasks where fewest GPUs are free (so
        they do not strand GPUs), then most CPU free; lowest index last. -1 if none. (A GPU
        share goes where fewest GPUs are free instead, so it fills partly used GPUs.)"""
        g = demand[0]
        sign = -1.0 if g > _EPS else 1.0
        best_key = None
        best = -1
        if not (self._plain and allowed is None and (g <= _EPS or g >= 1.0 - _EPS)):
            if is_share(demand[0]):
                sign = 1.0
            for (_, free, shared, gtype), servers in self._buckets.items():
                if self._ok(free, shared, gtype, demand, allowed):
                    key = (sign * free[0], -free[1], -free[2], servers[0])
                    if best_key is None or key < best_key:
                        best_key, best = key, servers[0]
            return best
        # The hottest loop of an allocation step: written out, no generator.
        d0, d1, d2 = demand[0] - _EPS, demand[1] - _EPS, demand[2] - _EPS
        for (_, (f0, f1, f2), _, _), servers in self._buckets.items():
            if f0 >= d0 and f1 >= d1 and f2 >= d2:
                key = (sign * f0, -f1, -f2, servers[0])
                if best_key is None or key < best_key:
                    best_key, best = key, servers[0]
        return best

    def best_alignment(self, demand: Vec, allowed: frozenset[str] | None = None) -> float:
        """Tetris' packing score: the largest dot product, over servers where `demand` fits,
        of the demand and the server's free resources, both as shares of its capacity;
        -1 if it fits nowhere."""
        best = -1.0
        for cap, free, _ in self._fitting(demand, allowed):
            score = sum(d * f / (c * c) for d, f, c in zip(demand, free, cap, strict=True) if c > 0)
            best = max(best, score)
        return best
