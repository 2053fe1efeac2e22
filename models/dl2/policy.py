"""`DL2Policy`: a trained DL2 network as an `AllocationPolicy` the simulator can run.

Per decision, repeated inferences through an `AllocationBuilder`: encode the visible jobs
(tracelib.envs.observation), mask invalid actions, take the most likely valid action (or
sample one with the policy's own generator), apply it, update the observation row it
changed, until the network says stop or nothing more can be added (DL2 section 4.1). More
visible jobs than the window J are scheduled in batches of J by arrival, each batch taking
what the previous left (DL2 section 6.4, "Concurrent job number").

    policy = DL2Policy(net)                            # greedy
    simulate(jobs, Scheduler(policy, LoadBalancing()), sim)
    policy.save("dl2.pt", meta={...}); load_policy("dl2.pt", sha256=...)
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from models.checkpoints import Checkpoint, CheckpointError, load_checkpoint, save_checkpoint
from models.dl2.config import SYSTEM, DL2NetConfig, from_dict, to_dict
from models.dl2.networks import (
    PolicyNet,
    ValueNet,
    bundle_mask,
    choose_masked,
    fast_policy,
    needy_rows,
)
from models.heuristics.registry import PLACEMENTS
from tracelib.envs.observation import AllocationActions, encode_allocation, refresh_allocation_row
from tracelib.sim.builder import (
    Action,
    AllocationBuilder,
    any_task_fits,
    kinds_after,
    kinds_full,
    last_of_kinds,
)
from tracelib.sim.config import SimConfig
from tracelib.sim.engine import SimResult, Simulator
from tracelib.sim.jobs import JobSpec
from tracelib.sim.policy import AllocationPolicy, Scheduler
from tracelib.sim.snapshot import Allocation, Snapshot

_MAX_MOVES = 8192
"""First-layer changes `DL2Policy` keeps (1 KB each with 256 units) before starting afresh."""
_TASKS = {Action.WORKER: (1, 0), Action.PS: (0, 1), Action.BOTH: (1, 1)}
_KIND_TASKS = tuple(_TASKS[kind] for kind in Action)
"""Workers and PSs an action of each kind adds, indexed by `Action` (`AllocationBuilder.step`)."""


@functools.cache
def _split(actions: AllocationActions) -> tuple[tuple[int, int, int, int], ...]:
    """(row, kind, workers, PSs) of each action but stop."""
    return tuple(
        (row, int(kind), *_KIND_TASKS[kind])
        for row, kind in map(actions.decode, range(actions.stop))
    )


class _Steps:
    """One decision's network state, updated per action from the first layer's change.

    An action changes three inputs of its job's row (dominant_share, workers, ps) by
    amounts that depend only on the row, the job's shape and its counts before, so the
    first layer's change is kept in `DL2Policy._moves` across decisions (once seen, the
    row's inputs need not even be brought up to date). A head supplies `pre` (the first
    layer's pre-activation it keeps), `weights` (per row, the first layer's weights of
    those three inputs) and `after` (apply the change)."""

    def __init__(
        self, policy: DL2Policy, builder: AllocationBuilder, obs: np.ndarray, weights: list
    ) -> None:
        cfg = policy.cfg
        base = len(cfg.models) + 3  # dominant_share, workers, ps: what an action changes
        self.builder, self.obs, self.weights = builder, obs, weights
        n_rows = len(weights)
        moves, shapes = policy._moves, policy._shapes
        if len(moves) > _MAX_MOVES or len(shapes) > _MAX_MOVES:
            moves.clear()  # together: a move's key holds its shape's number
            shapes.clear()
        self.moves = moves
        self.keys = [
            shapes.setdefault((row, *builder.shape(row)), len(shapes)) for row in range(n_rows)
        ]
        # A row's inputs in `obs` are brought up to date only when a move is computed:
        # `stale` rows moved through `_moves` since.
        self.stale = [False] * n_rows
        self.old = np.empty(3, dtype=np.float32)  # a row's (dominant_share, workers, ps) before
        self.delta = np.empty(3, dtype=np.float32)  # ... and their change
        self.segs = [obs[row, base : base + 3] for row in range(n_rows)]  # views
        self.key: tuple[int, int, int, int] | None = None
        self.move: np.ndarray | None = None

    def before(self, row: int, kind: int) -> None:
        """Action `kind` on `row` is about to be tried."""
        self.key = (self.keys[row], self.builder.workers[row], self.builder.ps[row], kind)
        self.move = self.moves.get(self.key)
        if self.move is None:
            if self.stale[row]:
                refresh_allocation_row(self.obs, self.builder, row)
                self.stale[row] = False
            self.old[:] = self.segs[row]

    def _change(self, row: int) -> np.ndarray:
        """The first layer's change of the action `before` announced, now applied."""
        move = self.move
        if move is None:
            refresh_allocation_row(self.obs, self.builder, row)
            np.subtract(self.segs[row], self.old, out=self.delta)
            # (H1,): what `fast.changed` adds (the same product, bit for bit)
            move = self.moves[self.key] = self.delta @ self.weights[row]
        else:
            self.stale[row] = True
        return move


