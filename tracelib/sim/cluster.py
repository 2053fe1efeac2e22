"""Free resources per server, bucketed so "which server fits this task" is cheap.

Servers with the same capacity and the same free resources are interchangeable for every
placement rule we use (they differ only by index), so `FreePool` keeps one sorted list of
server indices per distinct (capacity, free) pair. Homogeneous clusters with a few task
shapes have a handful of buckets, whatever the number of servers, so choosing a server is
O(buckets) instead of O(servers). This is what makes a 500-server slot cheap.

A bucket's state never changes (a server whose free resources change moves to another
bucket), so what a bucket derives from it is computed once: its load, its order for
`feasible_fit`, and where its servers go after taking or giving back a given demand. An
allocation step is then a scan of a few buckets and two list operations, with no tuple built
or hashed; and since a step's choice depends only on which buckets are non-empty (and, in a
tie, on which of the tied buckets holds the lowest server), the scan's answer is kept per
such set, which an allocation's steps keep returning to.
Building a pool groups the servers with numpy, not server by server.

Two things real traces need, neither of which changes a homogeneous whole-GPU cluster (its
buckets, and so every choice, stay exactly as they were):

- GPU types: a server may have a GPU type, and a task that uses a GPU may be restricted to
  servers of some types (`allowed`); tasks without GPUs go anywhere.
- GPU sharing: a task asking for less than one GPU (0.46) takes that share of one GPU, and
  several such tasks share a GPU while their shares add up to at most one. A server keeps
  which of its GPUs are partly used and by which shares (its bucket's `shared`: one tuple of
  shares per partly used GPU); its other free GPUs are whole. Which GPU a task uses is
  bookkeeping of the pool only (a placement names servers, not GPUs), so a pool rebuilt for
  a decision packs the shares already placed on each server again, largest first.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

Vec = tuple[float, float, float]
_UNKNOWN = object()
_MAX_SETS = 4096
"""Sets of active buckets a pool keeps `_feasible_bucket`'s (`least_loaded`'s) answers for."""
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


class _Bucket:
    """Servers that are interchangeable for every placement rule: the same capacity, free
    resources, partly used GPUs and GPU type. `servers` is sorted (empty once the last one
    left); the fields after it are derived once, since every server of the bucket shares them."""

    __slots__ = (
        "bit", "cap", "cpu_order", "free", "given", "gpu_order", "gtype", "key", "least_used",
        "load", "servers", "shared", "taken", "whole",
    )  # fmt: skip

    def __init__(self, key: tuple, bit: int) -> None:
        self.key = key
        self.bit = bit
        """This bucket's bit in its pool's `_sig` (1 << the order it was made in)."""
        self.cap, self.free, self.shared, self.gtype = key
        self.servers: list[int] = []
        # What a GPU fit needs, once per bucket: the whole free GPUs, and the GPU share of
        # the fullest partly used GPU (inf: none), which a share fits beside exactly when
        # some partly used GPU has room (float addition is monotonic).
        partly_free = sum(1.0 - sum(g) for g in self.shared) if self.shared else 0.0
        self.whole = self.free[0] - partly_free if self.shared else self.free[0]
        self.least_used = min(sum(g) for g in self.shared) if self.shared else float("inf")
        f0, f1, f2 = self.free
        # feasible_fit's orders: GPU tasks where most GPUs are free, other tasks where fewest
        # are (then most CPU, most memory); the lowest server index breaks ties.
        self.gpu_order = (-f0, -f1, -f2)
        self.cpu_order = (f0, -f1, -f2)
        self.load: float | None = None
        """least_loaded's rounded load, computed on first use."""
        # Where a server goes after taking / giving back a demand: the same for every server
        # of the bucket, so computed once per (bucket, demand) and then only looked up.
        self.taken: dict[Vec, _Bucket] = {}
        self.given: dict[Vec, _Bucket] = {}


