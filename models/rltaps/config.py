"""Configuration of RL-TAPS (Ryu et al., CASCON '20): one frozen dataclass per concern.

Defaults are the paper's (section 5.1): 8 machines of 4 GPUs on 4 racks, N = 10 job slots, a
backlog of 60, requests up to 12 GPUs, one hidden layer of 1.5 x the 32 x 11 outputs, Adam
with learning rate 0.001, E = 20 episodes per job sequence, one job arriving per step for 400
steps, T_max = 1000, 50 epochs; 200 training / 200 testing sequences without streaming, 60
fresh ones every 10 epochs (testing: every epoch) with streaming. The paper leaves the
discount and the number of sequences per update B unsaid: we take DeepRM's discount 1 (its
code's `discount = 1`) and B = 10. Those sizes take hours here; the pipeline stage runs a
small budget (`RLTAPS_REINFORCE`, held by `models.rltaps.stage_config.RLTapsStageConfig`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from tracelib.envs.gpu import GpuEnvConfig
from tracelib.envs.gpu_arena import (
    COUNT_FEATURES,
    NULL_FEATURES,
    PAIR_FEATURES,
    ArenaEnvConfig,
)
from tracelib.scenarios.dl2 import DL2_SMALL
from tracelib.sim.config import SimConfig

SYSTEM = "rl-taps"
"""`policies.system` of RL-TAPS trained without streaming (static job sequences)."""
STREAMING_SYSTEM = "rl-taps-streaming"
"""`policies.system` of RL-TAPS trained on streaming job sequences."""
MODES = ("nonstreaming", "streaming")


def system_of(mode: str) -> str:
    """The `policies.system` of a training mode."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    return SYSTEM if mode == "nonstreaming" else STREAMING_SYSTEM


@dataclass(frozen=True)
class RLTapsNetConfig:
    """Shape of the policy network: the state image in, one softmax per GPU out (RL-TAPS
    4.5.1, Fig. 1): input -> one fully connected ReLU layer -> M x (N + 1) logits."""

    n_gpus: int = 32
    """M: GPUs, one softmax each."""
    slots: int = 10
    """N: job slots; each softmax has N + 1 entries (the last is the null slot)."""
    horizon: int = 10
    """Rows of the state image."""
    max_gpus: int = 12
    """Columns of a job slot's image."""
    backlog: int = 60
    """Backlog cells."""
    hidden: int | None = None
    """Hidden units (None: RL-TAPS' ceil(1.5 x M x (N + 1)) = 528)."""

    def __post_init__(self) -> None:
        if min(self.n_gpus, self.slots, self.horizon, self.max_gpus, self.backlog) < 1:
            raise ValueError("n_gpus, slots, horizon, max_gpus and backlog must be positive")
        if self.hidden is not None and self.hidden < 1:
            raise ValueError("hidden must be positive")

    @classmethod
    def for_env(cls, env: GpuEnvConfig, hidden: int | None = None) -> RLTapsNetConfig:
        """The network that reads `env`'s observations."""
        o = env.obs
        return cls(env.topology.n_gpus, o.slots, o.horizon, o.max_gpus, o.backlog, hidden)

    @property
    def n_choices(self) -> int:
        """N + 1: choices per GPU."""
        return self.slots + 1

    @property
    def n_outputs(self) -> int:
        """M x (N + 1) output units."""
        return self.n_gpus * self.n_choices

    @property
    def hidden_units(self) -> int:
        """Hidden units actually used."""
        return self.hidden or math.ceil(1.5 * self.n_outputs)

    @property
    def input_dim(self) -> int:
        """Flattened image: cluster (horizon x M), N job slots (horizon x max_gpus), backlog."""
        return self.horizon * self.n_gpus + self.slots * self.horizon * self.max_gpus + self.backlog