class _FlatSteps(_Steps):
    """A flat network (`FastPolicy`): one pre-activation of the whole observation."""

    def __init__(self, policy: DL2Policy, builder: AllocationBuilder, obs: np.ndarray) -> None:
        fast, width = policy.fast, policy.cfg.n_features
        base = len(policy.cfg.models) + 3
        n_rows = min(len(builder.jobs), len(obs))
        weights = [fast.inputs(slice(at, at + 3)) for at in range(base, n_rows * width, width)]
        super().__init__(policy, builder, obs, weights)
        self.pre = fast.start(obs.reshape(-1))  # (H1,)
        self.masked_bias = fast.masked_bias
        bound, pre = fast.bound_logits(), self.pre
        self.logits = lambda bias: bound(pre, bias)

    def after(self, row: int) -> None:
        """The action `before` announced was applied."""
        self.pre += self._change(row)


class _RowSteps(_Steps):
    """A rows-head network (`FastRows`): one pre-activation per row; an action reruns the
    rest of its row's network."""

    def __init__(self, policy: DL2Policy, builder: AllocationBuilder, obs: np.ndarray) -> None:
        fast = self.fast = policy.fast
        base = len(policy.cfg.models) + 3
        n_rows = min(len(builder.jobs), len(obs))
        super().__init__(policy, builder, obs, [fast.w0[base : base + 3]] * n_rows)
        self.pre = fast.begin(obs)  # (J, H0)
        self.logits = fast.logits
        self.masked_bias = fast.masked_bias
        self.set_row = fast.bound_set_row_pre()

    def after(self, row: int) -> None:
        """The action `before` announced was applied."""
        pre = self.pre[row]
        pre += self._change(row)
        self.set_row(row, pre)