class FreePool:
    """Mutable free-resource tracker over servers (owned by one policy call, never shared).

    Free amounts are plain floats updated by subtraction and addition; with the catalogue's
    whole-unit demands they stay exact. Fractional demands may leave float residue, which
    only splits a bucket in two (and `fits` tolerates 1e-9). Every chooser takes `allowed`,
    the GPU types a GPU task may use (None: any server).

    Layout: each server points at its `_Bucket`; `_active` holds the non-empty buckets (what
    every chooser scans), `_all` every bucket this pool has made, so a server moving into a
    state seen before reuses its bucket (and the bucket's cached transitions)."""

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
        n = self.n_servers = cap.shape[0]
        types: list[str | None] = list(gpu_types) if gpu_types is not None else [None] * n
        if len(types) != n:
            raise ValueError("gpu_types must name one type (or None) per server")
        shared: dict[int, Shared] = {}
        for server, held in (shares or {}).items():
            packed: Shared = ()
            for share in sorted(held, reverse=True):  # first fit decreasing
                packed = _share_add(packed, share)
            if packed:
                shared[server] = packed
        # The plain case (no types, no shares) keeps the fastest loops.
        self._plain = (gpu_types is None or all(t is None for t in types)) and not shared
        self._all: dict[tuple, _Bucket] = {}
        # Keyed by the bucket's bit, not its key: a step that empties or fills a bucket
        # deletes or inserts it here, and an int hashes at once where the key (nested
        # tuples of floats) is hashed afresh every time (a fifth of a step's cost).
        self._active: dict[int, _Bucket] = {}
        # Which buckets are active, as a bitmask (one bit per bucket of `_all`), and per such
        # set `_feasible_bucket`'s and `least_loaded`'s answers: fit, order and load depend
        # only on a bucket's immutable state, so an answer holds whenever the same set is
        # active again (allocation steps cycle through a few sets); a tie is kept as the
        # tied buckets, since which of them holds the lowest server changes.
        self._sig = 0
        self._feasible: dict[int, dict[Vec, _Bucket | tuple[_Bucket, ...] | None]] = {}
        self._least: dict[int, dict[Vec, _Bucket | tuple[_Bucket, ...] | None]] = {}
        groups = _group_rows(cap, fr) if self._plain else _group_typed(cap, fr, types, shared)
        self._of: list[_Bucket] = [None] * n  # type: ignore[list-item]  # filled below
        for key, servers in groups:
            bucket = self._all[key] = _Bucket(key, 1 << len(self._all))
            self._active[bucket.bit] = bucket
            self._sig |= bucket.bit
            bucket.servers = servers
            for s in servers:
                self._of[s] = bucket

    @property
    def plain(self) -> bool:
        """No GPU types and no shared GPU: every server is a plain vector of free amounts."""
        return self._plain

    @property
    def signature(self) -> int:
        """Which buckets are non-empty, as a bitmask: whether a demand fits somewhere
        (`any_fit`) depends only on it, so a caller may keep such answers per signature."""
        return self._sig

    # -- state -------------------------------------------------------------------------

    def free_of(self, server: int) -> Vec:
        """Free (GPU, CPU, memory) of one server."""
        return self._of[server].free

    def free_array(self) -> np.ndarray:
        """Free resources of every server, (n_servers, 3)."""
        out = np.empty((self.n_servers, 3), dtype=float)
        for bucket in self._active.values():
            out[bucket.servers] = bucket.free
        return out

    def _ok(self, bucket: _Bucket, demand: Vec, allowed) -> bool:
        free = bucket.free
        if not (free[1] + _EPS >= demand[1] and free[2] + _EPS >= demand[2]):
            return False
        gpu = demand[0]
        if gpu <= _EPS:
            return True
        if allowed is not None and bucket.gtype not in allowed:
            return False
        # Whole GPUs for one or more, room on one partly used GPU (or a whole one) for a share.
        if gpu < 1.0 - _EPS:
            return bucket.whole + _EPS >= 1.0 or bucket.least_used + gpu <= 1.0 + _EPS
        return bucket.whole + _EPS >= gpu

    def fits(self, server: int, demand: Vec, allowed: frozenset[str] | None = None) -> bool:
        """Whether `demand` fits on `server` now (`allowed`: GPU types a GPU task may use)."""
        bucket = self._of[server]
        if self._plain and allowed is None and not is_share(demand[0]):
            f = bucket.free
            return (
                f[0] + _EPS >= demand[0] and f[1] + _EPS >= demand[1] and f[2] + _EPS >= demand[2]
            )
        return self._ok(bucket, demand, allowed)

    def fitting_mask(self, demand: Vec, allowed: frozenset[str] | None = None) -> np.ndarray:
        """Servers where `demand` fits now, (n_servers,) bool."""
        out = np.zeros(self.n_servers, dtype=bool)
        for bucket in self._fitting(demand, allowed):
            out[bucket.servers] = True
        return out

    # -- moving servers between buckets ------------------------------------------------------

    def _bucket(self, bucket: _Bucket, free: Vec, shared: Shared) -> _Bucket:
        """The bucket of a server of `bucket` whose free resources became `free`."""
        key = (bucket.cap, free, shared, bucket.gtype)
        found = self._all.get(key)
        if found is None:
            found = self._all[key] = _Bucket(key, 1 << len(self._all))
        if shared:
            self._plain = False
        return found

    def _after_take(self, bucket: _Bucket, demand: Vec) -> _Bucket:
        f = bucket.free
        shared = _share_add(bucket.shared, demand[0]) if is_share(demand[0]) else bucket.shared
        nxt = self._bucket(bucket, (f[0] - demand[0], f[1] - demand[1], f[2] - demand[2]), shared)
        bucket.taken[demand] = nxt
        return nxt

    def _after_give(self, bucket: _Bucket, demand: Vec) -> _Bucket:
        f = bucket.free
        shared = _share_remove(bucket.shared, demand[0]) if is_share(demand[0]) else bucket.shared
        nxt = self._bucket(bucket, (f[0] + demand[0], f[1] + demand[1], f[2] + demand[2]), shared)
        bucket.given[demand] = nxt
        return nxt

    def _relocate(self, server: int, old: _Bucket, new: _Bucket) -> None:
        """Move `server` from bucket `old` to bucket `new` (both keep their servers sorted)."""
        servers = old.servers
        if len(servers) == 1:
            servers.clear()
            del self._active[old.bit]
            self._sig ^= old.bit
        else:
            del servers[bisect_left(servers, server)]
        servers = new.servers
        if servers:
            insort(servers, server)
        else:
            servers.append(server)
            self._active[new.bit] = new
            self._sig ^= new.bit
        self._of[server] = new

    def take_unchecked(self, server: int, demand: Vec) -> None:
        """`take` for a server a chooser just returned for this very demand."""
        old = self._of[server]
        new = old.taken.get(demand)
        if new is None:
            new = self._after_take(old, demand)
        self._relocate(server, old, new)

    def take(self, server: int, demand: Vec, allowed: frozenset[str] | None = None) -> None:
        """Use `demand` on `server`; raises if it does not fit."""
        if not self.fits(server, demand, allowed):
            raise ValueError(
                f"demand {demand} does not fit server {server} ({self.free_of(server)})"
            )
        self.take_unchecked(server, demand)

    def give(self, server: int, demand: Vec) -> None:
        """Release `demand` on `server`."""
        old = self._of[server]
        new = old.given.get(demand)
        if new is None:
            new = self._after_give(old, demand)
        self._relocate(server, old, new)

    def give_all(self, taken: Iterable[tuple[int, Vec]]) -> None:
        """Release every (server, demand) of `taken`: undo a tentative placement."""
        for server, demand in taken:
            self.give(server, demand)

    # -- choosing a server ---------------------------------------------------------------

    def _fitting(self, demand: Vec, allowed: frozenset[str] | None = None):
        """The non-empty buckets where `demand` fits (in no particular order: every chooser
        breaks ties by server index)."""
        if self._plain and allowed is None and not is_share(demand[0]):
            d0, d1, d2 = demand
            for bucket in self._active.values():
                f0, f1, f2 = bucket.free
                if f0 + _EPS >= d0 and f1 + _EPS >= d1 and f2 + _EPS >= d2:
                    yield bucket
            return
        for bucket in self._active.values():
            if self._ok(bucket, demand, allowed):
                yield bucket

    def any_fit(self, demand: Vec, allowed: frozenset[str] | None = None) -> bool:
        """Whether `demand` fits on some server."""
        return next(self._fitting(demand, allowed), None) is not None

    def first_fit(self, demand: Vec, allowed: frozenset[str] | None = None) -> int:
        """Lowest-index server where `demand` fits, -1 if none (bin packing)."""
        best = -1
        for bucket in self._fitting(demand, allowed):
            first = bucket.servers[0]
            if best < 0 or first < best:
                best = first
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
        # Kept per set of active buckets whatever the pool: a bucket's fit and load depend
        # only on its immutable state (free amounts, shared GPUs, GPU type).
        known = self._answers(self._least)
        key = demand if allowed is None else (demand, allowed)
        best = known.get(key, _UNKNOWN)
        if best is _UNKNOWN:
            tied: list[_Bucket] = []  # the fitting buckets of the least load
            best_load = 0.0
            for bucket in self._fitting(demand, allowed):
                load = bucket.load
                if load is None:
                    cap, free = bucket.cap, bucket.free
                    used = sum((c - f) / c for c, f in zip(cap, free, strict=True) if c > 0)
                    load = bucket.load = round(used, 9)
                if not tied or load < best_load:
                    tied, best_load = [bucket], load
                elif load == best_load:
                    tied.append(bucket)
            # Which of tied buckets holds the lowest server changes as servers move while the
            # same buckets stay active: a tie is kept as its buckets, decided at each call.
            best = known[key] = (tied[0] if len(tied) == 1 else tuple(tied)) if tied else None
        if type(best) is tuple:
            best = min(best, key=_first_server)
        if best is None:
            return -1
        servers = best.servers
        if rng is None or len(servers) == 1:
            return servers[0]
        return servers[int(rng.integers(len(servers)))]

    def uniform(
        self, demand: Vec, rng: np.random.Generator, allowed: frozenset[str] | None = None
    ) -> int:
        """A fitting server drawn uniformly at random, -1 if none."""
        groups = [bucket.servers for bucket in self._fitting(demand, allowed)]
        total = sum(len(g) for g in groups)
        if total == 0:
            return -1
        r = int(rng.integers(total))
        for g in sorted(groups, key=lambda g: g[0]):
            if r < len(g):
                return g[r]
            r -= len(g)
        raise AssertionError("unreachable")

    def _answers(self, kept: dict[int, dict]) -> dict:
        """The answers `kept` holds for the current set of active buckets (demand, or demand
        and allowed GPU types -> the bucket, a tuple of buckets tied but for their lowest
        server, or None), a new empty table the first time that set is seen; `kept` is
        emptied once it holds `_MAX_SETS` sets (a long-lived pool: bounded memory)."""
        known = kept.get(self._sig)
        if known is None:
            if len(kept) >= _MAX_SETS:
                kept.clear()
            known = kept[self._sig] = {}
        return known

    def _feasible_bucket(self, demand: Vec, allowed: frozenset[str] | None) -> _Bucket | None:
        """`feasible_fit`'s bucket (its lowest server is the choice), None if none fits."""
        known = self._answers(self._feasible)
        key = demand if allowed is None else (demand, allowed)
        best = known.get(key, _UNKNOWN)
        if best is not _UNKNOWN:
            return min(best, key=_first_server) if type(best) is tuple else best
        g = demand[0]
        gpu = g > _EPS and not is_share(g)
        tied: list[_Bucket] = []  # the fitting buckets first in order
        bo = ()
        if self._plain and allowed is None and (g <= _EPS or g >= 1.0 - _EPS):
            d0, d1, d2 = g - _EPS, demand[1] - _EPS, demand[2] - _EPS
            fitting = (
                b
                for b in self._active.values()
                if b.free[0] >= d0 and b.free[1] >= d1 and b.free[2] >= d2
            )
        else:
            fitting = self._fitting(demand, allowed)
        for b in fitting:
            o = b.gpu_order if gpu else b.cpu_order
            if not tied or o < bo:
                tied, bo = [b], o
            elif o == bo:
                tied.append(b)
        # A tie is kept as its buckets and decided by their lowest server at each call (see
        # `least_loaded`).
        best = known[key] = (tied[0] if len(tied) == 1 else tuple(tied)) if tied else None
        return min(best, key=_first_server) if type(best) is tuple else best

    def feasible_fit(self, demand: Vec, allowed: frozenset[str] | None = None) -> int:
        """A server chosen to keep later tasks placeable (allocation feasibility checks):
        GPU tasks go where most GPUs are free, other tasks where fewest GPUs are free (so
        they do not strand GPUs), then most CPU free; lowest index last. -1 if none. (A GPU
        share goes where fewest GPUs are free instead, so it fills partly used GPUs.)"""
        bucket = self._feasible_bucket(demand, allowed)
        return -1 if bucket is None else bucket.servers[0]

    def take_feasible(self, demand: Vec, allowed: frozenset[str] | None = None) -> int:
        """`feasible_fit` and `take_unchecked` of its server in one step (the allocation
        builder's step); returns the server, -1 (nothing taken) if none fits."""
        known = self._feasible.get(self._sig)
        if known is None:
            old = _UNKNOWN
        else:
            old = known.get(demand if allowed is None else (demand, allowed), _UNKNOWN)
        if old is _UNKNOWN:
            old = self._feasible_bucket(demand, allowed)
        elif type(old) is tuple:
            old = min(old, key=_first_server)
        if old is None:
            return -1
        new = old.taken.get(demand)
        if new is None:
            new = self._after_take(old, demand)
        # `_relocate` written out: the server leaves from the front of its bucket.
        servers = old.servers
        server = servers[0]
        if len(servers) == 1:
            servers.clear()
            del self._active[old.bit]
            self._sig ^= old.bit
        else:
            del servers[0]
        servers = new.servers
        if servers:
            insort(servers, server)
        else:
            servers.append(server)
            self._active[new.bit] = new
            self._sig ^= new.bit
        self._of[server] = new
        return server

    def best_alignment(self, demand: Vec, allowed: frozenset[str] | None = None) -> float:
        """Tetris' packing score: the largest dot product, over servers where `demand` fits,
        of the demand and the server's free resources, both as shares of its capacity;
        -1 if it fits nowhere."""
        best = -1.0
        for bucket in self._fitting(demand, allowed):
            cap, free = bucket.cap, bucket.free
            score = sum(d * f / (c * c) for d, f, c in zip(demand, free, cap, strict=True) if c > 0)
            best = max(best, score)
        return best


