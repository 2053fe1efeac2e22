"""RL-TAPS' cluster topology and all-reduce speed model (its fixed-step scenario, the jobs
and the slowdown are in `tracelib.scenarios.rltaps`).

The cluster (RL-TAPS section 4.6.1, 5.1): machines of 4 GPUs, 2 CPU sockets and 2
InfiniBand cards (IBM Power8 "Minsky" boxes), racks of `machines_per_rack` machines under a
top-of-rack switch (TOR, the paper's TRS), every TOR on one director switch (DS). The graph
has a node per GPU, CPU socket, IB card, TOR and the DS, and an edge per link with its
default bandwidth. Each GPU is one simulator "server" (`TopologyConfig.cluster()`: 1 GPU
plus its quarter of the host's cores and memory), so a placement names GPUs and the
engine's capacity checks hold unchanged; GPU g sits on machine g // 4, socket (g % 4) // 2.

A job on GPUs G (RL-TAPS eq. 3, 12-15) processes |G| mini-batches per iteration of
tt + rt seconds: tt its per-GPU mini-batch compute time (catalogue `local_comp_s`) and

    rt = sr(|G|, S) * (1 + (r - 1) * rack_penalty) * limbw_single / limbw_multi

sr the single-rack ring-reduction time of gradient size S over |G| GPUs (square-root fits,
linear in S between the fitted sizes), r the racks G spans, limbw_single the smallest
default bandwidth on the union E(G) of the shortest paths between every pair of G, and
limbw_multi the smallest run-time bandwidth on E(G): default bandwidth / number of jobs
(with 2+ GPUs, the job included) whose own E uses the link. Shortest paths are hop-count
paths computed once per topology; a job's E is cached by its GPU set.

Every RL-TAPS coefficient and its source (job-type facts live in `tracelib.catalogue`):

| coefficient | value | source |
|---|---|---|
| machines, GPUs/sockets/IB cards per machine | 8, 4, 2, 2 | RL-TAPS 4.6.1, 5.1 |
| machines per rack | 2 ([2,2,2,2], 4 racks) | RL-TAPS 5.1 |
| CPU-CPU, CPU-GPU, CPU-IBC, IBC-TOR, TOR-DS | 38.5, 40, 1000, 12.5, 6.25 GB/s | RL-TAPS Table 1 |
| IB card k attached to socket k | | our reading of Fig. 2 |
| rack penalty | 0.2: x1.2, 1.4, 1.6 at 2, 3, 4 racks | RL-TAPS eq. 12 |
| sr fits (100 MB, 500 MB) | 3.87e-3 * sqrt(n-1), 1.94e-2 * sqrt(n-1) s | stand-in, see below |
| host share per GPU | 5 cores, 64 GB | catalogue.RLTAPS_WORKER |
| v_P100, efficiency | 10.6 TFLOPS, 0.9 | catalogue (P100 SXM2 datasheet; RL-TAPS eq. 10) |
| CNN FLOPs, gradient MB, batches | 35 CNNs x {32..512} | catalogue (convnet-burden) |
| step length | 48.30 s: 1000 vgg-vd-19 batches of 256 on a P100 / 10 rows | RL-TAPS App. A |
| a cell of work | one step of one GPU at v_P100 | RL-TAPS eq. 11, App. A |
| resumption cost | 0 s | RL-TAPS section 6 (not modelled) |

Reduction-time stand-in: the paper's Fig. 3 (ring all-reduce measured on 4 Minsky boxes for
100 and 500 MB, fitted with square roots) lost its numbers in conversion. We keep its form,
sr_S(n) = k_S * sqrt(n - 1) (0 for one GPU), and anchor each curve at 16 GPUs (the largest
measured point) on the bandwidth term of a ring all-reduce through the rack's IB links:
2 * (15/16) * S / 12.5 GB/s = 15 ms for 100 MB and 75 ms for 500 MB. The two curves are
then proportional, so the paper's interpolation reduces to scaling with S; the general
two-curve rule is kept so measured fits can replace ours. Extrapolated past 16 GPUs.

Resumption cost: RL-TAPS does not charge one (section 6: "we have not yet modelled the cost
of pausing and restarting"), and its policy re-samples every GPU's job each step during
training, so any per-change cost would dominate.
`tracelib.scenarios.rltaps.rl_taps_scenario(resume_cost_s=...)` charges one
(`SpeedConfig.realloc_pause_s`) for sensitivity studies; DL2's checkpoint-and-restart
figure is 30 s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import pairwise
from typing import NamedTuple

import networkx as nx
import numpy as np

from tracelib.catalogue import P100_FLOPS, RLTAPS_CATALOGUE, JobType
from tracelib.sim.config import ClusterConfig
from tracelib.sim.snapshot import JobPlacement

# RL-TAPS Appendix A: a row of the state image (one time step) is a tenth of the time one
# P100 (at its advertised FLOPS) takes for 1000 vgg-vd-19 mini-batches of 256.
CALIBRATION_FLOPS = 20e9
CALIBRATION_BATCH = 256
CALIBRATION_ITERS = 1000
CALIBRATION_ROWS = 10
RLTAPS_STEP_S = (
    CALIBRATION_ITERS * CALIBRATION_FLOPS * CALIBRATION_BATCH / P100_FLOPS / CALIBRATION_ROWS
)
"""Seconds per RL-TAPS time step (48.30 s)."""

_CACHE_LIMIT = 1 << 16


@dataclass(frozen=True)
class TopologyConfig:
    """A cluster of identical Minsky-like machines in racks (defaults: RL-TAPS section 5.1)."""

    machines: int = 8
    machines_per_rack: int = 2
    """Machines under one TOR; the last rack may be partly filled."""
    gpus_per_machine: int = 4
    sockets_per_machine: int = 2
    """CPU sockets; GPUs are split evenly between them."""
    ibcs_per_machine: int = 2
    """InfiniBand cards; card k hangs off socket k % sockets_per_machine."""
    cores_per_machine: float = 20.0
    """CPU cores (2 x 10-core POWER8); only their per-GPU share matters to the simulator."""
    mem_gb_per_machine: float = 256.0
    bw_cpu_cpu: float = 38.5
    """Default link bandwidths, GB/s (RL-TAPS Table 1)."""
    bw_cpu_gpu: float = 40.0
    bw_cpu_ibc: float = 1000.0
    bw_ibc_tor: float = 12.5
    bw_tor_ds: float = 6.25
    rack_penalty: float = 0.2
    """Reduction time times (1 + (racks - 1) * rack_penalty) (RL-TAPS eq. 12: 1/5)."""
    rt_fit_sizes_mb: tuple[float, float] = (100.0, 500.0)
    """Gradient sizes of the two single-rack reduction-time fits (RL-TAPS Fig. 3)."""
    rt_fit_coef_s: tuple[float, float] = (3.87e-3, 1.94e-2)
    """k of each fit sr(n) = k * sqrt(n - 1), seconds (stand-in; module docstring)."""

    def __post_init__(self) -> None:
        counts = (self.machines, self.machines_per_rack, self.gpus_per_machine)
        if min(counts) < 1 or self.sockets_per_machine < 1 or self.ibcs_per_machine < 1:
            raise ValueError("machines, racks, GPUs, sockets and IB cards must be at least 1")
        if self.gpus_per_machine % self.sockets_per_machine:
            raise ValueError("gpus_per_machine must split evenly between the sockets")
        bws = (self.bw_cpu_cpu, self.bw_cpu_gpu, self.bw_cpu_ibc, self.bw_ibc_tor, self.bw_tor_ds)
        if min(bws) <= 0:
            raise ValueError("link bandwidths must be positive")
        (s1, s2), (k1, k2) = self.rt_fit_sizes_mb, self.rt_fit_coef_s
        if not 0 < s1 < s2 or min(k1, k2) < 0 or self.rack_penalty < 0:
            raise ValueError("need 0 < fit sizes increasing, non-negative fits and rack penalty")

    @property
    def n_gpus(self) -> int:
        """GPUs in the cluster (= simulator servers)."""
        return self.machines * self.gpus_per_machine

    @property
    def n_racks(self) -> int:
        """Racks (TORs)."""
        return -(-self.machines // self.machines_per_rack)

    def gpu_location(self, gpu: int) -> tuple[int, int, int]:
        """(machine, socket, rack) of GPU `gpu`."""
        if not 0 <= gpu < self.n_gpus:
            raise ValueError(f"GPU {gpu} outside 0..{self.n_gpus - 1}")
        machine = gpu // self.gpus_per_machine
        per_socket = self.gpus_per_machine // self.sockets_per_machine
        socket = (gpu % self.gpus_per_machine) // per_socket
        return machine, socket, machine // self.machines_per_rack

    def cluster(self) -> ClusterConfig:
        """One simulator server per GPU: 1 GPU and its share of the host's cores and memory."""
        return ClusterConfig(
            n_servers=self.n_gpus,
            gpus=1.0,
            cpus=self.cores_per_machine / self.gpus_per_machine,
            mem_gb=self.mem_gb_per_machine / self.gpus_per_machine,
        )

    def reduction_coefficient(self, size_mb: float) -> float:
        """k(S) of the single-rack reduction time k(S) * sqrt(n - 1): 0 at 0 MB, linear up to
        the first fit, then along the line through both fits (RL-TAPS 4.6.3)."""
        (s1, s2), (k1, k2) = self.rt_fit_sizes_mb, self.rt_fit_coef_s
        if size_mb <= s1:
            return k1 * max(size_mb, 0.0) / s1
        return k1 + (size_mb - s1) * (k2 - k1) / (s2 - s1)