class DL2Policy:
    """Greedy (default) or sampled masked inferences of a DL2 policy network."""

    interval_s: float | None = None
    trigger: str = "interval"
    uses_oracle: bool = False
    reads_history: bool = False
    """Decides from the observation (`encode_allocation`), which shows no job history."""

    def __init__(
        self,
        net: PolicyNet,
        *,
        name: str = SYSTEM,
        greedy: bool = True,
        seed: int = 0,
        value_net: ValueNet | None = None,
        system: str = SYSTEM,
        train_config: Mapping[str, Any] | None = None,
    ) -> None:
        self.net = net
        self.cfg: DL2NetConfig = net.cfg
        self.interval_s = self.cfg.interval_s  # decides when it was trained to
        self.trigger = self.cfg.trigger
        self.name = name
        self.greedy = greedy
        self.value_net = value_net
        self.system = system
        self.train_config = dict(train_config or {})
        """How the policy was trained (stage config), saved with the checkpoint."""
        self._rng = np.random.default_rng(seed)
        self._models_ok: tuple[int, bool] | None = None
        self.inferences = 0
        """Network inferences of the last `allocate` call."""
        self.refresh()

    def refresh(self) -> None:
        """Re-read the network's weights (after training changed them)."""
        self.fast = fast_policy(self.net)
        # An action changes three inputs of its job's row, by amounts that depend only on
        # the row, the job's shape (`AllocationBuilder.shape`) and its counts before: the
        # first layer's change is kept, per (row and shape, workers, PSs, kind), across
        # decisions (a job keeps its row from slot to slot, and the same steps recur).
        self._shapes: dict[tuple, int] = {}
        self._moves: dict[tuple[int, int, int, int], np.ndarray] = {}

    # -- AllocationPolicy ------------------------------------------------------------------

    def allocate(self, snap: Snapshot) -> Allocation:
        """Workers/PSs per visible job, J jobs at a time."""
        self._check_catalogue(snap)
        window = self.cfg.window
        counts: dict[int, tuple[int, int]] = {}
        pool = None
        # Task shapes (demand, GPU types) that fit no server of `pool` any more: the pool
        # only shrinks within a decision, so they never fit again.
        full: set[tuple] = set()
        self.inferences = 0
        rest_asked = False  # whether the jobs after a skipped batch were asked of this pool
        last_of: dict[tuple, int] | None = None  # job kind -> its last job's index
        for start in range(0, len(snap.jobs), window):
            batch = snap.jobs[start : start + window]
            if pool is not None and not any_task_fits(pool, batch, full):
                # Every action but stop is invalid: `fill` would stop at once, with no
                # inference and no draw. Once the cluster is full (most batches of a long
                # queue) this skips building, encoding and the network's first pass; the
                # batch's jobs get nothing, which `Allocation.of` would drop if listed.
                if not rest_asked:
                    # Nothing changes the pool until a batch is filled: if no job after
                    # this batch can take a task either (`kinds_full`, asked of the
                    # kinds of the jobs after it), every later batch is skipped.
                    rest_asked = True
                    if last_of is None:
                        last_of = last_of_kinds(snap.jobs)
                    if kinds_full(pool, kinds_after(last_of, start + window), full):
                        break
                continue
            # this batch takes what the earlier ones left
            builder = AllocationBuilder(snap, batch, pool=pool)
            self.inferences += self.fill(builder)
            pool = builder.pool
            rest_asked = False
            counts.update(builder.allocation().counts)
        return Allocation.of(counts)

    def fill(self, builder: AllocationBuilder) -> int:
        """Run inferences on `builder` until stop or nothing fits; returns the count.

        With `bundle_first`, the valid actions are first only the pairs of the jobs without
        one (`networks.policy_mask`). The encoder's mask is recomputed only when an action
        turns out infeasible: a step only uses resources, so the previous mask (with the
        acted job's caps updated) allows every valid action and maybe a few that no longer
        fit. The chosen action is tried; if it fails nothing changed, the exact mask is
        computed and the choice made again from the same state. Greedy, this is the exact
        masked argmax; sampled, the exact masked distribution (rejection sampling). A
        single valid action (the last job waiting for its pair) is taken without an
        inference: greedy, it is the argmax; sampled, the one `rng` draw is still made, so
        the stream and every later decision stay the same.

        Hot loop (hundreds of inferences per decision at 500 servers): the mask is a bias
        added to the logits (-inf at invalid actions), and what the network recomputes
        after an action is the head's (`_FlatSteps`: the first layer's change, from
        `_moves` once seen; `_RowSteps`: the acted row); every number is the same as
        encoding and masking afresh and updating the network from the changed inputs."""
        cfg = self.cfg
        obs_cfg = cfg.obs
        actions = cfg.actions
        stop, both = actions.stop, actions.add_both
        obs = encode_allocation(builder, obs_cfg)  # (J, F) float32
        steps_of = _RowSteps if cfg.head == "rows" else _FlatSteps
        net = steps_of(self, builder, obs)
        rng = None if self.greedy else self._rng
        mask = actions.mask(builder)  # (3J + 1,) bool
        exact = True
        # bundle_first: first a worker+PS pair for every job that fits one; `needy` holds
        # those rows until they get it (or their pair no longer fits).
        needy = set(needy_rows(builder, mask, cfg.window)) if cfg.bundle_first else set()
        workers_of, ps_of = builder.workers, builder.ps
        caps = [job.max_workers for job in builder.jobs]
        minus_inf = np.float32(-np.inf)
        logits, before, after = net.logits, net.before, net.after
        add = builder.add
        # Per action: its row, kind and the workers and PSs it adds, one list read a step
        # instead of a divmod and a table lookup.
        split = _split(actions)
        steps = 0
        while True:
            if needy:
                valid = bundle_mask(mask, sorted(needy), actions)
                valid[-1] = False
            else:
                valid = mask
            n_valid = np.count_nonzero(valid)
            if not n_valid:
                if exact:
                    if needy:  # no needy pair fits any more: go on without the rule
                        needy.clear()
                        continue
                    return steps
                mask, exact = actions.mask(builder), True
                needy = {i for i in needy if mask[both(i)]}
                continue
            if not needy and n_valid == valid[-1]:
                return steps  # only stop is left (exact or not, nothing else is worth a try)
            bias = net.masked_bias(valid)  # (3J + 1,) float32, -inf where invalid
            forced = int(valid.argmax()) if n_valid == 1 else -1
            while True:  # inferences while `valid` changes only by the acted job's caps
                if forced < 0:
                    z = logits(bias)  # (3J + 1,) buffer, masked
                    steps += 1
                    action = int(z.argmax()) if rng is None else choose_masked(z, rng)
                    if action == stop:
                        return steps
                else:
                    action = forced
                    if rng is not None:
                        rng.random()  # the draw `choose_masked` makes, whatever the logits
                row, kind, n_workers, n_ps = split[action]
                before(row, kind)
                if not add(row, n_workers, n_ps):
                    # infeasible under a stale mask: nothing changed; refresh and infer again
                    # (same state, same logits: greedy gives the exact masked argmax,
                    # sampling the exact masked distribution)
                    mask, exact = actions.mask(builder), True
                    needy = {i for i in needy if mask[both(i)]}
                    if forced < 0:
                        steps -= 1
                    break
                exact = False
                cap = caps[row]
                full = workers_of[row] >= cap or ps_of[row] >= cap
                if full:
                    cols = [both(row)]
                    if workers_of[row] >= cap:
                        cols.append(actions.add_worker(row))
                    if ps_of[row] >= cap:
                        cols.append(actions.add_ps(row))
                    mask[cols] = False
                    bias[cols] = minus_inf  # `valid` is `mask` or a subset of it
                after(row)
                if needy:
                    # The bundle mask loses the acted job's pair: the same bias as rebuilt
                    # from `needy`, unless one job or none is left (a forced pair, or the
                    # encoder's mask with stop): the outer loop decides those.
                    needy.discard(row)
                    if len(needy) <= 1:
                        break
                    bias[both(row)] = minus_inf
                if full and np.count_nonzero(mask) == mask[-1]:
                    break  # only stop is left: the outer loop ends

    def _check_catalogue(self, snap: Snapshot) -> None:
        key = id(snap.catalogue)
        if self._models_ok is None or self._models_ok[0] != key:
            ordered = tuple(jt.model for jt in sorted(snap.catalogue, key=lambda j: j.type_index))
            self._models_ok = (key, ordered == self.cfg.models)
            if not self._models_ok[1]:
                raise ValueError(
                    f"policy {self.name} was trained for models {self.cfg.models}, the "
                    f"simulator's catalogue has {ordered}"
                )

    # -- checkpoints -----------------------------------------------------------------------

    def checkpoint_config(self) -> dict[str, Any]:
        """What the checkpoint and the registry record: network shape and training config."""
        return {"net": to_dict(self.cfg), "train": self.train_config}

    def save(self, path: str | os.PathLike[str], meta: Mapping[str, Any] | None = None) -> str:
        """Write a weights-only checkpoint (config inside); returns its sha256."""
        state = {"policy": self.net.state_dict()}
        if self.value_net is not None:
            state["value"] = self.value_net.state_dict()
        return save_checkpoint(
            path, system=self.system, config=self.checkpoint_config(), state=state, meta=meta
        )