def _first_server(bucket: _Bucket) -> int:
    return bucket.servers[0]


def _group_rows(cap: np.ndarray, free: np.ndarray) -> list[tuple[tuple, list[int]]]:
    """Plain buckets of servers: (key, sorted server indices) per distinct (capacity, free)
    pair, with the key (cap, free, (), None) of the bucket's first server (the values of a
    dict of per-server tuples, without a Python loop over servers)."""
    n = cap.shape[0]
    if n == 0:
        return []
    if (cap == cap[0]).all() and (free == free[0]).all():
        # A whole idle homogeneous cluster (every decision's allocation builder): one bucket.
        return [((tuple(cap[0].tolist()), tuple(free[0].tolist()), (), None), list(range(n)))]
    keys, members = equal_rows(np.concatenate([cap, free], axis=1))  # rows (n, 6)
    return [
        ((tuple(k[:3]), tuple(k[3:]), (), None), servers.tolist())
        for k, servers in zip(keys, members, strict=True)
    ]


def equal_rows(rows: np.ndarray) -> tuple[list[list[float]], list[np.ndarray]]:
    """The distinct rows of `rows` (n, k), in sorted order, and for each the ascending
    indices of the rows equal to it (values compared as numbers: 0.0 equals -0.0)."""
    if len(rows) == 0:
        return [], []
    order = np.lexsort(rows.T[::-1])  # stable: equal rows keep ascending order
    ranked = rows[order]
    starts = np.flatnonzero(np.concatenate(([True], (ranked[1:] != ranked[:-1]).any(axis=1))))
    return ranked[starts].tolist(), np.split(order, starts[1:])