def build_graph(cfg: TopologyConfig) -> nx.Graph:
    """The cluster as a graph: nodes ("gpu", g), ("cpu", machine, socket),
    ("ibc", machine, card), ("tor", rack), ("ds",) with a `kind` attribute; edges with
    `kind` ("cpu-gpu", "cpu-cpu", "cpu-ibc", "ibc-tor", "tor-ds") and `bandwidth` (GB/s)."""
    g = nx.Graph()
    g.add_node(("ds",), kind="ds")
    for rack in range(cfg.n_racks):
        g.add_node(("tor", rack), kind="tor")
        g.add_edge(("tor", rack), ("ds",), kind="tor-ds", bandwidth=cfg.bw_tor_ds)
    for m in range(cfg.machines):
        rack = m // cfg.machines_per_rack
        cpus = [("cpu", m, s) for s in range(cfg.sockets_per_machine)]
        for cpu in cpus:
            g.add_node(cpu, kind="cpu")
        for a in range(len(cpus)):
            for b in range(a + 1, len(cpus)):
                g.add_edge(cpus[a], cpus[b], kind="cpu-cpu", bandwidth=cfg.bw_cpu_cpu)
        for k in range(cfg.ibcs_per_machine):
            ibc = ("ibc", m, k)
            g.add_node(ibc, kind="ibc")
            g.add_edge(cpus[k % len(cpus)], ibc, kind="cpu-ibc", bandwidth=cfg.bw_cpu_ibc)
            g.add_edge(ibc, ("tor", rack), kind="ibc-tor", bandwidth=cfg.bw_ibc_tor)
        for i in range(cfg.gpus_per_machine):
            gpu = m * cfg.gpus_per_machine + i
            _, socket, _ = cfg.gpu_location(gpu)
            g.add_node(("gpu", gpu), kind="gpu")
            g.add_edge(cpus[socket], ("gpu", gpu), kind="cpu-gpu", bandwidth=cfg.bw_cpu_gpu)
    return g


