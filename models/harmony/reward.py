"""Harmony's reward predictor (section V): an NN from a job set's (x, w, p, d) to every job's
training speed, and the estimators it is compared with (Fig. 9).

    x (N, L)   model one-hot of each job of the set (a zero row: no job)
    w, p (N,)  workers and PSs of each job
    d (M, 2N)  workers and PSs of each job on each server
    -> (N,) predicted speed of each job (mini-batches/s, `interference_samples` units)

One input is one *sample set* of `interference_samples` (the jobs sharing (source, seed,
sample_set): one saturated cluster), so the network sees every co-located job at once, as
the paper's vector output implies. It is trained with Adam (lr 0.005, batch 32 sets) on
the paper's relative-error loss `mean_n |c'_n - c_n| / c'_n` over the jobs present, through
fully connected hidden layers (paper: three of 196 or 128 neurons) with batch normalization.
What comes before the hidden layers is the architecture (`RewardNet`):

- pairs (default, `pair_embed`): a shared small MLP over every (job n, server m) pair
  (job n's row, its workers and PSs on m, m's workers and PSs of each model), pooled over
  the servers holding the job's tasks (max and sum), then the hidden layers per job, shared
  by the jobs: Fig. 7's per-job and per-server layers extended to job-server pairs.
  Equivariant to job order and invariant to server order by construction; still a black
  box on (x, w, p, d) (no interference features, no speed model).
- rows (`pair_embed=0`, `row_embed` > 0): each job's and each server's part of the input
  through a shared layer, flattened, then the hidden layers, which must learn the job x
  server crossing themselves (trained with random job and server reordering).
- flat (`pair_embed=0, row_embed=0`): the paper's plain input.

Held-out error on the default samples (13,182: whole sets until Harmony's 13,177; 5% slot
noise, a floor of about 2.5%) at 80 epochs, split/initialization seeds 0/1/2: pairs of 32
2.8/2.9/2.7%, rows of 64 6.8/7.2/6.9%, flat 9.4% (seed 0, and much worse at ranking
placements); on the same splits LIF-Line 10.8/10.4/10.7%, LIF-Quad 5.9/5.9/6.1%, gradient
boosting 4.3/4.3/4.3%. A fit takes about 20 s here (rows: 17 s).

Output scale: speeds differ by 30x between models, so the network's output o_n is a log
ratio to the job type's typical speed: c_n = scale[type_n] * exp(o_n), scale being the
geometric mean of the training labels of that type. The loss is still the relative error
of c_n; only the parameterization of the output differs from a raw linear neuron (which
would have to learn the per-model magnitudes before anything else).

Compared on the same 90/10 split of sample sets (`compare_estimators`): LIF-Line and
LIF-Quad (`models.heuristics.lif`, fitted on the training sets) and scikit-learn's
histogram gradient boosting on per-job features (own type, counts, placement, and the
co-located tasks of each model it shares servers with).

`RewardPredictor` also implements the simulator's `PlacedSpeedModel`, so placement rollouts
are scored by the predictor by handing it to the simulator in place of the true model.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import polars as pl
import torch
from torch import nn

from models.checkpoints import Checkpoint, CheckpointError, save_checkpoint
from models.harmony.config import RewardTrainConfig
from models.harmony.contracts import curve_frame
from models.torch_scope import scoped_torch
from tracelib.interference import placement_counts
from tracelib.progress import ProgressFn, no_progress
from tracelib.provenance import code_version
from tracelib.seeds import named_seeds
from tracelib.sim.snapshot import JobPlacement

REWARD_STREAMS = ("split", "init", "batches", "augmentation")
"""Random streams of one reward-model fit: the held-out split of sample sets, the network's
initialization, the batch order and the augmentation (`tracelib.seeds`: named, spawned in
this order; append only)."""

SYSTEM = "harmony-reward-model"
TASKS_SCALE = 4.0
"""Counts (w, p, d) are divided by this before entering the network."""


@dataclass(frozen=True)
class RewardNetConfig:
    """Shape of the reward network: fixed by the sample space it was built for."""

    type_names: tuple[str, ...]
    """Models of the one-hot x, by type_index (L = len)."""
    max_jobs: int
    """N: jobs per set the input holds."""
    n_servers: int
    """M: servers of the cluster the samples come from."""
    speed_scale: tuple[float, ...]
    """Typical speed of each type (geometric mean of its training labels; 1 if unseen)."""
    hidden: tuple[int, ...] = (196, 196, 128)
    """Hidden layers (paper: three, of 196 or 128 neurons)."""
    batch_norm: bool = True
    """Batch normalization after each hidden linear layer (paper: to speed convergence)."""
    row_embed: int = 0
    """0 (and pair_embed 0): the flat input goes straight into the hidden layers (paper
    section V). > 0: first each job's row (x_n, w_n, p_n, its column pair of d) and each
    server's row (its tasks per model, from x and d) through a shared layer of this width,
    as Harmony's policy network does (Fig. 7), then the hidden layers."""
    pair_embed: int = 0
    """> 0: the job x server pair architecture (`RewardNet` docstring): a shared MLP of two
    layers of this width over every (job n, server m) pair, pooled over the job's servers,
    then the hidden layers per job. 0 (old checkpoints): `row_embed` decides."""

    def __post_init__(self) -> None:
        if self.pair_embed and self.row_embed:
            raise ValueError("pair_embed and row_embed are exclusive architectures")

    @property
    def input_dim(self) -> int:
        n, m = self.max_jobs, self.n_servers
        return n * len(self.type_names) + 2 * n + 2 * n * m