def byte_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of a C-contiguous (n, k) array grouped by their bytes (unlike `equal_rows`,
    -0.0 and 0.0 differ): the index of each distinct row's first occurrence (in the rows'
    sorted byte order) and, per row, which distinct row it is."""
    keys = rows.view(np.dtype((np.void, rows.shape[1] * rows.itemsize))).ravel()
    _, first, which = np.unique(keys, return_index=True, return_inverse=True)
    return first, which.ravel()


def row_classes(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Classes of the equal rows of a C-contiguous (n, k) array by their bytes (as
    `byte_rows`: -0.0 and 0.0 differ), numbered as they first appear: each row's class
    (n,) and each class's first row (K,), ascending. A dict of the rows' bytes: on a few
    hundred rows, half the time of sorting them."""
    keys = rows.view(np.dtype((np.void, rows.shape[1] * rows.itemsize))).ravel().tolist()
    seen: dict[bytes, int] = {}
    which = np.array([seen.setdefault(key, len(seen)) for key in keys], dtype=np.intp)
    # The highest class so far rises exactly at each class's first row.
    first = np.flatnonzero(np.diff(np.maximum.accumulate(which), prepend=-1) > 0)
    return which, first


def _group_typed(
    cap: np.ndarray, free: np.ndarray, types: Sequence[str | None], shared: Mapping[int, Shared]
) -> list[tuple[tuple, list[int]]]:
    """Buckets of servers by (capacity, free, shared GPUs, GPU type), each with its sorted
    server indices: the servers holding no GPU share grouped as `_group_rows` groups them,
    with the GPU type as one more column (a node list of a thousand servers would otherwise
    cost a Python loop over every server at each decision, twice), and the few holding
    shares one by one. Which bucket comes first does not matter: every chooser breaks ties
    by server index."""
    names = sorted({t for t in types if t is not None})
    code = {t: float(k) for k, t in enumerate(names)}
    codes = np.array([-1.0 if t is None else code[t] for t in types])  # (n,)
    plain = np.ones(cap.shape[0], dtype=bool)
    plain[list(shared)] = False
    idx = np.flatnonzero(plain)
    groups: list[tuple[tuple, list[int]]] = []
    if len(idx):
        keys, members = equal_rows(np.concatenate([cap[idx], free[idx], codes[idx, None]], axis=1))
        for k, rows in zip(keys, members, strict=True):
            gtype = None if k[6] < 0 else names[int(k[6])]
            groups.append(((tuple(k[:3]), tuple(k[3:6]), (), gtype), idx[rows].tolist()))
    by_key: dict[tuple, list[int]] = {}
    for s in sorted(shared):
        key = (tuple(cap[s].tolist()), tuple(free[s].tolist()), shared[s], types[s])
        by_key.setdefault(key, []).append(s)
    return groups + list(by_key.items())