class JobLinks(NamedTuple):
    """What the reduction model needs of a GPU set (cached per set)."""

    edges: np.ndarray
    """Indices (into `Topology.edges`) of the links on its GPU-to-GPU shortest paths."""
    racks: int
    """Racks the GPUs span."""
    single_bw: float
    """limbw_single: smallest default bandwidth on those links (inf for one GPU)."""


class Topology:
    """A `TopologyConfig`'s graph with every GPU-pair shortest path precomputed."""

    def __init__(self, cfg: TopologyConfig | None = None) -> None:
        self.cfg = cfg or TopologyConfig()
        self.graph = build_graph(self.cfg)
        self.edges: tuple[tuple, ...] = tuple(self.graph.edges)
        index = {frozenset(e): i for i, e in enumerate(self.edges)}
        self.bandwidth = np.array([self.graph.edges[e]["bandwidth"] for e in self.edges])
        self.bandwidth.flags.writeable = False
        n = self.cfg.n_gpus
        self.gpu_rack = tuple(self.cfg.gpu_location(g)[2] for g in range(n))
        # Links of the shortest path between every GPU pair, as bit masks over edge indices.
        self._pair: list[list[int]] = [[0] * n for _ in range(n)]
        for i in range(n):
            paths = nx.single_source_shortest_path(self.graph, ("gpu", i))
            for j in range(i + 1, n):
                path = paths[("gpu", j)]
                mask = 0
                for u, v in pairwise(path):
                    mask |= 1 << index[frozenset((u, v))]
                self._pair[i][j] = self._pair[j][i] = mask
        self._nbytes = (len(self.edges) + 7) // 8
        self._cache: dict[tuple[int, ...], JobLinks] = {}

    @property
    def n_edges(self) -> int:
        """Links in the graph."""
        return len(self.edges)

    def path_edges(self, a: int, b: int) -> tuple[tuple, ...]:
        """Links (node pairs) of the shortest path between GPUs a and b."""
        mask = self._pair[a][b]
        return tuple(e for i, e in enumerate(self.edges) if mask >> i & 1)

    def links(self, gpus: Sequence[int]) -> JobLinks:
        """Links, racks and limiting default bandwidth of a job on `gpus` (cached)."""
        key = tuple(gpus)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        unique = sorted(set(key))
        if unique and not 0 <= unique[0] <= unique[-1] < self.cfg.n_gpus:
            raise ValueError(f"GPUs {unique} outside 0..{self.cfg.n_gpus - 1}")
        mask = 0
        for a, ga in enumerate(unique):
            row = self._pair[ga]
            for gb in unique[a + 1 :]:
                mask |= row[gb]
        bits = np.unpackbits(
            np.frombuffer(mask.to_bytes(self._nbytes, "little"), dtype=np.uint8),
            bitorder="little",
        )
        edges = np.flatnonzero(bits[: self.n_edges])
        single = float(self.bandwidth[edges].min()) if len(edges) else math.inf
        out = JobLinks(edges, len({self.gpu_rack[g] for g in unique}), single)
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[key] = out
        return out

    def jobs_per_edge(self, gpu_sets: Sequence[Sequence[int]]) -> np.ndarray:
        """Number of jobs (with 2+ GPUs) whose shortest paths use each link, (n_edges,)."""
        parts = [self.links(g).edges for g in gpu_sets]
        if not parts:
            return np.zeros(self.n_edges, dtype=np.int64)
        return np.bincount(np.concatenate(parts), minlength=self.n_edges)