class RewardNet(nn.Module):
    """(B, input_dim) -> (B, N) log speed ratios.

    Three architectures, by config: the paper's flat input into the hidden layers; rows
    (`row_embed`: a shared layer per job row and per server row, flattened, then the hidden
    layers); and pairs (`pair_embed`):

        job row      j_n  = [x_n, w_n, p_n]                                  (L + 2)
        server row   s_m  = [workers and PSs of each model on m, from x and d] (2L)
        pair         e_nm = MLP([j_n, d_nm (job n's workers, PSs on m), s_m])  (E)
        job n        h_n  = [j_n, max_m e_nm, sum_m e_nm] over servers m holding a task of n
        output       o_n  = hidden layers (shared by the jobs) on h_n -> 1

    The pair MLP sees each job with each server it shares, so the job x server crossing
    is built in rather than left to dense layers over the flattened input; the output is
    equivariant to job order and invariant to server order by construction (no reordering
    augmentation is needed). Batch normalization in the per-job layers uses only the jobs
    present."""

    def __init__(self, cfg: RewardNetConfig) -> None:
        super().__init__()
        self.cfg = cfg
        layers: list[nn.Module] = []
        width = cfg.input_dim
        n_types, m = len(cfg.type_names), cfg.n_servers
        if cfg.pair_embed:
            e = cfg.pair_embed
            self.pair = nn.Sequential(
                nn.Linear((n_types + 2) + 2 + 2 * n_types, e),
                nn.ReLU(),
                nn.Linear(e, e),
                nn.ReLU(),
            )
            width = n_types + 2 + 2 * e
        elif cfg.row_embed:
            self.job_row = nn.Linear(n_types + 2 + 2 * m, cfg.row_embed)
            self.server_row = nn.Linear(n_types + 1, cfg.row_embed)
            width = (cfg.max_jobs + m) * cfg.row_embed
        for h in cfg.hidden:
            layers.append(nn.Linear(width, h))
            if cfg.batch_norm:
                layers.append(nn.BatchNorm1d(h))
            layers.append(nn.ReLU())
            width = h
        layers.append(nn.Linear(width, 1 if cfg.pair_embed else cfg.max_jobs))
        self.body = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.cfg.pair_embed:
            return self._forward_pairs(x)
        if not self.cfg.row_embed:
            return self.body(x)
        n, m, n_types = self.cfg.max_jobs, self.cfg.n_servers, len(self.cfg.type_names)
        b = x.shape[0]
        onehot = x[:, : n * n_types].reshape(b, n, n_types)  # (B, N, L)
        w = x[:, n * n_types : n * n_types + n]  # (B, N)
        p = x[:, n * n_types + n : n * n_types + 2 * n]
        d = x[:, n * n_types + 2 * n :].reshape(b, m, n, 2)  # (B, M, N, 2)
        jobs = torch.cat(
            [onehot, w[..., None], p[..., None], d.permute(0, 2, 1, 3).reshape(b, n, 2 * m)],
            dim=2,
        )  # (B, N, L + 2 + 2M)
        tasks = d.sum(dim=3)  # (B, M, N)
        per_model = tasks @ onehot  # (B, M, L)
        servers = torch.cat([per_model, tasks.sum(dim=2, keepdim=True)], dim=2)  # (B, M, L+1)
        merged = torch.cat(
            [
                torch.relu(self.job_row(jobs)).flatten(1),
                torch.relu(self.server_row(servers)).flatten(1),
            ],
            dim=1,
        )
        return self.body(merged)

    def _forward_pairs(self, x: torch.Tensor) -> torch.Tensor:
        n, m, n_types = self.cfg.max_jobs, self.cfg.n_servers, len(self.cfg.type_names)
        b = x.shape[0]
        onehot = x[:, : n * n_types].reshape(b, n, n_types)  # (B, N, L)
        wp = torch.stack(
            [x[:, n * n_types : n * n_types + n], x[:, n * n_types + n : n * n_types + 2 * n]],
            dim=2,
        )  # (B, N, 2) workers, PSs
        d = x[:, n * n_types + 2 * n :].reshape(b, m, n, 2).transpose(1, 2)  # (B, N, M, 2)
        jobs = torch.cat([onehot, wp], dim=2)  # (B, N, L + 2)
        # Server m's workers and PSs of each model: sum over jobs of x_n (x) d_nm.
        servers = (
            (onehot.transpose(1, 2) @ d.reshape(b, n, 2 * m))  # (B, L, 2M)
            .reshape(b, n_types, m, 2)
            .transpose(1, 2)
            .reshape(b, m, 2 * n_types)
        )  # (B, M, 2L)
        present = onehot.sum(dim=2) > 0  # (B, N)
        bi, ni = present.nonzero(as_tuple=True)  # K present jobs
        job_k = jobs[bi, ni]  # (K, L + 2)
        d_k = d[bi, ni]  # (K, M, 2)
        pairs = torch.cat(
            [job_k[:, None, :].expand(-1, m, -1), d_k, servers[bi]], dim=2
        )  # (K, M, L + 2 + 2 + 2L)
        e = self.pair(pairs)  # (K, M, E)
        on = (d_k.sum(dim=2) > 0)[..., None]  # (K, M, 1) servers holding a task of the job
        pooled_max = torch.where(on, e, torch.zeros_like(e)).amax(dim=1)  # (K, E), e >= 0
        pooled_sum = (e * on).sum(dim=1)  # (K, E)
        out_k = self.body(torch.cat([job_k, pooled_max, pooled_sum], dim=1))  # (K, 1)
        out = x.new_zeros(b, n)
        out[bi, ni] = out_k[:, 0]
        return out  # (B, N), 0 where no job