def task_arrays(groups: Iterable[tuple[Sequence[int], Vec]]) -> tuple[np.ndarray, np.ndarray]:
    """Servers (tasks,) and demands (tasks, 3) of tasks given as groups of servers sharing a
    demand (a job's workers, its PSs), in the order given.

    Summed per server (`summed_demands`, or `np.add.at`) they add in this order: the same
    order, and so the same float sums, as a list of one demand per task, but built from one
    row per group instead of one per task."""
    servers: list[int] = []
    counts: list[int] = []
    demands: list[Vec] = []
    for on, demand in groups:
        if on:
            servers.extend(on)
            counts.append(len(on))
            demands.append(demand)
    if not servers:
        return np.zeros(0, dtype=np.intp), np.zeros((0, 3))
    rows = np.array(demands, dtype=float)[np.repeat(np.arange(len(demands)), counts)]
    return np.array(servers, dtype=np.intp), rows


def summed_demands(servers: np.ndarray, demands: np.ndarray, n_servers: int) -> np.ndarray:
    """(n_servers, 3): `demands` (tasks, 3) summed per server of `servers` (tasks,).

    The same float sums as `np.add.at` into zeros, bit for bit: bincount also adds each
    server's tasks in task order, starting from 0.0; it is about ten times faster."""
    out = np.empty((n_servers, 3))
    for k in range(3):
        out[:, k] = np.bincount(servers, weights=demands[:, k], minlength=n_servers)
    return out
