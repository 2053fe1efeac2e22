"""Chic and Chic-Pair in `schedlab run`: the training configs of its own scenario and of the
arena, the cross-entropy method's config held by value."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from models.chic.config import CHIC_CEM, REFERENCE_RATE, CEMConfig, ChicEvalConfig
from models.evaluation import (
    EvalConfig,
    eval_setting,
)
from tracelib.envs.chic import ChicEnvConfig
from tracelib.scenarios.chic import ChicArenaScenario, ChicScenario
from tracelib.sim import SimConfig


@dataclass(frozen=True)
class ChicTrainConfig:
    """One Chic / Chic-Pair training run in `schedlab run`: which variant, at which arrival
    rate, on how many sequences, and the cross-entropy method's config by value (what the
    trainer gets is that config with this run's variant, rate and seed filled in,
    `cem_config()`). The default budget is small (tens of seconds here); `iterations`
    (paper: until converged, 19+ to beat Optimus) and the sequence counts make it larger.
    Counted in iterations, so a seed gives one policy."""

    variant: str = "chic"
    """"chic" (2I + 1 actions) or "chic-pair" (I + 1)."""
    rate_per_hour: float = REFERENCE_RATE
    """Poisson arrival rate of the training and validation sequences."""
    train_sequences: int = 100
    """Training sequences episodes draw from."""
    val_sequences: int = 30
    """Validation sequences (paper: 30), every `cem.val_every` iterations."""
    cem: CEMConfig = field(default_factory=lambda: CHIC_CEM)
    """The modified cross-entropy method (`models.chic.cem`) in Chic's own scenario (its
    variant, the scenario's arrival rate and its seed are this config's). Default: 6
    iterations of N = 35 trajectories of W = 30 jobs, the five measured departures on
    (`CEMConfig.as_published` undoes them)."""
    seed: int = 0
    """Root seed of the sequences' seeds, initialization and sampling."""
    init: str = "latest"
    """Start from "latest" (the newest registered policy of this variant and rate, else
    random), "scratch", or a policy id."""

    def as_published(self) -> ChicTrainConfig:
        """This config with Chic's MDP and update as the paper writes them."""
        return replace(self, cem=self.cem.as_published())

    # What the stage hands the trainer: its config with the run-level values (variant,
    # arrival rate, seed) filled in, here and nowhere else.

    def scenario(self) -> ChicScenario:
        """The CEM's scenario at this training's arrival rate."""
        return replace(self.cem.scenario, rate_per_hour=self.rate_per_hour)

    def cem_config(self) -> CEMConfig:
        """The trainer's config."""
        return replace(self.cem, variant=self.variant, scenario=self.scenario(), seed=self.seed)


def _arena_cem() -> CEMConfig:
    return CEMConfig(
        scenario=ChicArenaScenario(
            sim=eval_setting(), window=20, placement=EvalConfig().default_placement
        ),
        iterations=6,
        n_trajectories=8,
        fit_epochs=10,
        teacher=None,
        env=ChicEnvConfig(max_phase_steps=1000),
    )