@dataclass(frozen=True)
class SetArrays:
    """Sample sets as padded arrays (S sets, N jobs, M servers)."""

    types: np.ndarray
    """(S, N) type_index, -1 where no job."""
    workers: np.ndarray
    """(S, N)."""
    ps: np.ndarray
    """(S, N)."""
    d: np.ndarray
    """(S, M, 2N): workers of job n at 2n, PSs at 2n + 1."""
    speed: np.ndarray
    """(S, N) measured speed, 0 where no job."""
    isolated: np.ndarray
    """(S, N) isolated speed, 0 where no job."""
    row: np.ndarray
    """(S, N) row of the source frame, -1 where no job."""

    @property
    def present(self) -> np.ndarray:
        return self.types >= 0


def set_arrays(frame: pl.DataFrame, max_jobs: int | None = None) -> SetArrays:
    """`interference_samples` rows grouped into padded sample sets (rows keep their frame
    order inside a set, sets are ordered by (source, seed, sample_set))."""
    frame = frame.with_row_index("_row")
    keys = frame.select(pl.struct("source", "seed", "sample_set").rank("dense").alias("g"))["g"]
    g = keys.to_numpy().astype(np.int64) - 1
    n_sets = int(g.max()) + 1 if len(g) else 0
    pos = np.zeros(len(g), dtype=np.int64)
    # Jobs in a canonical order inside a set (by type, workers, PSs), so the same set
    # always fills the same slots whatever order its jobs were listed in.
    order = np.lexsort(
        (
            frame["job_in_set"].to_numpy(),
            frame["ps"].to_numpy(),
            frame["workers"].to_numpy(),
            frame["type_index"].to_numpy(),
            g,
        )
    )
    counts = np.bincount(g, minlength=n_sets)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    pos[order] = np.arange(len(g)) - np.repeat(starts, counts)
    n = int(max_jobs or (counts.max() if n_sets else 1))
    if n_sets and counts.max() > n:
        raise ValueError(f"a sample set holds {counts.max()} jobs, more than max_jobs={n}")
    w_srv, p_srv = placement_counts(frame)
    m = w_srv.shape[1]
    types = np.full((n_sets, n), -1, dtype=np.int64)
    workers = np.zeros((n_sets, n))
    ps = np.zeros((n_sets, n))
    d = np.zeros((n_sets, m, 2 * n))
    speed = np.zeros((n_sets, n))
    iso = np.zeros((n_sets, n))
    row = np.full((n_sets, n), -1, dtype=np.int64)
    types[g, pos] = frame["type_index"].to_numpy()
    workers[g, pos] = frame["workers"].to_numpy()
    ps[g, pos] = frame["ps"].to_numpy()
    d[g, :, 2 * pos] = w_srv
    d[g, :, 2 * pos + 1] = p_srv
    speed[g, pos] = frame["measured_speed"].to_numpy()
    iso[g, pos] = frame["isolated_speed"].to_numpy()
    row[g, pos] = frame["_row"].to_numpy()
    return SetArrays(types, workers, ps, d, speed, iso, row)


