"""Configuration of DL2 (Peng et al.): one frozen dataclass per stage, field docstrings as help.

Defaults are the paper's hyper-parameters (section 6.2, restored by the reading notes):
Adam with learning rate 0.005 (supervised) and 0.0001 (RL), minibatch 256, discount 0.9,
exploration epsilon 0.4, entropy weight 0.1, replay buffer 8192, two hidden layers of 256.
Budgets (epochs, updates, wall seconds) are ours: small enough to run in minutes here.

The defaults `schedlab run` trains with (`DL2_NET`, `DL2_WARMUP`, `DL2_FINETUNE`) and the
variants it trains beside DL2 (`VARIANTS`) are here too, beside the configs they fill.

Every config turns into plain JSON (`to_dict`) and back (`from_dict`), so a checkpoint and
the `policies` table carry the exact configuration a policy was trained with.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from models.ablations import ablation_system
from tracelib.catalogue import DL2_CATALOGUE, JobType
from tracelib.envs.observation import ALLOCATION_SCALARS, AllocationActions, AllocationObsConfig
from tracelib.sim.config import TRIGGERS, ClusterConfig, SimConfig, SpeedConfig

SYSTEM = "dl2"
"""`policies.system` of DL2's learned policies (warm-up and fine-tuned); an ablation's is
this plus what it goes without (`FinetuneConfig.system`), e.g. "dl2-without-replay"."""
OFFLINE_SYSTEM = "offline-rl"
"""`policies.system` of the OfflineRL baseline (same RL, analytical-model simulator)."""


PUBLISHED_DEVIATIONS: dict[str, tuple[Any, Any]] = {
    "teacher": ("drf", "searched"),
    "net.interval_s": (None, 600.0),
    "finetune.exploration": (True, False),
    "finetune.clip": (None, 0.2),
    "finetune.kl_init": (0.0, 1.0),
    "net.head": ("flat", "rows"),
    "net.hidden": ((256, 256), (64, 64)),
    "net.trigger": ("interval", "events"),
    "algorithm": ("actor-critic", "grouped-ppo"),
}
"""Where the default run's DL2 departs from the paper, each measured (docs/dl2.md): a
`DL2StageConfig` field, dotted into the config it nests ("finetune.clip") -> (the paper's
value, the default). `as_published()` takes the first of each."""


def dl2_sim(n_servers: int = 32, window: int = 20, seed: int = 0, **speed: Any) -> SimConfig:
    """The "full" simulator of our small DL2-like setting: 20-minute slots, `n_servers`
    testbed servers, the first `window` jobs visible, locality and interference on
    (SpeedConfig defaults; pass speed_variation=..., slot_noise=... for DL2 Fig. 4/13)."""
    return SimConfig(
        cluster=ClusterConfig(n_servers=n_servers),
        speed=SpeedConfig(**speed),
        window=window,
        seed=seed,
    )


def analytical(sim: SimConfig) -> SimConfig:
    """The simulator OfflineRL trains in: only the analytical (Optimus-form) speed model, no
    locality gain, no interference, no speed variation, noise or epoch-estimate error."""
    speed = replace(
        sim.speed,
        truth="analytical",
        locality=False,
        interference_scale=0.0,
        speed_variation=0.0,
        slot_noise=0.0,
        epoch_error=0.0,
    )
    return replace(sim, speed=speed)


Head = Literal["flat", "rows"]
"""How a DL2 network reads the job rows (`DL2NetConfig.head`)."""
HEADS = typing.get_args(Head)
"""`DL2NetConfig.head` values."""


@dataclass(frozen=True)
class DL2NetConfig:
    """Shape of DL2's policy and value networks (nanoGPT-style: everything the network
    needs to be rebuilt, and nothing else)."""

    window: int = 20
    """J: jobs in the observation; 3J + 1 actions (DL2: 20 small setting, 40 large)."""
    models: tuple[str, ...] = tuple(jt.model for jt in DL2_CATALOGUE)
    """Job types of the one-hot block, in catalogue `type_index` order (L = len)."""
    hidden: tuple[int, ...] = (256, 256)
    """Hidden layer widths (DL2: 2 hidden layers of 256, ReLU; of the shared row network
    with `head="rows"`)."""
    head: Head = "flat"
    """How the network reads the J job rows. "flat" (DL2): the rows as one vector through
    the hidden layers to the 3J + 1 logits. "rows" (not in the paper): one network shared
    by the rows, each row's F inputs through the hidden layers to that row's three logits,
    stop from the mean of the rows' last hidden units (the value network: that mean to one
    output). What it learns of a job holds in every row, and an action changes one row's
    logits only. Measured on Optimus' recordings: the flat network hands out as much as its
    teacher to the wrong jobs (docs/dl2.md)."""
    trigger: Literal["interval", "events"] = "interval"
    """When the policy decides: "interval" (every `interval_s`) or "events" (at every
    arrival and completion, the simulator's event trigger; not in the paper)."""
    slots_scale: float = 50.0
    """Observation: slots_run saturates at this many slots."""
    epochs_scale: float = 10_000.0
    """Observation: remaining epochs saturate at this many (log scale)."""
    interval_s: float | None = None
    """Seconds between the policy's decisions (None: every slot of the simulator, DL2's 20
    minutes). The default run's DL2 decides every 600 s, as Optimus does (a deviation,
    `DL2StageConfig.net`)."""
    bundle_first: bool = True
    """Each slot starts by giving every visible job that can take one a worker+PS pair:
    until then the only valid actions are those pairs (the network picks the order) and
    stop is invalid. The authors' code hands out these bundles before the inferences
    (ASSIGN_BUNDLE, "to avoid starvation"). Without it a policy that learned to stop, or to
    give a job only workers, can leave a job with nothing trainable, and a lone job then
    never finishes. DRF's decisions satisfy it (its first round gives every job a pair);
    FIFO's and SRTF's do not (they fill one job at a time): record them with False."""

    def __post_init__(self) -> None:
        if self.window < 1 or not self.models or any(h < 1 for h in self.hidden):
            raise ValueError("window, models and hidden widths must be positive")
        if self.head not in HEADS:
            raise ValueError(f"head must be one of {HEADS}, got {self.head!r}")
        if self.head == "rows" and not self.hidden:
            raise ValueError("a rows head needs at least one hidden layer")
        if self.trigger not in TRIGGERS:
            raise ValueError(f"trigger must be one of {TRIGGERS}, got {self.trigger!r}")

    @classmethod
    def for_catalogue(cls, catalogue: tuple[JobType, ...] = DL2_CATALOGUE, **kw) -> DL2NetConfig:
        """Config whose one-hot block follows `catalogue`."""
        models = tuple(jt.model for jt in sorted(catalogue, key=lambda jt: jt.type_index))
        return cls(models=models, **kw)

    @property
    def obs(self) -> AllocationObsConfig:
        """The encoder settings (tracelib.envs.observation) these networks read."""
        return AllocationObsConfig(self.window, self.slots_scale, self.epochs_scale)

    @property
    def n_features(self) -> int:
        """Columns per job row: L one-hot + the named scalars."""
        return len(self.models) + len(ALLOCATION_SCALARS)

    @property
    def input_dim(self) -> int:
        """J * (L + 7): the flattened observation."""
        return self.window * self.n_features

    @property
    def actions(self) -> AllocationActions:
        """The layout of the 3J + 1 actions."""
        return AllocationActions(self.window)

    @property
    def n_actions(self) -> int:
        """3J + 1."""
        return self.actions.n


@dataclass(frozen=True)
class RecorderConfig:
    """Decision logs: a heuristic runs over workloads; its decisions become action sequences."""

    teacher: str = "drf"
    """Allocation policy recorded (models.heuristics registry: drf, fifo, srtf, optimus,
    ...). It decides every `net.interval_s` (the student's interval), not at its own."""
    placement: str = "load-balancing"
    """Placement policy the teacher runs with (DL2: the cluster's load balancing)."""
    order: Literal["auto", "share", "arrival", "remaining", "teacher", "rows"] = "auto"
    """Order in which the teacher's allocation is rebuilt action by action: "share" (lowest
    dominant share first, DRF's own order), "arrival" (each job filled in arrival order,
    FIFO's), "remaining" (shortest estimated remaining time first, SRTF's), "teacher" (the
    additions in the order the teacher made them, for a teacher that gives them,
    `allocate_in_order`: Optimus' pairs by arrival, then its tasks by marginal gain), "rows"
    (one pair per job by arrival, then job by job the other pairs, then job by job the
    single workers and PSs), or
    "auto" (drf -> share, fifo -> arrival, srtf -> remaining, optimus and searched -> rows,
    others share).
    Optimus in its own order is imitated badly (measured: 42% of the actions, its
    allocations 14% slower on validation, workers given too few); job by job, 85% and 7%."""
    net: DL2NetConfig = field(default_factory=DL2NetConfig)
    """Observation shape and scaling (its window is the simulator's)."""
    sim: SimConfig = field(default_factory=dl2_sim)
    """Simulator of the recorded runs; its window is set to `net.window`."""
    seed: int = 0
    """Root seed: workload k runs with simulator seed SeedSequence(seed).spawn(n)[k]."""

    def resolved_order(self) -> str:
        """`order` with "auto" replaced by the teacher's own order."""
        if self.order != "auto":
            return self.order
        return {
            "drf": "share",
            "fifo": "arrival",
            "srtf": "remaining",
            "optimus": "rows",
            "optimus-oracle": "rows",
            "searched": "rows",
        }.get(self.teacher, "share")

    def __post_init__(self) -> None:
        if self.order not in ("auto", "share", "arrival", "remaining", "teacher", "rows"):
            raise ValueError(f"unknown order {self.order!r}")


@dataclass(frozen=True)
class WarmupConfig:
    """Supervised warm-up: cross-entropy against the recorded decisions (DL2 section 4.2)."""

    hidden: tuple[int, ...] = (256, 256)
    """Hidden layer widths of the policy network."""
    head: str = "flat"
    """The policy network's head (`DL2NetConfig.head`; DL2: flat)."""
    lr: float = 0.005
    """Adam learning rate (DL2: 0.005 for supervised learning)."""
    batch_size: int = 256
    """Minibatch size (DL2: 256)."""
    stop_smoothing: float = 0.01
    """Share of each recorded action's target moved to stop, where stop is valid (0: the
    paper's plain cross-entropy). DRF never stops while anything fits, so plain
    cross-entropy drives stop's log-probability to about -50, out of reach of RL
    fine-tuning (which must learn to stop adding where more workers no longer help); with
    0.01 it stays near log(0.01) while the other actions the teacher never takes stay
    suppressed."""
    max_epochs: int = 200
    """Passes over the training decisions at most (DL2: "hundreds of times")."""
    patience: int = 8
    """Stop once the validation loss has not improved for this many epochs (best kept)."""
    min_delta: float = 1e-4
    """Improvement in validation loss that counts."""
    val_fraction: float = 0.2
    """Share of the recorded workloads held out for the validation loss when no separate
    validation decisions are given (whole workloads, never single decisions)."""
    max_wall_s: float | None = None
    """Stop after this many seconds (None: no limit)."""
    seed: int = 0
    """Seed of initialization, shuffling and the held-out split."""
    progress: bool = False
    """Show a rich progress bar."""

    def __post_init__(self) -> None:
        if self.lr <= 0 or self.batch_size < 1 or self.max_epochs < 1 or self.patience < 1:
            raise ValueError("lr, batch_size, max_epochs and patience must be positive")
        if not 0.0 <= self.val_fraction < 1.0:
            raise ValueError("val_fraction must be in [0, 1)")
        if not 0.0 <= self.stop_smoothing < 1.0:
            raise ValueError("stop_smoothing must be in [0, 1)")


@dataclass(frozen=True)
class FinetuneConfig:
    """Online RL: actor-critic with job-aware exploration and experience replay (DL2 4.3).

    The three switches reproduce DL2 Table 2's ablations; `offline` makes OfflineRL."""

    net: DL2NetConfig = field(default_factory=DL2NetConfig)
    """Networks when training from scratch (`init=None`); otherwise the initial policy's."""
    sim: SimConfig = field(default_factory=dl2_sim)
    """Simulator of training and validation episodes (window set to the network's)."""
    offline: bool = False
    """OfflineRL: train and validate in `analytical(sim)` (the Optimus-form speed model
    only); evaluate the result in the full simulator like any policy."""
    lr: float = 1e-4
    """Adam learning rate of both networks (DL2: 0.0001)."""
    batch_size: int = 256
    """Minibatch sampled from the replay buffer per update (DL2: 256)."""
    gamma: float = 0.9
    """Discount per time slot (DL2: 0.9)."""
    entropy_weight: float = 0.1
    """Entropy bonus (DL2: 0.1), applied as the authors' code does to the mean over the
    3J + 1 actions of -p log p, i.e. to the entropy / (3J + 1)."""
    credit: Literal["slot", "inference"] = "slot"
    """Advantage of each inference. "slot" (DL2: every sample of a slot carries the slot's
    reward): r + gamma V(first state of the next slot) - V(state). "inference": its TD
    error in the per-inference MDP (no reward or discount between a slot's inferences, so
    V(state after it) - V(state); the slot's last one closes the slot), sharper credit in
    principle, but the critic's differences between partial allocations are mostly
    artifacts and the policy exploits them (measured: it collapses). Both train V on
    r + gamma V(next slot)."""
    epsilon: float = 0.4
    """Job-aware exploration: in a poor state, take the corrective action with this
    probability (DL2: 0.4)."""
    ratio_threshold: float = 10.0
    """Poor state (iii): workers/PSs or PSs/workers above this (DL2: 10)."""
    stop_injection: float = 0.1
    """Part of job-aware exploration, from the authors' public code rather than the paper's
    text (pengyanghua/DL2 rl_env.py, INJECT_SAMPLES): once every visible job holds more
    than k workers (k drawn per slot, uniform in 1..15), try stop with this probability per
    inference. Without it a policy warmed up on DRF (which never stops while anything fits,
    so stop ends with log-probability near -50) cannot learn to stop. 0 disables."""
    replay_size: int = 8192
    """Experience replay buffer, samples (DL2: 8192)."""
    value_net: bool = True
    """Actor-critic; False: advantage = reward - exponential moving average of rewards
    (DL2 Table 2 "without actor-critic")."""
    exploration: bool = True
    """Job-aware epsilon exploration (False: DL2 Table 2 "without exploration"; the entropy
    bonus stays)."""
    replay: bool = True
    """Experience replay (False: each update uses only the slot just played, DL2 Table 2
    "without experience replay")."""
    baseline_decay: float = 0.99
    """Decay of the moving-average reward baseline when `value_net` is off."""
    critic_warmup: int = 200
    """Updates that train only the value network first (the policy stays as given): a
    fresh critic's advantages are biased (V starts at 0, returns are ~10), and a biased
    advantage boosts whatever exploration injected. The authors' code has the switch
    (STEP_TRAIN_CRITIC_NET); the paper does not say."""
    normalize_advantage: bool = True
    """Standardize advantages within each minibatch (mean 0, std 1): standard actor-critic
    practice, not stated in the paper; keeps the policy step size independent of the
    reward scale and removes what bias the critic still has."""
    clip: float | None = None
    """PPO-style clipped policy update (not in the paper): the ratio of the policy's
    probability of a replayed action to the acting policy's is clipped to 1 +- clip, so
    no update moves a sample's probability far from where it was when it was played (with
    replay, the samples come from older policies). None: the paper's plain policy gradient."""
    kl_init: float = 0.0
    """Weight of KL(initial policy || policy) on each minibatch's states (not in the paper):
    keeps fine-tuning near the warm-up, which it otherwise leaves for a worse policy within
    a few hundred updates. 0: none."""
    max_updates: int = 3000
    """Network updates (one per time slot, DL2's "step") at most."""
    max_wall_s: float | None = None
    """Stop after this many seconds (None: no limit); validation still runs at the end."""
    val_every: int = 250
    """Validate (greedy policy, average JCT on the validation workloads) every so many
    updates; the best validated weights are kept."""
    seed: int = 0
    """Root seed: initialization, episode choice, action sampling, exploration, replay."""
    progress: bool = True
    """Show a rich progress bar."""
    variant: str | None = None
    """`policies.system` of the result when given (the pipeline's variant name: its DL2
    trains without exploration by default and is still "dl2"); None: named by the
    switches (`system`)."""

    def __post_init__(self) -> None:
        if not 0.0 < self.gamma < 1.0 or not 0.0 <= self.epsilon <= 1.0:
            raise ValueError("gamma must be in (0, 1) and epsilon in [0, 1]")
        if self.credit not in ("inference", "slot"):
            raise ValueError(f"credit must be 'inference' or 'slot', got {self.credit!r}")
        if not 0.0 <= self.stop_injection <= 1.0:
            raise ValueError("stop_injection must be in [0, 1]")
        if self.lr <= 0 or self.batch_size < 1 or self.replay_size < self.batch_size:
            raise ValueError("need lr > 0, batch_size >= 1 and replay_size >= batch_size")
        if self.max_updates < 1 or self.val_every < 1:
            raise ValueError("max_updates and val_every must be positive")
        if (self.clip is not None and self.clip <= 0) or self.kl_init < 0:
            raise ValueError("clip must be positive (or None) and kl_init >= 0")

    @property
    def system(self) -> str:
        """`policies.system` of the result: "offline-rl", "dl2", or for a Table 2 ablation
        "dl2-without-" + what it drops (critic, exploration, replay, joined by "-"); or
        `variant` when given."""
        if self.variant is not None:
            return self.variant
        if self.offline:
            return OFFLINE_SYSTEM
        return ablation_system(
            SYSTEM, critic=self.value_net, exploration=self.exploration, replay=self.replay
        )

    def train_sim(self, window: int) -> SimConfig:
        """The simulator episodes run in (analytical for OfflineRL), window `window`."""
        sim = analytical(self.sim) if self.offline else self.sim
        return replace(sim, window=window)


CREDITS = ("episode", "job")
"""`GroupedConfig.credit` values."""
ALGORITHM = "grouped-ppo"
"""`DL2StageConfig.algorithm` / `train_config.algorithm` of this trainer."""


@dataclass(frozen=True)
class GroupedConfig:
    """PPO over groups of rollouts of one sequence (`models.dl2.grouped`, not in the paper)."""

    net: DL2NetConfig = field(default_factory=DL2NetConfig)
    """Networks when training from scratch (`init=None`); otherwise the initial policy's."""
    sim: SimConfig = field(default_factory=dl2_sim)
    """Simulator of rollouts and validation (window set to the network's)."""
    iterations: int = 24
    """Iterations: one group of rollouts, then the policy's passes over its samples."""
    group_size: int = 8
    """Rollouts of the same sequence and simulator seed per iteration (>= 2: each one's
    baseline is the others' mean)."""
    epochs: int = 2
    """Passes of the policy over an iteration's samples."""
    minibatch: int = 1024
    """Samples per gradient step."""
    lr: float = 3e-4
    """Adam learning rate (measured on two default runs' warm-ups, 48 iterations: 3e-4
    ended 1.017 times Optimus at every event on their test sequences, 1e-4 after 24
    iterations 1.029; docs/dl2.md)."""
    clip: float = 0.2
    """PPO's clip of the probability ratio."""
    kl_init: float = 0.0
    """Weight of KL(initial policy || policy) on each minibatch (0: none)."""
    entropy_weight: float = 0.0
    """Weight of the mean masked entropy (0: none; sampling from a warm-up that imitates a
    teacher to 98% already explores around it)."""
    credit: Literal["episode", "job"] = "episode"
    """Whose time in the system an inference is credited with: "episode", every job's
    (G(t) above); "job", an inference that adds to job j only job j's own time in the
    system after t (stop keeps every job's), each kind's advantages scaled on its own."""
    job_noise: float = 0.0
    """Exploration that sticks to a job: in each rollout, every job draws two offsets
    N(0, job_noise) once, added to its rows' logits of adding a worker (the first), a PS
    (the second) and both (their sum) at every decision of its life, so a rollout tries
    another configuration for the job throughout rather than a step here and there. PPO's
    ratio stays against the policy; each sample's advantage is weighted by min(1, policy /
    sampled probability) (a truncated importance weight, as V-trace's). 0: sample the
    policy as is."""
    val_every: int = 4
    """Validate the greedy policy every so many iterations; the best weights are kept."""
    seed: int = 0
    """Root seed: initialization, sequence and simulator-seed choice, action sampling."""
    variant: str | None = None
    """`policies.system` of the result (None: "dl2")."""

    def __post_init__(self) -> None:
        if self.iterations < 1 or self.group_size < 2 or self.epochs < 1:
            raise ValueError("need iterations >= 1, group_size >= 2 and epochs >= 1")
        if self.minibatch < 1 or self.lr <= 0 or self.clip <= 0 or self.val_every < 1:
            raise ValueError("minibatch, lr, clip and val_every must be positive")
        if self.kl_init < 0 or self.entropy_weight < 0:
            raise ValueError("kl_init and entropy_weight must be >= 0")
        if self.job_noise < 0:
            raise ValueError("job_noise must be >= 0")
        if self.credit not in CREDITS:
            raise ValueError(f"credit must be one of {CREDITS}, not {self.credit!r}")

    @property
    def system(self) -> str:
        return self.variant or "dl2"


# -- what `schedlab run` trains -----------------------------------------------------------

ALGORITHMS = ("actor-critic", ALGORITHM)
"""`DL2StageConfig.algorithm` values."""


DL2_NET = DL2NetConfig(
    hidden=PUBLISHED_DEVIATIONS["net.hidden"][1],
    head=PUBLISHED_DEVIATIONS["net.head"][1],
    trigger=PUBLISHED_DEVIATIONS["net.trigger"][1],
    interval_s=PUBLISHED_DEVIATIONS["net.interval_s"][1],
)
"""`DL2StageConfig.net`'s default: the networks and decisions of the default run."""
DL2_WARMUP = WarmupConfig(max_epochs=40, patience=6)
"""`DL2StageConfig.warmup`'s default."""
DL2_FINETUNE = FinetuneConfig(
    exploration=PUBLISHED_DEVIATIONS["finetune.exploration"][1],
    clip=PUBLISHED_DEVIATIONS["finetune.clip"][1],
    kl_init=PUBLISHED_DEVIATIONS["finetune.kl_init"][1],
    max_updates=3000,
    val_every=150,
    progress=False,
)
"""`DL2StageConfig.finetune`'s default (learning rate: the paper's 0.0001)."""


VARIANTS: dict[str, dict[str, bool]] = {
    "dl2": {},
    "dl2-without-grouped-ppo": {},
    "offline-rl": {"offline": True},
    "dl2-without-critic": {"value_net": False},
    "dl2-without-exploration": {"exploration": False},
    "dl2-without-replay": {"replay": False},
}
"""What DL2's fine-tuning stage trains (`pipelines.systems.dl2.stages.finetune_stage`):
DL2, DL2 by the paper's actor-critic, the OfflineRL baseline (from scratch, in the
analytical simulator) and the paper's Table 2 ablations, by their `policies.system`; the
switches are the actor-critic's (`FinetuneConfig`)."""
SWITCHES = ("offline", "value_net", "exploration", "replay")
"""The actor-critic's switches the variants set (`FinetuneConfig`)."""


def shape_of(net: DL2NetConfig) -> dict[str, Any]:
    """What a policy fine-tuning continues from must share with the network it trains."""
    return {
        "window": net.window,
        "head": net.head,
        "hidden": tuple(net.hidden),
        "trigger": net.trigger,
        "interval_s": net.interval_s,
    }


# -- JSON round trip -----------------------------------------------------------------------


def to_dict(cfg: Any) -> dict[str, Any]:
    """A config dataclass (nested ones included) as plain JSON-able values."""
    return _plain(dataclasses.asdict(cfg))


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def from_dict(cls: type, data: dict[str, Any]) -> Any:
    """Rebuild config `cls` from `to_dict` output; unknown keys raise (a checkpoint written
    by other code must not load silently)."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(f"{cls.__name__} has no fields {unknown}")
    return cls(**{k: _coerce(hints[k], v) for k, v in data.items()})


def _coerce(hint: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return _coerce(args[0], value) if len(args) == 1 else value
    if dataclasses.is_dataclass(hint) and isinstance(value, dict):
        return from_dict(hint, value)
    if origin is tuple:
        args = typing.get_args(hint)
        inner = args[0] if args else Any
        return tuple(_coerce(inner, v) for v in value)
    if hint is float and isinstance(value, int):
        return float(value)
    return value
