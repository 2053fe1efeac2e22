"""RL-TAPS in `schedlab run`: the stage config of its own scenario and of the arena, REINFORCE's
config held by value."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from models.evaluation import (
    VALIDATION_STREAM,
    eval_setting,
)
from models.rltaps.config import (
    MODES,
    RLTAPS_REINFORCE,
    ArenaTrainConfig,
    ReinforceConfig,
    arena_training,
    system_of,
)
from models.rltaps.policy import (
    sequence_seeds,
)
from tracelib.envs.gpu import GpuEnvConfig
from tracelib.sim import SimConfig

_TEST_STREAM = 0x7E57
"""Spawn key of the test sequences' seeds (independent of the trainer's streams)."""


@dataclass(frozen=True)
class RLTapsStageConfig:
    """RL-TAPS in `schedlab run`: training mode, REINFORCE's config by value (what the
    trainer gets is it with this config's mode and seed filled in, `reinforce_config()`)
    and the evaluation's size.

    Defaults are a small budget (the paper's network, topology, state and reward; fewer and
    shorter job sequences, fewer episodes and epochs). Budgets are counted in epochs and
    episodes, not seconds, so the same seed gives the same policy."""

    mode: str = "nonstreaming"
    """Training mode: "nonstreaming" (static sequences) or "streaming" (fresh ones)."""
    reinforce: ReinforceConfig = field(default_factory=lambda: RLTAPS_REINFORCE)
    """REINFORCE (`models.rltaps.reinforce`; its mode and seed are this config's). Its
    environment (T_max, penalties, topology, state image), its jobs per sequence and its
    discount are the evaluation's too."""
    test_sequences: int = 10
    """Held-out sequences of the evaluation."""
    validation_sequences: int = 5
    """Held-out sequences, none of them a test one, on which the baselines also run to
    choose the best heuristic the ratios are taken to; 0: the best on the test sequences."""
    seed: int = 0
    """Root seed of sequences, initialization, sampling; test sequences too."""
    init: str = "latest"
    """Training starts from: "latest" (the newest registered policy of the mode's system,
    else the shipped one when this simulator is the one it was trained in and a teacher is
    set, else from scratch), "shipped" (the shipped policy, an error when unusable),
    "scratch", or a policy id."""

    def __post_init__(self) -> None:
        system_of(self.mode)
        if self.test_sequences < 1:
            raise ValueError("test_sequences must be positive")
        if self.validation_sequences < 0:
            raise ValueError("validation_sequences must be at least 0")

    @classmethod
    def paper(cls, mode: str = "nonstreaming", **kw: Any) -> RLTapsStageConfig:
        """RL-TAPS section 5.1's sizes (hours of CPU here)."""
        streaming = mode == "streaming"
        reinforce = replace(
            RLTAPS_REINFORCE,
            env=replace(RLTAPS_REINFORCE.env, max_steps=1000),
            n_jobs=400,
            train_sequences=60 if streaming else 200,
            val_sequences=60 if streaming else 200,
            episodes=20,
            batch_sequences=10,
            epochs=50,
            refresh_every=10,
        )
        return cls(mode=mode, **{"reinforce": reinforce, "test_sequences": 200, **kw})

    def env_config(self) -> GpuEnvConfig:
        """The environment of training and evaluation."""
        return self.reinforce.env

    def reinforce_config(self) -> ReinforceConfig:
        """The trainer's config: `reinforce` with this config's mode and seed."""
        return replace(self.reinforce, mode=self.mode, seed=self.seed)

    def eval_config(self) -> dict[str, Any]:
        """What the evaluation's rows and id record of its config."""
        rl = self.reinforce
        return {
            "n_jobs": rl.n_jobs,
            "max_steps": rl.env.max_steps,
            "test_sequences": self.test_sequences,
            "validation_sequences": self.validation_sequences,
            "gamma": rl.gamma,
            "resume_cost_s": rl.env.resume_cost_s,
            "seed": self.seed,
        }

    def as_published(self) -> RLTapsStageConfig:
        """The paper's training: from random weights, no imitation."""
        return replace(self, reinforce=self.reinforce.as_published())

    def test_seeds(self) -> list[int]:
        """Generator seeds of the evaluation's job sequences."""
        seq = np.random.SeedSequence(self.seed, spawn_key=(_TEST_STREAM,))
        return sequence_seeds(np.random.default_rng(seq), self.test_sequences)

    def validation_seeds(self) -> list[int]:
        """Generator seeds of the sequences the best heuristic is chosen on."""
        seq = np.random.SeedSequence(self.seed, spawn_key=(VALIDATION_STREAM,))
        return sequence_seeds(np.random.default_rng(seq), self.validation_sequences)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able values (recorded in `policies.metrics.stage_config`)."""
        return asdict(self)


@dataclass(frozen=True)
class RLTapsArenaConfig:
    """RL-TAPS trained for the evaluation on every workload set (system `rl-taps-arena`):
    its per-GPU decision on the evaluation's cluster (`tracelib.envs.gpu_arena`), REINFORCE
    on the run's synthetic workload set (`models.rltaps.arena_reinforce`), whose config it
    holds by value (the trainer gets it with this config's simulator, the decision's
    cluster and window from it, and seed filled in: `train_config()`).

    The default budget is small (3 epochs of 3 episodes on each of 6 training sequences:
    16-17 s on one core of this machine, 30-37 s of wall-clock time at a load average of 9;
    smoke: 1-3 s); budgets are counted in epochs and episodes, not seconds, so
    the same seed gives the same policy."""

    workload_set: str = "dl2-synthetic"
    """Derivation whose train split is trained on and whose validation split validates."""
    sim: SimConfig = field(default_factory=eval_setting)
    """Simulator of training and validation (default: the evaluation's)."""
    reinforce: ArenaTrainConfig = field(default_factory=arena_training)
    """REINFORCE in the arena (its simulator, its decision's cluster and window, and its
    seed are this config's). Default: 3 episodes per sequence (RL-TAPS: 20), 1 sequence per
    update, 3 epochs (RL-TAPS: 50), Adam at 0.01, a job-slot layer of 64 and a
    cluster-image layer of 32 units, prior 6, the PSs of a job raised to its workers
    ("at-least-workers")."""
    train_sequences: int | None = 6
    """At most this many training sequences of the set (the lowest sequence numbers)."""
    val_sequences: int | None = 2
    """At most this many validation sequences."""
    seed: int = 0
    """Root seed of initialization, sampling, shuffling and simulator seeds."""
    init: str = "latest"
    """Training starts from: "latest" (the newest registered `rl-taps-arena` policy whose
    shapes fit, else from scratch), "scratch", or a policy id."""

    def train_config(self) -> ArenaTrainConfig:
        """The trainer's config: `reinforce` with this config's simulator (the decision's
        cluster and window its) and seed."""
        rl = self.reinforce
        env = replace(rl.env, cluster=self.sim.cluster, window=self.sim.window or 20)
        return replace(rl, sim=self.sim, env=env, seed=self.seed)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able values (recorded in `policies.metrics.stage_config`)."""
        return asdict(self)


@dataclass(frozen=True)
class RLTapsRunConfig:
    """RL-TAPS in `schedlab run`: one policy per training mode, then the evaluation in its
    own scenario; and its arena policy (None: not trained)."""

    stage: RLTapsStageConfig = field(default_factory=RLTapsStageConfig)
    modes: tuple[str, ...] = MODES
    arena: RLTapsArenaConfig | None = field(default_factory=RLTapsArenaConfig)

    def train_configs(self) -> list[RLTapsStageConfig]:
        """One training config per mode."""
        return [replace(self.stage, mode=m) for m in self.modes]