def encode_sets(arrays: SetArrays, cfg: RewardNetConfig) -> np.ndarray:
    """(S, input_dim) float32 network input: x, w, p, d flattened."""
    s, n = arrays.types.shape
    n_types = len(cfg.type_names)
    if n > cfg.max_jobs or arrays.d.shape[1] != cfg.n_servers:
        raise ValueError(
            f"sets of {n} jobs on {arrays.d.shape[1]} servers do not fit a network built for "
            f"{cfg.max_jobs} jobs on {cfg.n_servers} servers"
        )
    x = np.zeros((s, cfg.max_jobs, n_types), dtype=np.float32)
    si, ni = np.nonzero(arrays.present)
    x[si, ni, arrays.types[si, ni]] = 1.0
    pad = cfg.max_jobs - n
    w, p, d = arrays.workers / TASKS_SCALE, arrays.ps / TASKS_SCALE, arrays.d / TASKS_SCALE
    if pad:  # (np.pad costs more than the network on a single set, so only when needed)
        w = np.pad(w, ((0, 0), (0, pad)))
        p = np.pad(p, ((0, 0), (0, pad)))
        d = np.pad(d, ((0, 0), (0, 0), (0, 2 * pad)))
    return np.concatenate([x.reshape(s, -1), w, p, d.reshape(s, -1)], axis=1).astype(np.float32)


def relative_error_loss(pred: torch.Tensor, label: torch.Tensor, present: torch.Tensor):
    """Paper's L(c, c') = mean over present jobs of |c' - c| / c'; (B, N) tensors."""
    err = (pred - label).abs() / label.clamp_min(1e-12)
    return (err * present).sum() / present.sum().clamp_min(1.0)


class RewardPredictor:
    """A trained reward network: predicts job speeds of sample sets and, as a
    `PlacedSpeedModel`, of the simulator's running jobs."""

    system = SYSTEM

    def __init__(self, net: RewardNet, base_model=None, train_config: Mapping | None = None):
        self.net = net.eval()
        self.cfg = net.cfg
        self._scale = torch.tensor(self.cfg.speed_scale, dtype=torch.float32)
        self.base_model = base_model
        self.train_config = dict(train_config or {})

    def _speeds(self, arrays: SetArrays) -> np.ndarray:
        x = torch.from_numpy(encode_sets(arrays, self.cfg))
        with torch.no_grad():
            out = self.net(x)[:, : arrays.types.shape[1]]
        t = torch.from_numpy(np.where(arrays.present, arrays.types, 0))
        pred = self._scale[t] * torch.exp(out.clamp(-20.0, 20.0))
        return np.where(arrays.present, pred.numpy().astype(np.float64), 0.0)

    def predict_frame(self, frame: pl.DataFrame) -> np.ndarray:
        """Predicted speed of every row of an `interference_samples` frame, in frame order."""
        arrays = set_arrays(frame, self.cfg.max_jobs)
        pred = self._speeds(arrays)
        out = np.zeros(frame.height)
        out[arrays.row[arrays.present]] = pred[arrays.present]
        return out

    # -- PlacedSpeedModel --------------------------------------------------------------

    def base(self, types, workers, ps) -> np.ndarray:
        """Isolated speed: the simulator's catalogue model (the predictor only knows speeds
        of placed sets)."""
        if self.base_model is None:
            from tracelib.sim.speed import SpeedModel

            self.base_model = SpeedModel()
        return self.base_model.base(types, workers, ps)

    def placed(
        self, types, workers, ps, placements: Sequence[JobPlacement], n_servers: int
    ) -> np.ndarray:
        """Predicted speed of each running job given every job's placement. More jobs than
        the network holds are predicted in groups of N (each group as if alone)."""
        if n_servers != self.cfg.n_servers:
            raise ValueError(
                f"predictor built for {self.cfg.n_servers} servers, cluster has {n_servers}"
            )
        k = len(placements)
        out = np.zeros(k)
        n = self.cfg.max_jobs
        canonical = np.lexsort((np.asarray(ps), np.asarray(workers), np.asarray(types)))
        for start in range(0, k, n):
            idx = [int(i) for i in canonical[start : start + n]]
            arrays = _arrays_of(
                [types[i] for i in idx],
                [workers[i] for i in idx],
                [ps[i] for i in idx],
                [placements[i] for i in idx],
                n_servers,
                n,
            )
            out[idx] = self._speeds(arrays)[0, : len(idx)]
        base = self.base(types, workers, ps)
        return np.where(base > 0, out, 0.0)

    def for_cluster(self, n_servers: int, max_jobs: int | None = None) -> RewardPredictor:
        """This predictor on a cluster of `n_servers` holding up to `max_jobs` jobs at once
        (default: as built). The pair architecture's weights do not depend on either (its
        pair MLP and per-job layers are shared by every job and server; only reshapes use
        them), so the same weights serve; ValueError for the rows and flat architectures,
        whose weights fix both."""
        cfg = replace(self.cfg, n_servers=n_servers, max_jobs=max_jobs or self.cfg.max_jobs)
        if cfg == self.cfg:
            return self
        if not cfg.pair_embed:
            raise ValueError(
                f"a reward network without pair_embed is built for {self.cfg.n_servers} "
                f"servers and {self.cfg.max_jobs} jobs; only the pair architecture resizes"
            )
        net = RewardNet(cfg)
        net.load_state_dict(self.net.state_dict(), strict=True)
        return RewardPredictor(net, self.base_model, self.train_config)

    # -- checkpoints -------------------------------------------------------------------

    def checkpoint_config(self) -> dict[str, Any]:
        return {"net": asdict(self.cfg), "train": self.train_config}

    def save(self, path: str | os.PathLike[str], meta: Mapping[str, Any] | None = None) -> str:
        """Weights-only checkpoint (config inside); returns its sha256."""
        return save_checkpoint(
            path,
            system=SYSTEM,
            config=self.checkpoint_config(),
            state={"reward": self.net.state_dict()},
            meta=meta,
        )


