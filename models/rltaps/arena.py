"""RL-TAPS in the arena: its per-GPU decision on the evaluation's cluster, as a
`DecisionPolicy`, with its network and checkpoints. Training: `models.rltaps.arena_reinforce`.

What carries over from the paper and what does not (the decision itself, its state and how
parameter servers are handled: `tracelib.envs.gpu_arena`):

- Kept: one softmax per GPU over N + 1 job slots (eq. 7: the joint policy is their product),
  invalid slots masked, greedy choices at inference (4.5.2), full preemption, REINFORCE
  with a per-time-step baseline over E episodes of each job sequence (Algorithm 1).
- Network (deviation): the paper's single fully connected layer from the whole image to
  M x (N + 1) outputs has, for the DL2 cluster's 192 GPUs and 20 slots, a 5,000-input,
  6,000-unit hidden layer and 4,032 outputs (about 55 million weights): one inference per
  decision costs milliseconds, and REINFORCE would need far more episodes than a budget of
  tens of seconds allows. Here the weights are shared over GPUs: the cluster image goes
  through one layer to a context vector, every job slot's row (with the context) through
  one hidden layer to per-slot outputs (a score, weights over the slot's worker-count
  features, weights over GPU-slot pair features), and GPU g's logit for slot n is

      z[g, n] = score[n] + count_w[n] . counts[n, k_n] + pair_w[n] . pair[g, n]
      z[g, N] = null_w . (context, null features of g)

  with k_n the GPUs slot n got from the GPUs decoded before g in this decision. What is
  lost: a GPU's softmax no longer has its own output weights (the paper's network can learn
  that GPU 7 prefers slot 3), so GPUs differ only by their features (which job holds them,
  what their server got so far); to let the shared scores still produce a coherent
  allocation, GPUs are decoded one after another and each sees the worker counts the ones
  before it gave (an autoregressive product of per-GPU softmaxes, instead of independent
  ones). The network has a few thousand weights whatever the cluster size, except the
  image layer, which is sized from the cluster (horizon x M inputs).
- Other clusters (`RLTapsArenaPolicy.transfer`, the whole-trace replay of
  `pipelines.replay_learned`): only the image layer is sized from the cluster, so on a
  cluster of M' GPUs the image is resampled to the trained M columns
  (`tracelib.envs.gpu_arena.resample_image`: the context reads the same cluster at the
  trained resolution), and every other feature is per GPU or per slot as trained. With
  every job visible and only N slots, the jobs are decided N at a time in arrival order
  (as DL2 decides J at a time): each batch is one decision of the network over the GPUs
  and resources the earlier batches left, the GPUs they took closed to it. What this
  costs is not measured against a policy trained on that cluster (none can be, at the
  replay's scale, in the budget).
- Initialization (`ArenaNetConfig.prior`): a fresh network starts as "every job gets the
  GPUs it requested, running jobs keep theirs, other GPUs idle" under greedy decoding, so
  that a short training budget explores around a working schedule instead of a uniform
  one that hands every GPU to some job; the paper starts from random weights.

    policy = RLTapsArenaPolicy(ArenaNet(ArenaNetConfig.for_env(env)), env)
    Simulator(jobs, policy, sim_cfg).run()
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch
from torch import nn

from models.checkpoints import Checkpoint, CheckpointError, SavesPolicyNet, load_checkpoint
from models.dl2.config import from_dict, to_dict
from models.rltaps.config import ARENA_SYSTEM, ArenaNetConfig, ArenaTrainConfig
from models.rltaps.policy import load_weights
from tracelib.envs.gpu_arena import (
    COUNT_FEATURES,
    ArenaEnvConfig,
    ArenaStep,
    GpuDraft,
    GpuLayout,
    JobRows,
    decision,
    encode,
    resample_image,
)
from tracelib.sim.placement import LoadBalancing
from tracelib.sim.policy import PlacementPolicy
from tracelib.sim.snapshot import Allocation, Placement, Snapshot, read_only

_BELOW_REQUEST = COUNT_FEATURES.index("below_request")


class ArenaNet(nn.Module):
    """Shared-weight per-GPU scoring network (module docstring)."""

    def __init__(self, cfg: ArenaNetConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.context = nn.Linear(cfg.image_dim, cfg.context)
        self.hidden = nn.Linear(cfg.job_dim + cfg.context, cfg.hidden)
        self.heads = nn.Linear(cfg.hidden, cfg.n_heads)
        self.null = nn.Linear(cfg.context + cfg.null_features, 1)
        with torch.no_grad():
            # Small learned parts on top of the prior's structure (see ArenaNetConfig.prior).
            self.heads.weight.mul_(0.1)
            self.null.weight.mul_(0.1)
            self.heads.bias.zero_()
            self.null.bias.zero_()
            if cfg.prior > 0:
                self.heads.bias[0] = -cfg.prior
                self.heads.bias[1 + _BELOW_REQUEST] = cfg.prior + 2.0
                self.heads.bias[1 + cfg.count_features] = 2.0  # holds_gpu

    def coefficients(
        self, image: torch.Tensor, jobs: torch.Tensor, counts: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per decision: (B, I) image, (B, N, F) job rows, (B, N, C + 1, K) count tables ->
        base (B, N, C + 1) = score + count_w . counts for every worker count, pair_w
        (B, N, P), the null slot's context term (B,), and null_w (Q,) for its features."""
        ctx = torch.relu(self.context(image))  # (B, X)
        n = jobs.shape[1]
        h = torch.relu(self.hidden(torch.cat([jobs, ctx.unsqueeze(1).expand(-1, n, -1)], -1)))
        out = self.heads(h)  # (B, N, 1 + K + P)
        k = self.cfg.count_features
        score, count_w, pair_w = out[..., :1], out[..., 1 : 1 + k], out[..., 1 + k :]
        base = score + (counts * count_w.unsqueeze(2)).sum(-1)  # (B, N, C + 1)
        w = self.null.weight[0]  # (X + Q,)
        null_ctx = ctx @ w[: self.cfg.context] + self.null.bias[0]  # (B,)
        return base, pair_w, null_ctx, w[self.cfg.context :]

    def row_logits(self, batch: GpuBatch) -> torch.Tensor:
        """(R, N + 1) masked logits (-inf where masked) of every recorded GPU row."""
        base, pair_w, null_ctx, null_w = self.coefficients(batch.image, batch.jobs, batch.counts)
        _, n, c1 = base.shape
        # The count term of every slot at the row's k (a flat gather keeps the backward pass
        # at the size of `base`, not of rows x slots x counts).
        index = (batch.step.unsqueeze(1) * n + torch.arange(n)) * c1 + batch.k  # (R, N)
        z = base.reshape(-1)[index] + (pair_w[batch.step] * batch.pair).sum(-1)  # (R, N)
        zn = null_ctx[batch.step] + batch.null @ null_w  # (R,)
        return torch.cat([z, zn.unsqueeze(1)], 1).masked_fill(~batch.mask, -torch.inf)

    def log_prob_and_entropy(self, batch: GpuBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """log pi of the recorded choices, summed per decision (B,), and the mean per-GPU
        entropy of the masked softmaxes (scalar)."""
        logp = torch.log_softmax(self.row_logits(batch), -1)  # (R, N + 1)
        chosen = logp.gather(1, batch.choice.unsqueeze(1)).squeeze(1) * batch.weight  # (R,)
        per_step = torch.zeros(batch.image.shape[0], dtype=chosen.dtype)
        per_step = per_step.index_add(0, batch.step, chosen)
        p = logp.exp()
        entropy = -(p * logp.masked_fill(~batch.mask, 0.0)).sum(-1)  # (R,)
        return per_step, (entropy * batch.weight).sum() / batch.weight.sum()


@dataclass
class GpuBatch:
    """Recorded decisions as tensors: per decision its state, per decoded GPU (rows R) what
    it saw and chose (GPUs with nothing but the null slot to choose are not recorded)."""

    image: torch.Tensor  # (B, I)
    jobs: torch.Tensor  # (B, N, F)
    counts: torch.Tensor  # (B, N, C + 1, K)
    step: torch.Tensor  # (R,) int64: decision of each row
    k: torch.Tensor  # (R, N) int64: GPUs each slot had before this one
    pair: torch.Tensor  # (R, N, P)
    null: torch.Tensor  # (R, Q)
    mask: torch.Tensor  # (R, N + 1) bool
    choice: torch.Tensor  # (R,) int64
    weight: torch.Tensor  # (R,) float32: GPUs that made this choice from this softmax


@dataclass
class Recorded:
    """One decision as the decoder saw it (for training)."""

    time_s: float
    step: ArenaStep
    k: np.ndarray  # (R, N) int8
    pair: np.ndarray  # (R, N, P) bool
    null: np.ndarray  # (R, Q) bool
    mask: np.ndarray  # (R, N + 1) bool
    choice: np.ndarray  # (R,) int64
    weight: np.ndarray  # (R,) float32: GPUs that made this choice from this softmax
    forced: bool = False
    """The liveness guard overrode the choices: not the policy's, left out of the loss."""


def batch_of(records: list[Recorded]) -> GpuBatch:
    """The decisions (those the policy made) as one batch."""
    kept = [r for r in records if not r.forced]
    steps = np.concatenate([np.full(len(r.choice), i) for i, r in enumerate(kept)])
    return GpuBatch(
        image=torch.from_numpy(np.stack([r.step.image for r in kept])),
        jobs=torch.from_numpy(np.stack([r.step.features for r in kept])),
        counts=torch.from_numpy(np.stack([r.step.counts for r in kept])),
        step=torch.from_numpy(steps.astype(np.int64)),
        k=torch.from_numpy(np.concatenate([r.k for r in kept]).astype(np.int64)),
        pair=torch.from_numpy(np.concatenate([r.pair for r in kept]).astype(np.float32)),
        null=torch.from_numpy(np.concatenate([r.null for r in kept]).astype(np.float32)),
        mask=torch.from_numpy(np.concatenate([r.mask for r in kept])),
        choice=torch.from_numpy(np.concatenate([r.choice for r in kept]).astype(np.int64)),
        weight=torch.from_numpy(np.concatenate([r.weight for r in kept]).astype(np.float32)),
    )


class FastArenaNet:
    """Numpy inference of an `ArenaNet` (a frozen copy of its weights), one decision at a
    time: a decision decodes up to M GPUs, where torch's per-call overhead dominates."""

    def __init__(self, net: ArenaNet) -> None:
        def arr(t: torch.Tensor) -> np.ndarray:
            return t.detach().numpy().astype(np.float32).copy()

        with torch.no_grad():
            self.wc, self.bc = arr(net.context.weight.T), arr(net.context.bias)  # (I, X)
            self.wh, self.bh = arr(net.hidden.weight.T), arr(net.hidden.bias)  # (F + X, H)
            self.wo, self.bo = arr(net.heads.weight.T), arr(net.heads.bias)  # (H, 1 + K + P)
            w = arr(net.null.weight[0])
            self.null_ctx_w, self.null_w = w[: net.cfg.context], w[net.cfg.context :]
            self.null_b = float(net.null.bias[0])
        self.k = net.cfg.count_features

    def coefficients(self, step: ArenaStep) -> tuple[np.ndarray, np.ndarray, float]:
        """base (N, C + 1), pair_w (N, P) and the null slot's context term of a decision."""
        # einsum (numpy's own loops, not BLAS): the same sums in the same order whatever
        # threads BLAS would use, so a run's decisions do not depend on the process.
        ctx = np.maximum(np.einsum("i,ix->x", step.image, self.wc) + self.bc, 0.0)  # (X,)
        n = step.features.shape[0]
        x = np.concatenate([step.features, np.broadcast_to(ctx, (n, len(ctx)))], 1)
        h = np.maximum(np.einsum("nf,fh->nh", x, self.wh) + self.bh, 0.0)  # (N, H)
        out = np.einsum("nh,ho->no", h, self.wo) + self.bo  # (N, 1 + K + P)
        base = out[:, :1] + np.einsum("nck,nk->nc", step.counts, out[:, 1 : 1 + self.k])
        return base, out[:, 1 + self.k :], float(ctx @ self.null_ctx_w) + self.null_b


@dataclass
class RLTapsArenaPolicy(SavesPolicyNet):
    """RL-TAPS' per-GPU assignment as a simulator `DecisionPolicy` on `env`'s cluster:
    greedy by default; with `sample_rng` set, every GPU's slot is drawn from its softmax
    and, with `record` set, each decision is appended to `records` (training)."""

    net: ArenaNet
    env: ArenaEnvConfig
    ps_placement: PlacementPolicy = field(default_factory=LoadBalancing)
    """Places the PSs (the evaluation's default placement: load balancing)."""
    system: str = ARENA_SYSTEM
    train_config: dict[str, Any] = field(default_factory=dict)
    """How the policy was trained (trainer config), saved with the checkpoint."""
    name: str = "rl-taps"
    interval_s: float | None = None
    uses_oracle: bool = False
    settings: tuple[str, ...] = ("dl2",)
    sample_rng: np.random.Generator | None = None
    record: bool = False
    records: list[Recorded] = field(default_factory=list)
    forced: int = 0
    """Decisions where the liveness guard acted (`decide`)."""
    transfer: bool = False
    """Decide on the snapshot's cluster whatever its size, N jobs at a time (module
    docstring: other clusters); off, a cluster other than `env`'s is an error."""

    def __post_init__(self) -> None:
        self.cfg: ArenaNetConfig = self.net.cfg
        want = ArenaNetConfig.for_env(self.env, self.cfg.hidden, self.cfg.context, self.cfg.prior)
        if want != self.cfg:
            raise ValueError(f"network {self.cfg} does not read the environment's states {want}")
        self.layout = GpuLayout.of(self.env.cluster)
        self._layouts: dict[bytes, GpuLayout] = {}
        self._job_rows: dict[tuple, JobRows] = {}  # `encode`'s memo
        self.refresh()

    def refresh(self) -> None:
        """Re-read the network's weights (after training changed them)."""
        self.fast = FastArenaNet(self.net)

    def decide(self, snap: Snapshot, rng: np.random.Generator) -> tuple[Allocation, Placement]:
        """Every GPU's slot, then the allocation and placement it means. Liveness guard:
        when no job would run while some are visible, the first visible job that fits gets
        the GPUs it requested (first in decoding order) so the simulation cannot stall."""
        if self.transfer:
            return self._decide_in_batches(snap, rng)
        if snap.cluster.n_servers != self.env.cluster.n_servers:
            raise ValueError(
                f"policy for {self.env.cluster.n_servers} servers, the cluster has "
                f"{snap.cluster.n_servers}"
            )
        step = encode(snap, self.env, self.layout, self._job_rows)
        choices, rec = self._decode(step)
        alloc, placement = self._decision(snap, step, choices, rng)
        if not alloc.counts and step.jobs:
            choices = self._guard(step)
            alloc, placement = self._decision(snap, step, choices, rng)
            self.forced += 1
            if rec is not None:
                rec.forced = True
        if rec is not None:
            rec.time_s = snap.time_s
            self.records.append(rec)
        return alloc, placement

    def _decision(self, snap, step, choices, rng) -> tuple[Allocation, Placement]:
        return decision(snap, step, choices, self.layout, self.env, self.ps_placement, rng)

    def _decide_in_batches(
        self, snap: Snapshot, rng: np.random.Generator
    ) -> tuple[Allocation, Placement]:
        """`decide` on any cluster (`transfer`): the visible jobs N at a time in arrival
        order, each batch one greedy decision over the GPUs and resources the batches before
        it left; the liveness guard as in `decide`, on the first batch."""
        if self.record or self.sample_rng is not None:
            raise ValueError("a transferred policy decides greedily and records nothing")
        key = np.asarray(snap.cluster.capacity)[:, 0].tobytes()
        if key not in self._layouts:
            self._layouts[key] = GpuLayout.of_capacity(snap.cluster.capacity)
        layout = self._layouts[key]
        n, jobs = self.env.window, snap.jobs
        none = max(len(jobs), 1)  # the null slot of the whole decision
        choices = np.full(layout.n_gpus, none, dtype=np.int64)  # (M',) job index per GPU
        closed = np.zeros(layout.n_gpus, dtype=bool)
        base = snap.cluster.reserved
        taken = np.zeros_like(np.asarray(snap.cluster.capacity, dtype=float))  # (servers, 3)
        first = None
        for start in range(0, none, n):
            batch = jobs[start : start + n]
            cluster = snap.cluster
            if start:
                reserved = taken if base is None else base + taken
                cluster = replace(snap.cluster, reserved=read_only(reserved.copy()))
            step = encode(
                replace(snap, jobs=batch, cluster=cluster), self.env, layout, self._job_rows
            )
            if first is None:
                first = step
            seen = replace(
                step, image=resample_image(step.image, self.env.horizon, self.cfg.n_gpus)
            )
            picked, _ = self._decode(seen, layout, closed)  # the draft only reads it
            for g in np.flatnonzero(picked < n).tolist():
                choices[g] = start + int(picked[g])
                closed[g] = True
                taken[layout.server[g]] += batch[picked[g]].worker_demand
            if closed.all():
                break
        whole = replace(first, jobs=jobs)
        env = replace(self.env, window=none)
        alloc, placement = decision(snap, whole, choices, layout, env, self.ps_placement, rng)
        if not alloc.counts and jobs:
            guarded = self._guard(first, layout)
            guarded[guarded >= n] = none
            alloc, placement = decision(snap, whole, guarded, layout, env, self.ps_placement, rng)
            self.forced += 1
        return alloc, placement

    def _decode(
        self,
        step: ArenaStep,
        layout: GpuLayout | None = None,
        closed: np.ndarray | None = None,
    ) -> tuple[np.ndarray, Recorded | None]:
        """Every GPU's slot in `step.order`, greedy or sampled. A run of plain GPUs
        (`GpuDraft.plain_run`: one shared softmax until one of them picks a job) is settled
        at once: greedy, all take the softmax's best entry if it is the null slot; sampled,
        the number of nulls before the first job is drawn (geometric), which is the same
        distribution as drawing GPU by GPU. Recorded rows carry a `weight`: how many GPUs
        made that same choice from that same softmax. `layout` and `closed`: another
        cluster's GPUs and those of them this batch may not take (`_decide_in_batches`)."""
        n = self.env.window
        layout = self.layout if layout is None else layout
        base, pair_w, null_ctx = self.fast.coefficients(step)
        null_w = self.fast.null_w
        draft = GpuDraft(step, layout, n, closed)
        level = base[np.arange(n), 0].copy()  # (N,) base at each slot's current count
        plain = np.empty(n + 1, dtype=level.dtype)  # (N + 1,) a plain run's logits
        other = np.empty(n + 1)  # (N + 1,) another GPU's
        rng = self.sample_rng
        rows: list[tuple] = []
        order = step.order.tolist()
        # A GPU an earlier batch took (`closed`) offers only the null slot: no decision, no
        # draw, no record. Once a long queue's first batches fill the cluster, every later
        # batch would walk them one by one; each run of them is jumped over at once.
        shut = draft.closed[step.order]  # (M',) by position
        next_open = None  # per position, the first open one at or after it
        if shut.any():
            ahead = np.where(shut, len(order), np.arange(len(order)))
            next_open = np.minimum.accumulate(ahead[::-1])[::-1].tolist()
        position = 0
        while position < len(order):
            if next_open is not None and next_open[position] > position:
                position = next_open[position]
                continue
            g = order[position]
            mask = draft.mask(g)
            run = draft.plain_run(position)
            if not mask[:-1].any():
                position += max(run, 1)  # nothing but the null slot: no decision
                continue
            if run:
                # The job slots and the null slot's term in the network's float32.
                logits = plain
                logits[:n] = level
                logits[n] = null_ctx + null_w[0]
            else:
                job_part = level.copy()
                h = int(step.holders[g])
                if h >= 0:
                    job_part[h] += pair_w[h, 0]
                chosen = draft.on_server.get(layout.server[g])
                if chosen:
                    job_part += pair_w[:, 2]
                    for c in set(chosen):
                        job_part[c] += pair_w[c, 1] - (
                            0.0 if any(x != c for x in chosen) else pair_w[c, 2]
                        )
                # The job slots in float32, the null slot's term in float64 (numpy's
                # promotion of a float32 array and a Python float).
                logits = other
                logits[:n] = job_part
                logits[n] = null_ctx + float(draft.null(g) @ null_w)
            z = np.where(mask, logits, -np.inf)
            nulls = 0
            if rng is None:
                c = int(z.argmax())
                if run and c == n:
                    nulls = run
            else:
                p = np.exp(z - z.max())
                p /= p.sum()
                c = n
                if run:
                    # Nulls before the first job among `run` GPUs (all of them: none).
                    p_null = p[n]
                    if p_null >= 1.0:
                        nulls = run
                    else:
                        u = 1.0 - rng.random()
                        nulls = min(int(np.log(u) / np.log(p_null)) if p_null > 0 else 0, run)
                    if nulls < run:
                        q = p[:n] / p[:n].sum()
                        c = int(min(np.searchsorted(np.cumsum(q), rng.random() * q.sum()), n - 1))
                        while not mask[c]:  # round-off at the top: last valid entry
                            c -= 1
                else:
                    c = int(min(np.searchsorted(np.cumsum(p), rng.random()), n))
                    while not mask[c]:
                        c -= 1
            if self.record:
                pair = np.zeros((n, self.cfg.pair_features), dtype=bool) if run else draft.pair(g)
                null = draft.null(g)
                if nulls:
                    rows.append((draft.k.copy(), pair, null, mask, n, nulls))
                if nulls < max(run, 1):
                    rows.append((draft.k.copy(), pair, null, mask, c, 1))
            if nulls:
                position += nulls  # they stay on the null slot
                if nulls == run:
                    continue
                g = order[position]
            draft.choose(g, c)
            if c < n:
                kc = draft.k[c]
                level[c] = base[c, min(kc, base.shape[1] - 1)]
            position += 1
        rec = None
        if self.record:
            p_, q_ = self.cfg.pair_features, self.cfg.null_features
            rec = Recorded(
                time_s=0.0,
                step=step,
                k=np.array([r[0] for r in rows], dtype=np.int8).reshape(-1, n),
                pair=np.array([r[1] for r in rows], dtype=bool).reshape(-1, n, p_),
                null=np.array([r[2] for r in rows], dtype=bool).reshape(-1, q_),
                mask=np.array([r[3] for r in rows], dtype=bool).reshape(-1, n + 1),
                choice=np.array([r[4] for r in rows], dtype=np.int64),
                weight=np.array([r[5] for r in rows], dtype=np.float32),
            )
        return draft.choices, rec

    def _guard(self, step: ArenaStep, layout: GpuLayout | None = None) -> np.ndarray:
        """The first visible job that fits gets its requested GPUs, first in decoding order."""
        n = self.env.window
        layout = self.layout if layout is None else layout
        for slot, job in enumerate(step.jobs):
            draft = GpuDraft(step, layout, n)
            want = max(min(job.requested_workers, int(step.caps[slot])), 1)
            for g in step.order.tolist():
                if draft.k[slot] < want and draft.mask(g)[slot]:
                    draft.choose(g, slot)
            if draft.k[slot] > 0:
                return draft.choices
        return np.full(layout.n_gpus, n, dtype=np.int64)

    def checkpoint_config(self) -> dict[str, Any]:
        """What the checkpoint and the registry record: network shape, environment, trainer."""
        return {"net": to_dict(self.cfg), "env": to_dict(self.env), "train": self.train_config}


def arena_policy_from_checkpoint(ckpt: Checkpoint) -> RLTapsArenaPolicy:
    """Rebuild an arena policy from a loaded checkpoint; CheckpointError if the config is not
    one or the weights do not fit the network it describes."""
    try:
        cfg = from_dict(ArenaNetConfig, ckpt.config["net"])
        env = from_dict(ArenaEnvConfig, ckpt.config["env"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"checkpoint config is not an RL-TAPS arena network: {exc}") from None
    net = ArenaNet(cfg)
    load_weights(net, ckpt)
    try:
        return RLTapsArenaPolicy(net, env, system=ckpt.system, train_config=ckpt.config["train"])
    except ValueError as exc:
        raise CheckpointError(str(exc)) from None


def load_arena_policy(
    path: str | os.PathLike[str], *, sha256: str | None = None
) -> RLTapsArenaPolicy:
    """Load an arena checkpoint (weights_only=True), verifying its sha256 when given."""
    return arena_policy_from_checkpoint(load_checkpoint(path, sha256=sha256))


def clone_arena(policy: RLTapsArenaPolicy) -> RLTapsArenaPolicy:
    """A copy with its own weights (training the copy leaves `policy` as it was)."""
    net = ArenaNet(policy.cfg)
    net.load_state_dict({k: v.detach().clone() for k, v in policy.net.state_dict().items()})
    return RLTapsArenaPolicy(
        net, policy.env, system=policy.system, train_config=dict(policy.train_config)
    )


def why_not_continued(policy: RLTapsArenaPolicy, cfg: ArenaTrainConfig) -> str:
    """Why a registered arena policy cannot continue the training of `cfg` ("" when it
    can): it reads another environment, or its network has another shape."""
    if policy.env != cfg.env:
        return f"it reads {policy.env}, this training {cfg.env}"
    shape, want = replace(policy.cfg, prior=0.0), replace(cfg.net, prior=0.0)
    return "" if shape == want else f"its network is {policy.cfg}, this training's {cfg.net}"