@dataclass(frozen=True)
class ReinforceConfig:
    """REINFORCE with a per-time-step baseline over E episodes of one job sequence
    (RL-TAPS Algorithm 1), without or with streaming job sequences."""

    mode: str = "nonstreaming"
    """"nonstreaming": a static set of training sequences (Algorithm 1); "streaming": a
    fresh set every `refresh_every` epochs and fresh validation sequences every epoch."""
    env: GpuEnvConfig = field(default_factory=lambda: GpuEnvConfig(max_steps=1000))
    """Environment (topology, image, penalties); `max_steps` is T_max (RL-TAPS: 1000)."""
    hidden: int | None = None
    """Hidden units (None: 1.5 x outputs, RL-TAPS 5.1)."""
    n_jobs: int = 400
    """Jobs per sequence, one arriving per step (RL-TAPS: 400)."""
    train_sequences: int = 200
    """J: training sequences (RL-TAPS: 200 without streaming, 60 with)."""
    val_sequences: int = 200
    """Validation (the paper's "testing") sequences per evaluation (RL-TAPS: 200 / 60)."""
    episodes: int = 20
    """E: episodes per sequence for the baseline (RL-TAPS: 20)."""
    batch_sequences: int = 10
    """B: sequences whose gradients make one update (not given in the paper)."""
    epochs: int = 50
    """Passes over the training sequences (RL-TAPS: 50)."""
    refresh_every: int = 10
    """Streaming: new training sequences every so many epochs (RL-TAPS: 10)."""
    lr: float = 0.001
    """Adam learning rate (RL-TAPS: 0.001)."""
    gamma: float = 1.0
    """Discount per step (not in the paper; DeepRM's 1)."""
    teacher: str | None = "sjf"
    """A fresh network first imitates this baseline's decisions on the training sequences
    (`models.rltaps.imitation`), then REINFORCE continues from it; None: from random
    weights, as the paper. A measured deviation (docs/rltaps.md): from random weights a
    budget of minutes leaves the policy as slow as Random."""
    imitation_epochs: int = 30
    """Supervised passes over the teacher's decisions (0: no imitation)."""
    imitation_batch: int = 64
    """Teacher decisions per supervised step."""
    imitation_lr: float = 0.001
    """Adam learning rate of the imitation."""
    keep_best: bool = True
    """Return the weights with the lowest validation mean slowdown (else the last)."""
    max_wall_s: float | None = None
    """Stop after this many seconds (None: no limit); checked between sequences."""
    seed: int = 0
    """Root seed: initialization, sequences, shuffling, action sampling."""

    def __post_init__(self) -> None:
        system_of(self.mode)
        sizes = (self.n_jobs, self.train_sequences, self.val_sequences, self.episodes)
        if min(sizes) < 1 or self.batch_sequences < 1 or self.epochs < 1:
            raise ValueError("sequence counts, episodes, batch and epochs must be positive")
        if self.refresh_every < 1 or self.lr <= 0 or not 0.0 < self.gamma <= 1.0:
            raise ValueError("need refresh_every >= 1, lr > 0 and gamma in (0, 1]")
        if self.imitation_epochs < 0 or self.imitation_batch < 1 or self.imitation_lr <= 0:
            raise ValueError("need imitation_epochs >= 0, imitation_batch >= 1, lr > 0")

    def as_published(self) -> ReinforceConfig:
        """The paper's training: REINFORCE from random weights (no imitation), in its
        scenario without a resume cost."""
        return replace(self, teacher=None, env=replace(self.env, resume_cost_s=0.0))

    @property
    def imitates(self) -> bool:
        """Whether a fresh network imitates the teacher first."""
        return self.teacher is not None and self.imitation_epochs > 0

    @property
    def system(self) -> str:
        """`policies.system` of the trained policy."""
        return system_of(self.mode)

    @property
    def net(self) -> RLTapsNetConfig:
        """The policy network a fresh run trains."""
        return RLTapsNetConfig.for_env(self.env, self.hidden)


# -- the arena: RL-TAPS' decision in the DL2 setting ---------------------------------------

RLTAPS_REINFORCE = ReinforceConfig(
    env=GpuEnvConfig(max_steps=200),
    n_jobs=30,
    train_sequences=6,
    val_sequences=4,
    episodes=6,
    batch_sequences=2,
    epochs=4,
    refresh_every=2,
)
"""`RLTapsStageConfig.reinforce`'s default: the paper's network, topology, state and reward
with a small budget (30 jobs per sequence, T_max 200, 6 training and 4 validation
sequences, 6 episodes, 4 epochs; the scenario's resume cost, which the paper has not)."""


ARENA_SYSTEM = "rl-taps-arena"
"""`policies.system` of RL-TAPS trained for the evaluation on every workload set."""