def net_config_from_dict(raw: Mapping[str, Any]) -> RewardNetConfig:
    return RewardNetConfig(
        type_names=tuple(raw["type_names"]),
        max_jobs=int(raw["max_jobs"]),
        n_servers=int(raw["n_servers"]),
        speed_scale=tuple(float(v) for v in raw["speed_scale"]),
        hidden=tuple(int(h) for h in raw["hidden"]),
        batch_norm=bool(raw["batch_norm"]),
        row_embed=int(raw.get("row_embed", 0)),
        pair_embed=int(raw.get("pair_embed", 0)),
    )


def predictor_from_checkpoint(ckpt: Checkpoint) -> RewardPredictor:
    """Rebuild a predictor from a loaded checkpoint (CheckpointError if it does not fit)."""
    try:
        cfg = net_config_from_dict(ckpt.config["net"])
        net = RewardNet(cfg)
        net.load_state_dict(ckpt.state["reward"], strict=True)
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise CheckpointError(f"not a Harmony reward-model checkpoint: {exc}") from None
    return RewardPredictor(net, train_config=ckpt.config.get("train"))


def _arrays_of(types, workers, ps, placements, n_servers: int, n: int) -> SetArrays:
    """One set of running jobs as `SetArrays` (S = 1)."""
    k = len(placements)
    t = np.full((1, n), -1, dtype=np.int64)
    w = np.zeros((1, n))
    p = np.zeros((1, n))
    d = np.zeros((1, n_servers, 2 * n))
    t[0, :k] = np.asarray(types, dtype=np.int64)
    w[0, :k] = workers
    p[0, :k] = ps
    for i, pl_ in enumerate(placements):
        np.add.at(d[0, :, 2 * i], list(pl_.workers), 1.0)
        np.add.at(d[0, :, 2 * i + 1], list(pl_.ps), 1.0)
    zeros = np.zeros((1, n))
    return SetArrays(t, w, p, d, zeros, zeros, np.full((1, n), -1))


# -- training ------------------------------------------------------------------------------


def split_sets(frame: pl.DataFrame, test_fraction: float, seed: int) -> np.ndarray:
    """Bool per row: True for rows of held-out sample sets (a shuffled test_fraction of
    the sets; every job of a set is on the same side)."""
    keys = frame.select(pl.struct("source", "seed", "sample_set").rank("dense").alias("g"))["g"]
    g = keys.to_numpy().astype(np.int64) - 1
    n_sets = int(g.max()) + 1 if len(g) else 0
    rng = np.random.default_rng(named_seeds(seed, REWARD_STREAMS)["split"])
    perm = rng.permutation(n_sets)
    n_test = max(1, round(test_fraction * n_sets)) if n_sets > 1 else 0
    test_sets = np.zeros(n_sets, dtype=bool)
    test_sets[perm[:n_test]] = True
    return test_sets[g]


def type_names_of(frame: pl.DataFrame) -> tuple[str, ...]:
    """Model name per type_index 0..max (gaps named '?')."""
    pairs = frame.select("type_index", "model").unique().sort("type_index")
    names = ["?"] * (int(pairs["type_index"].max()) + 1 if pairs.height else 0)
    for t, m in pairs.iter_rows():
        names[int(t)] = m
    return tuple(names)