@lru_cache(maxsize=16)
def topology_for(cfg: TopologyConfig) -> Topology:
    """The (shared, memoized) `Topology` of a config: paths are computed once per config."""
    return Topology(cfg)


class TopologySpeedModel:
    """RL-TAPS' job speed: |G| mini-batches per tt + rt seconds (module docstring).

    Implements the engine's `PlacedSpeedModel`; types index `catalogue` by `type_index`.
    PS counts are ignored (all-reduce jobs)."""

    def __init__(
        self, topology: Topology, catalogue: tuple[JobType, ...] = RLTAPS_CATALOGUE
    ) -> None:
        ordered = sorted(catalogue, key=lambda jt: jt.type_index)
        if [jt.type_index for jt in ordered] != list(range(len(ordered))):
            raise ValueError("catalogue type_index values must be 0..L-1")
        self.topology = topology
        self.tt = np.array([jt.local_comp_s for jt in ordered])  # (L,) s per mini-batch
        self.k = np.array(
            [topology.cfg.reduction_coefficient(jt.model_size_mb) for jt in ordered]
        )  # (L,) s: single-rack reduction time = k * sqrt(n - 1)

    def single_rack_reduction_s(self, types, gpus) -> np.ndarray:
        """sr: reduction time alone on one rack with `gpus` GPUs (0 for one GPU)."""
        n = np.asarray(gpus, dtype=float)
        return self.k[np.asarray(types, dtype=int)] * np.sqrt(np.maximum(n - 1.0, 0.0))

    def base(self, types, workers, ps) -> np.ndarray:
        """Speed alone on one rack (mini-batches/s): RL-TAPS' single-rack estimate (eq. 5);
        0 without GPUs. `ps` is ignored."""
        t = np.asarray(types, dtype=int)
        n = np.asarray(workers, dtype=float)
        speed = n / (self.tt[t] + self.single_rack_reduction_s(t, n))
        return np.where(n > 0, speed, 0.0)

    def reduction_s(self, types: Sequence[int], placements: Sequence[JobPlacement]) -> np.ndarray:
        """rt of each job given every job's GPUs (jobs sharing links slow each other)."""
        topo = self.topology
        links = [topo.links(pl.workers) for pl in placements]
        n = np.array([len(set(pl.workers)) for pl in placements], dtype=float)
        racks = np.array([lk.racks for lk in links], dtype=float)
        scale = np.ones(len(placements))
        multi = [i for i, lk in enumerate(links) if len(lk.edges)]
        if multi:
            parts = [links[i].edges for i in multi]
            flat = np.concatenate(parts)
            per_edge = np.bincount(flat, minlength=topo.n_edges)
            run_bw = topo.bandwidth / np.maximum(per_edge, 1)
            starts = np.cumsum([0] + [len(p) for p in parts[:-1]])
            limbw_multi = np.minimum.reduceat(run_bw[flat], starts)
            limbw_single = np.array([links[i].single_bw for i in multi])
            scale[multi] = limbw_single / limbw_multi
        rack_factor = 1.0 + (np.maximum(racks, 1.0) - 1.0) * topo.cfg.rack_penalty
        return self.single_rack_reduction_s(types, n) * rack_factor * scale

    def placed(
        self,
        types: Sequence[int],
        workers: Sequence[int],
        ps: Sequence[int],
        placements: Sequence[JobPlacement],
        n_servers: int,
    ) -> np.ndarray:
        """Speed of each job (mini-batches/s) given every job's GPUs; `workers`/`ps` are
        ignored in favour of the placements (a worker per placed GPU)."""
        if n_servers != self.topology.cfg.n_gpus:
            raise ValueError(f"{n_servers} servers but the topology has {self.topology.cfg.n_gpus}")
        t = np.asarray(types, dtype=int)
        n = np.array([len(set(pl.workers)) for pl in placements], dtype=float)
        speed = n / (self.tt[t] + self.reduction_s(t, placements))
        return np.where(n > 0, speed, 0.0)