def policy_from_checkpoint(ckpt: Checkpoint, *, name: str | None = None) -> DL2Policy:
    """Rebuild a `DL2Policy` from a loaded checkpoint; CheckpointError if the weights do not
    fit the network its config describes."""
    try:
        cfg = from_dict(DL2NetConfig, ckpt.config["net"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"checkpoint config is not a DL2 network config: {exc}") from None
    net = PolicyNet(cfg)
    value = ValueNet(cfg) if "value" in ckpt.state else None
    try:
        net.load_state_dict(ckpt.state["policy"], strict=True)
        if value is not None:
            value.load_state_dict(ckpt.state["value"], strict=True)
    except (KeyError, RuntimeError) as exc:
        first = str(exc).strip().splitlines()[0]
        raise CheckpointError(
            f"checkpoint weights do not match its config (window {cfg.window}, "
            f"{len(cfg.models)} models, hidden {cfg.hidden}): {first}"
        ) from None
    return DL2Policy(
        net,
        name=name or ckpt.system,
        value_net=value,
        system=ckpt.system,
        train_config=ckpt.config.get("train", {}),
    )


def load_policy(
    path: str | os.PathLike[str],
    *,
    sha256: str | None = None,
    config: Mapping[str, Any] | None = None,
    name: str | None = None,
) -> DL2Policy:
    """Load a DL2 checkpoint (weights_only=True), verifying its sha256 and config when given
    (from the `policies` registry) and that the weights fit the config."""
    ckpt = load_checkpoint(path, sha256=sha256, config=config)
    return policy_from_checkpoint(ckpt, name=name)


# -- evaluation ----------------------------------------------------------------------------


def workload_seeds(root: int, n: int) -> list[int]:
    """Simulator seed of each of n workloads: one SeedSequence child per workload."""
    return [int(s.generate_state(1)[0]) for s in np.random.SeedSequence(root).spawn(n)]


def run_workloads(
    policy: AllocationPolicy,
    workloads: Sequence[Sequence[JobSpec]],
    sim: SimConfig,
    *,
    seed: int = 0,
    placement: str = "load-balancing",
) -> list[SimResult]:
    """Simulate each workload under `policy` + `placement`; workload k gets simulator seed
    `workload_seeds(seed, n)[k]` (the recorder's seeds, so teacher and student see the same
    randomness)."""
    scheduler = Scheduler(policy, PLACEMENTS.create(placement))
    seeds = workload_seeds(seed, len(workloads))
    return [
        Simulator(jobs, scheduler, replace(sim, seed=s)).run()
        for jobs, s in zip(workloads, seeds, strict=True)
    ]


def average_jct(
    policy: AllocationPolicy,
    workloads: Sequence[Sequence[JobSpec]],
    sim: SimConfig,
    **options: Any,
) -> float:
    """Mean over workloads of the average JCT (seconds) of `run_workloads` with the same
    arguments (`options`: its keyword options, `seed` and `placement`)."""
    results = run_workloads(policy, workloads, sim, **options)
    return float(np.mean([r.avg_jct_s for r in results]))


def clone_net(net: torch.nn.Module) -> torch.nn.Module:
    """A detached copy of a network (same config, copied weights)."""
    copy = type(net)(net.cfg)
    copy.load_state_dict({k: v.detach().clone() for k, v in net.state_dict().items()})
    return copy