@dataclass
class RewardFit:
    """A trained predictor, its curve and held-out error."""

    predictor: RewardPredictor
    curve: pl.DataFrame
    """step (epoch), wall_s, train_loss, test_rel_error."""
    test_mask: np.ndarray
    """Bool per frame row: held out."""
    metrics: dict[str, Any] = field(default_factory=dict)


# It seeds torch's global generator for the network's initialization; the scope (one per
# call) gives the generator back as it was.
@scoped_torch()
def fit_reward_model(
    frame: pl.DataFrame,
    cfg: RewardTrainConfig,
    init: RewardPredictor | None = None,
    progress: ProgressFn = no_progress,
) -> RewardFit:
    """Train the reward network on the training sets of `frame` (90/10 split by set);
    `init` (a predictor with the same input shape) continues from its weights, keeping
    its output scales, as the online update does. `progress(epoch, epochs)` after each."""
    seeds = named_seeds(cfg.seed, REWARD_STREAMS)
    torch.manual_seed(int(seeds["init"].generate_state(1)[0]))
    test_mask = split_sets(frame, cfg.test_fraction, cfg.seed)
    train, test = frame.filter(~pl.Series(test_mask)), frame.filter(pl.Series(test_mask))
    names = type_names_of(frame)
    n_servers = int(frame["n_servers"].max())
    max_jobs = max(
        int(frame.group_by("source", "seed", "sample_set").len()["len"].max()), cfg.max_jobs
    )
    arch = (0 if cfg.pair_embed else cfg.row_embed, cfg.pair_embed)  # (row_embed, pair_embed)
    if init is not None:
        ncfg = init.cfg
        if (
            len(ncfg.type_names) < len(names)
            or ncfg.n_servers != n_servers
            or ncfg.max_jobs
            < int(frame.group_by("source", "seed", "sample_set").len()["len"].max())
            or tuple(ncfg.hidden) != tuple(cfg.hidden)
            or (ncfg.row_embed, ncfg.pair_embed) != arch
        ):
            raise ValueError(
                "the previous reward model does not fit these samples "
                f"(types {len(ncfg.type_names)} vs {len(names)}, servers {ncfg.n_servers} vs "
                f"{n_servers}, jobs {ncfg.max_jobs} vs {max_jobs}, hidden {ncfg.hidden}, "
                f"row/pair embed {(ncfg.row_embed, ncfg.pair_embed)} vs {arch})"
            )
        net = RewardNet(ncfg)
        net.load_state_dict(init.net.state_dict())
    else:
        logs = train.group_by("type_index").agg(pl.col("measured_speed").log().mean())
        scale = np.ones(len(names))
        for t, lg in logs.iter_rows():
            scale[int(t)] = float(np.exp(lg))
        ncfg = RewardNetConfig(
            type_names=names,
            max_jobs=max_jobs,
            n_servers=n_servers,
            speed_scale=tuple(float(s) for s in scale),
            hidden=tuple(cfg.hidden),
            batch_norm=cfg.batch_norm,
            row_embed=arch[0],
            pair_embed=arch[1],
        )
        net = RewardNet(ncfg)
    tr = set_arrays(train, ncfg.max_jobs)
    te = set_arrays(test, ncfg.max_jobs)
    pad = ncfg.max_jobs - tr.types.shape[1]
    tr = _padded(tr, pad)
    scale_t = torch.tensor(ncfg.speed_scale, dtype=torch.float32)
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    gen = torch.Generator().manual_seed(int(seeds["batches"].generate_state(1)[0]))
    aug_rng = np.random.default_rng(seeds["augmentation"])
    predictor = RewardPredictor(net, train_config=asdict(cfg))
    sched = (
        torch.optim.lr_scheduler.CosineAnnealingLR(opt, max(cfg.epochs, 1))
        if cfg.lr_decay
        else None
    )
    rows: list[dict[str, Any]] = []
    start = time.perf_counter()
    n = tr.types.shape[0]
    for epoch in range(cfg.epochs):
        net.train()
        perm = torch.randperm(n, generator=gen).numpy()
        losses = []
        for b in range(0, n, cfg.batch_size):
            idx = perm[b : b + cfg.batch_size]
            if len(idx) < 2:  # batch norm needs two samples
                continue
            batch = _take(tr, idx)
            if cfg.augment and not ncfg.pair_embed:  # the pair network is order-free
                batch = _permuted(batch, aug_rng, cfg.augment_jobs)
            x = torch.from_numpy(encode_sets(batch, ncfg))
            present = torch.from_numpy(batch.present).float()
            types = torch.from_numpy(np.where(batch.present, batch.types, 0))
            out = net(x)  # (B, N)
            pred = scale_t[types] * torch.exp(out.clamp(-20.0, 20.0))
            loss = relative_error_loss(pred, torch.from_numpy(batch.speed).float(), present)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        if sched is not None:
            sched.step()
        net.eval()
        rows.append(
            {
                "step": epoch + 1,
                "wall_s": time.perf_counter() - start,
                "train_loss": float(np.mean(losses)) if losses else None,
                "test_rel_error": _mean_error(predictor, te),
            }
        )
        progress(epoch + 1, cfg.epochs)
    net.eval()
    curve = curve_frame(rows, ("step", "wall_s", "train_loss", "test_rel_error"))
    metrics = {
        "n_samples": frame.height,
        "n_sets": int(tr.types.shape[0] + te.types.shape[0]),
        "test_rel_error": _mean_error(predictor, te),
        "train_rel_error": _mean_error(predictor, tr),
        "wall_s": time.perf_counter() - start,
    }
    return RewardFit(predictor, curve, test_mask, metrics)