@dataclass(frozen=True)
class ArenaNetConfig:
    """Shape of RL-TAPS' arena network (`models.rltaps.arena.ArenaNet`): the cluster image
    and the N job slots in, one softmax per GPU over N + 1 slots out, with weights shared
    over GPUs (a scoring network applied GPU by GPU; see that module for why)."""

    n_gpus: int = 192
    """M: GPUs (one softmax each); the cluster image has horizon x M cells."""
    slots: int = 20
    """N: job slots (the evaluation's window); each softmax has N + 1 entries."""
    image_dim: int = 1920
    """Cells of the cluster image (horizon x M)."""
    job_dim: int = 18
    """Columns of a job slot's row (model one-hot and scalars)."""
    max_workers: int = 16
    """Rows of a slot's worker-count table minus one."""
    count_features: int = 5
    """Features of one worker count (`tracelib.envs.gpu_arena.COUNT_FEATURES`)."""
    pair_features: int = 3
    """Features of a GPU with a slot (`PAIR_FEATURES`)."""
    null_features: int = 3
    """Features of a GPU's null slot (`NULL_FEATURES`)."""
    context: int = 32
    """Units of the cluster-image layer."""
    hidden: int = 64
    """Units of the job-slot layer."""
    prior: float = 8.0
    """Initial logit structure (no prior: 0): a slot's logit starts at -prior, +prior + 2
    while the job has fewer GPUs than it requested, +2 on the GPU it holds; the null slot
    at 0. Greedy decoding then starts as the requested allocation with jobs keeping their
    GPUs, and sampling explores around it (see `ArenaNet.__init__`)."""

    def __post_init__(self) -> None:
        sizes = (self.n_gpus, self.slots, self.image_dim, self.job_dim, self.max_workers)
        if min(sizes) < 1 or min(self.context, self.hidden) < 1:
            raise ValueError("network sizes must be positive")
        if min(self.count_features, self.pair_features, self.null_features) < 1:
            raise ValueError("feature counts must be positive")
        if self.prior < 0:
            raise ValueError("prior must be >= 0")

    @classmethod
    def for_env(
        cls, env: ArenaEnvConfig, hidden: int = 64, context: int = 32, prior: float = 8.0
    ) -> ArenaNetConfig:
        """The network that reads `env`'s states (its cluster's GPUs, its window's slots)."""
        return cls(
            n_gpus=env.n_gpus,
            slots=env.window,
            image_dim=env.image_dim,
            job_dim=env.job_dim,
            max_workers=env.max_workers,
            count_features=len(COUNT_FEATURES),
            pair_features=len(PAIR_FEATURES),
            null_features=len(NULL_FEATURES),
            context=context,
            hidden=hidden,
            prior=prior,
        )

    @property
    def n_choices(self) -> int:
        """N + 1: choices per GPU."""
        return self.slots + 1

    @property
    def n_heads(self) -> int:
        """Per-slot outputs: a score, one weight per count feature, one per pair feature."""
        return 1 + self.count_features + self.pair_features


@dataclass(frozen=True)
class ArenaTrainConfig:
    """REINFORCE with a per-time-step baseline (RL-TAPS Algorithm 1) on the arena's
    workloads, in the evaluation's setting (`sim`); `models.rltaps.arena_reinforce`."""

    sim: SimConfig = field(default_factory=SimConfig)
    """The simulator of training and validation (the pipeline passes the evaluation's:
    its cluster, window, slot and speed realism); its seed is replaced per episode."""
    env: ArenaEnvConfig = field(default_factory=ArenaEnvConfig)
    """The decision's cluster, window and state scaling (must match `sim`)."""
    hidden: int = 64
    """Units of the job-slot layer."""
    context: int = 32
    """Units of the cluster-image layer."""
    prior: float = 8.0
    """Initial logit structure of a fresh network (ArenaNetConfig.prior)."""
    episodes: int = 4
    """E: episodes per training sequence for the baseline (RL-TAPS: 20)."""
    batch_sequences: int = 2
    """B: sequences whose gradients make one update."""
    epochs: int = 3
    """Passes over the training sequences (RL-TAPS: 50)."""
    lr: float = 0.001
    """Adam learning rate (RL-TAPS: 0.001)."""
    gamma: float = 1.0
    """Discount per decision slot (DeepRM: 1; with 1 the return is minus the jobs' time
    in the system, i.e. their average JCT)."""
    keep_best: bool = True
    """Return the weights with the lowest validation average JCT (else the last)."""
    seed: int = 0
    """Root seed: initialization, sampling, shuffling, simulator seeds."""

    def __post_init__(self) -> None:
        if min(self.episodes, self.batch_sequences, self.epochs) < 1:
            raise ValueError("episodes, batch_sequences and epochs must be positive")
        if self.lr <= 0 or not 0.0 < self.gamma <= 1.0:
            raise ValueError("need lr > 0 and gamma in (0, 1]")
        if self.sim.cluster != self.env.cluster or (self.sim.window or 0) != self.env.window:
            raise ValueError(
                f"the decision's cluster and window ({self.env.window}) must be the "
                f"simulator's ({self.sim.window})"
            )

    @property
    def net(self) -> ArenaNetConfig:
        """The network a fresh run trains."""
        return ArenaNetConfig.for_env(self.env, self.hidden, self.context, self.prior)


def arena_training() -> ArenaTrainConfig:
    """`RLTapsArenaConfig.reinforce`'s default, in the evaluation's setting (DL2's small
    cluster, `DL2_SMALL`, as `models.evaluation.eval_setting` is). The learning
    rate is RL-TAPS' 0.001 x 10: a budget of seconds makes a handful of updates, and 0.03
    and more diverged in trials on the validation split."""
    sim = DL2_SMALL.sim_config()
    return ArenaTrainConfig(
        sim=sim,
        env=ArenaEnvConfig(
            cluster=sim.cluster, window=sim.window or 20, ps_rule="at-least-workers"
        ),
        hidden=64,
        context=32,
        prior=6.0,
        episodes=3,
        batch_sequences=1,
        epochs=3,
        lr=0.01,
    )