@dataclass(frozen=True)
class ChicArenaConfig:
    """Chic in the arena: the published MDP in the evaluation's DL2 setting
    (`tracelib.envs.chic_arena`: I = the evaluation's window, the DL2 catalogue, a
    schedule every slot, placed by the evaluation's default placement), trained by the
    modified CEM on a workload set's train split and validated on its validation split.
    The CEM's config is held by value (`cem`); what the trainer gets is it with this
    config's variant, simulator and seed filled in (`cem_config()`).
    At the default budget a training takes 20-27 s of one core here (Chic; Chic-Pair half:
    a 30-job episode is ~5,000 actions at ~70 us); `large` runs the paper's N = 35 for 40
    iterations."""

    workload_set: str = "dl2-synthetic"
    """Derivation whose train split is trained on and whose validation split validates."""
    variants: tuple[str, ...] = ("chic", "chic-pair")
    """Entered into the arena, each trained apart: "chic" (2I + 1 actions), "chic-pair"
    (I + 1)."""
    sim: SimConfig = field(default_factory=eval_setting)
    """Simulator of training and validation (default: the evaluation's)."""
    cem: CEMConfig = field(default_factory=_arena_cem)
    """The modified CEM in the arena (its variant, its scenario's simulator and its seed
    are this config's; its validation interval is capped by its iterations). Default: 6
    iterations of N = 8 trajectories (paper: 35) plus the uniform one, 10 fit epochs; I =
    20 visible jobs (the evaluation's window; Chic's own scenario: 3) placed by the
    evaluation's default placement; at most 1000 actions in one schedule (the cluster holds
    384 tasks); the measured departures on. No warm start (teacher None: random weights, as
    the paper), measured: with the paper's 64-32-4 network the arena's 41 actions clone
    poorly (held-out accuracy 0.60-0.77, the sampled clone's validation ACT 4,500-11,243 s
    over 5 seeds against 4,860-5,306 s from scratch after 6 iterations), and 6 iterations
    do not repair a bad clone: against Optimus 1.730 [1.542, 1.919] (Chic) and 1.907
    [1.669, 2.145] (Chic-Pair) with it, 1.534 [1.481, 1.588] and 1.564 [1.516, 1.613]
    without (docs/chic.md). 0 iterations: no arena training."""
    train_sequences: int | None = None
    """At most this many train sequences of the set (lowest numbers; None: all)."""
    val_sequences: int | None = 2
    """At most this many validation sequences (whole), every `cem.val_every` iterations."""
    jobs_per_episode: int | None = 30
    """Training episodes are the train sequences cut into runs of this many jobs, each
    starting at time 0 (Chic's W = 30; the sets' sequences have 60); None: whole."""
    init: str = "latest"
    """Start from: "latest" (the newest "<variant>-arena" policy whose network fits, else
    scratch), "scratch", or a policy id."""
    seed: int = 0
    """Root of initialization, dropout, minibatch order, episode choice and actions."""

    def __post_init__(self) -> None:
        unknown = set(self.variants) - {"chic", "chic-pair"}
        if unknown:
            raise ValueError(f"unknown Chic variant(s) {sorted(unknown)}")
        if not isinstance(self.cem.scenario, ChicArenaScenario):
            raise ValueError("the arena's CEM runs in a ChicArenaScenario")
        if self.jobs_per_episode is not None and self.jobs_per_episode < 1:
            raise ValueError("jobs_per_episode must be positive (or None)")

    @property
    def iterations(self) -> int:
        """The CEM's iterations (0: no arena training)."""
        return self.cem.iterations

    def as_published(self) -> ChicArenaConfig:
        """This config with Chic's MDP and update as the paper writes them."""
        return replace(self, cem=self.cem.as_published())

    # What the stage hands the trainer: its config with the run-level values (variant,
    # simulator, seed) filled in, here and nowhere else.

    def scenario(self) -> ChicArenaScenario:
        """The CEM's scenario in this config's simulator."""
        return replace(self.cem.scenario, sim=self.sim)

    def cem_config(self, variant: str) -> CEMConfig:
        """The trainer's config for one variant."""
        cem = self.cem
        return replace(
            cem,
            variant=variant,
            scenario=self.scenario(),
            val_every=max(min(cem.val_every, cem.iterations), 1),
            env=None if cem.env is None else replace(cem.env, variant=variant),
            seed=self.seed,
        )


@dataclass(frozen=True)
class ChicRunConfig:
    """Chic in `schedlab run`: which variants are trained at which arrival rates (each a
    `ChicTrainConfig`), then one evaluation at every rate of `eval`."""

    train: ChicTrainConfig = field(default_factory=ChicTrainConfig)
    """Budget and MDP options shared by every trained policy."""
    variants: tuple[str, ...] = ("chic", "chic-pair")
    train_rates: tuple[float, ...] = (1.8,)
    """Arrival rates (per hour) a policy is trained at; the evaluation also runs the one
    trained at `eval.reference_rate` at every rate (the paper's generality check)."""
    eval: ChicEvalConfig = field(default_factory=ChicEvalConfig)
    arena: ChicArenaConfig = field(default_factory=ChicArenaConfig)
    """Training in the arena (the DL2 setting of the evaluation on every workload set)."""

    def train_configs(self) -> list[ChicTrainConfig]:
        """One training config per variant and rate."""
        return [
            replace(self.train, variant=v, rate_per_hour=r)
            for v in self.variants
            for r in self.train_rates
        ]