def _padded(a: SetArrays, pad: int) -> SetArrays:
    """`a` with `pad` empty job slots appended."""
    if pad == 0:
        return a
    two = ((0, 0), (0, pad))
    return SetArrays(
        np.pad(a.types, two, constant_values=-1),
        np.pad(a.workers, two),
        np.pad(a.ps, two),
        np.pad(a.d, ((0, 0), (0, 0), (0, 2 * pad))),
        np.pad(a.speed, two),
        np.pad(a.isolated, two),
        np.pad(a.row, two, constant_values=-1),
    )


def _take(a: SetArrays, idx: np.ndarray) -> SetArrays:
    return SetArrays(*(getattr(a, f)[idx] for f in SetArrays.__dataclass_fields__))


def _permuted(a: SetArrays, rng: np.random.Generator, jobs_too: bool) -> SetArrays:
    """Each set with its job slots and its servers randomly reordered, (B, ...) arrays."""
    b, n = a.types.shape
    m = a.d.shape[1]
    jobs = np.tile(np.arange(n), (b, 1))  # (B, N)
    if jobs_too:
        jobs = rng.permuted(jobs, axis=1)
    servers = rng.permuted(np.tile(np.arange(m), (b, 1)), axis=1)  # (B, M)
    rows = np.arange(b)[:, None]
    cols = np.stack([2 * jobs, 2 * jobs + 1], axis=2).reshape(b, 2 * n)  # (B, 2N)
    d = a.d[rows, servers]  # (B, M, 2N) servers reordered
    d = np.take_along_axis(d, cols[:, None, :], axis=2)
    return SetArrays(
        np.take_along_axis(a.types, jobs, 1),
        np.take_along_axis(a.workers, jobs, 1),
        np.take_along_axis(a.ps, jobs, 1),
        d,
        np.take_along_axis(a.speed, jobs, 1),
        np.take_along_axis(a.isolated, jobs, 1),
        np.take_along_axis(a.row, jobs, 1),
    )


def _mean_error(predictor: RewardPredictor, arrays: SetArrays) -> float | None:
    if not arrays.present.any():
        return None
    pred = predictor._speeds(arrays)
    m = arrays.present
    return float((np.abs(pred[m] - arrays.speed[m]) / arrays.speed[m]).mean())


# -- comparison (Fig. 9) -------------------------------------------------------------------


def gbr_features(frame: pl.DataFrame, n_types: int) -> np.ndarray:
    """Per-job features for the gradient-boosting baseline: own type one-hot, workers,
    PSs, servers used, and per model the co-located tasks (mean and max over the job's
    servers, weighted by its own tasks there)."""
    w, p = placement_counts(frame)
    tasks = (w + p).astype(float)  # (rows, M)
    types = frame["type_index"].to_numpy()
    keys = frame.select(pl.struct("source", "seed", "sample_set").rank("dense").alias("g"))["g"]
    g = keys.to_numpy().astype(np.int64) - 1
    per_model = np.zeros((int(g.max()) + 1, tasks.shape[1], n_types))  # (sets, M, L)
    np.add.at(per_model, (g, slice(None), types), tasks)
    own = np.zeros((len(types), tasks.shape[1], n_types))
    own[np.arange(len(types)), :, types] = tasks
    other = per_model[g] - own  # (rows, M, L)
    share = tasks / np.maximum(tasks.sum(axis=1, keepdims=True), 1.0)
    mean = (other * share[:, :, None]).sum(axis=1)
    mx = np.where(tasks[:, :, None] > 0, other, 0.0).max(axis=1)
    onehot = np.eye(n_types)[types]
    scalars = np.stack([frame["workers"], frame["ps"], (tasks > 0).sum(axis=1)], axis=1)
    return np.concatenate([onehot, scalars, mean, mx], axis=1)


def _per_type_rows(
    estimator: str, split: str, frame: pl.DataFrame, err: np.ndarray
) -> list[dict[str, Any]]:
    rows = [
        {
            "estimator": estimator,
            "split": split,
            "job_type": "all",
            "n_samples": len(err),
            "mean_relative_error": float(err.mean()) if len(err) else float("nan"),
        }
    ]
    models = frame["model"].to_numpy()
    for m in sorted(set(models.tolist())):
        sel = models == m
        rows.append(
            {
                "estimator": estimator,
                "split": split,
                "job_type": m,
                "n_samples": int(sel.sum()),
                "mean_relative_error": float(err[sel].mean()),
            }
        )
    return rows


ESTIMATORS = ("harmony-nn", "lif-line", "lif-quad", "gradient-boosting")


def compare_estimators(
    frame: pl.DataFrame,
    fit: RewardFit,
    seed: int = 0,
    lif: bool = True,
    lif_profile: str = "catalogue",
) -> pl.DataFrame:
    """Mean relative error of each estimator on the training and held-out rows, overall
    and per job type (estimator, split, job_type, n_samples, mean_relative_error).

    LIF reads each job type's usage profile: the catalogue's (`lif_profile="catalogue"`), or
    for job types outside it (Gavel's) one measured on the training rows
    (`"measured"`, `models.heuristics.lif.measured_usage`: how much a type slows the jobs
    it shares with); `lif=False` leaves LIF out."""
    from sklearn.ensemble import HistGradientBoostingRegressor
    from threadpoolctl import threadpool_limits

    test = fit.test_mask
    rows: list[dict[str, Any]] = []
    measured = frame["measured_speed"].to_numpy()
    pred_nn = fit.predictor.predict_frame(frame)
    err_nn = np.abs(pred_nn - measured) / measured
    splits = (("train", ~test), ("test", test))
    for split, sel in splits:
        rows += _per_type_rows("harmony-nn", split, frame.filter(pl.Series(sel)), err_nn[sel])
    if lif:
        from models.heuristics.lif import fit_lif, measured_usage, relative_error

        if lif_profile not in ("catalogue", "measured"):
            raise ValueError(f"lif_profile must be catalogue or measured, got {lif_profile!r}")
        train = frame.filter(pl.Series(~test))
        n_types = int(frame["type_index"].max()) + 1
        # The profile comes from the training rows only: the held-out error stays held out.
        usage = measured_usage(train, n_types) if lif_profile == "measured" else None
        for kind in ("line", "quad"):
            if usage is None:
                model = fit_lif(train, kind)
            else:
                model = fit_lif(train, kind, ("measured",), usage=usage)
            for split, sel in splits:
                part = frame.filter(pl.Series(sel))
                rows += _per_type_rows(f"lif-{kind}", split, part, relative_error(model, part))
    x = gbr_features(frame, len(fit.predictor.cfg.type_names))
    gbr = HistGradientBoostingRegressor(max_iter=300, random_state=seed)
    # One OpenMP thread: on a busy machine (the other worker process training beside it)
    # its threads wait on each other, and the fit took 23 s of CPU on 13,000 samples instead
    # of 0.8 s. The model is the same (its histograms are parallel over features).
    with threadpool_limits(limits=1, user_api="openmp"):
        gbr.fit(x[~test], np.log(measured[~test]))
        err_gb = np.abs(np.exp(gbr.predict(x)) - measured) / measured
    for split, sel in splits:
        rows += _per_type_rows(
            "gradient-boosting", split, frame.filter(pl.Series(sel)), err_gb[sel]
        )
    return pl.DataFrame(
        rows,
        schema={
            "estimator": pl.Utf8,
            "split": pl.Utf8,
            "job_type": pl.Utf8,
            "n_samples": pl.Int32,
            "mean_relative_error": pl.Float64,
        },
    )


def metric_rows(frame: pl.DataFrame, source: str, seed: int) -> pl.DataFrame:
    """`reward_model_metrics` rows (but the model's id) of a comparison of estimators
    (`compare_estimators`) on the samples of `source`."""
    return frame.filter(pl.col("mean_relative_error").is_not_nan()).select(
        pl.lit(source).alias("source"),
        "estimator",
        "split",
        "job_type",
        "n_samples",
        "mean_relative_error",
        pl.lit(seed, dtype=pl.Int64).alias("seed"),
        pl.lit(code_version()).alias("code_version"),
    )
