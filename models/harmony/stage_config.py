"""Harmony in `schedlab run`: the stage config of its own scenario and of the arena, its
algorithms' configs held by value."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from models.harmony.config import VARIANTS, HarmonyEvalConfig, arena_training
from models.harmony.reward import (
    RewardTrainConfig,
)
from models.harmony.train import (
    PlacementTrainConfig,
)
from tracelib.scenarios.harmony import ArrivalConfig


@dataclass(frozen=True)
class HarmonyStageConfig:
    """Harmony in `schedlab run`: samples, budgets, evaluation, and its two algorithms'
    configs by value: the reward predictor's (`reward`, handed to it as it is) and the
    placement actor-critic's (`train`; what a variant's training gets is it with this
    config's seed and the variant's switches filled in, `train_config()`). The default
    budget runs the three stages in about five minutes here; `reward.epochs`,
    `train.updates` and `eval.n_sequences` make it larger."""

    sample_sources: tuple[str, ...] = ("synthetic",)
    """`interference_samples.source` values the reward predictor trains on (the online
    update adds harmony-online, the speeds observed in evaluations)."""
    gavel_path: str | None = None
    """Optional Gavel throughputs JSON (scheduler/simulation_throughputs.json) to ingest and
    fit a predictor on, per GPU type."""
    gavel_gpu_types: tuple[str, ...] = ()
    """Keys of the Gavel file to read (empty: every key it has, `_unconsolidated` ones
    included; see `tracelib.gavel` for how those are read or skipped)."""
    reward: RewardTrainConfig = field(default_factory=RewardTrainConfig)
    """The reward predictor's supervised training (`models.harmony.reward`). Its seed is
    its own (`reward.seed`), not this config's."""
    train: PlacementTrainConfig = field(default_factory=lambda: PlacementTrainConfig(updates=300))
    """The placement policy's actor-critic (`models.harmony.train`) in Harmony's own
    scenario: 300 updates; its seed is this config's, and each variant's switches
    (value net, exploration, replay) are the variant's (`VARIANTS`)."""
    variants: tuple[str, ...] = tuple(VARIANTS)
    """Systems trained and evaluated (Harmony and its ablations)."""
    arrivals: ArrivalConfig = field(default_factory=ArrivalConfig)
    """Training sequences (uniform arrivals, as the paper's default)."""
    n_train_sequences: int = 96
    """Training sequences: the teacher's placements on them are the warm start's data.
    The searched teacher on 24: 2,875 placements, 83-88% held-out accuracy; on 48 about
    twice as many, on 96 (the default since the search forks the run instead of replaying
    it, about 100 s of one core) 11,470. The clone's average JCT times LIF-Quad's on 16
    held-out sequences per pattern, 8 seeds: 0.888 / 0.948 / 0.998 on 24, 0.869 / 0.923 /
    0.968 on 48, 0.859 / 0.925 / 0.930 on 96, 0.885 / 0.914 / 0.932 on 192 (no further gain,
    so the large budget keeps 96). LIF-Quad on 8: about 950 placements, 65%; on 24: about
    2,900, 77%."""
    n_val_sequences: int = 6
    """Validation sequences (uniform arrivals): each validation runs the policy on all of
    them, and the best validated weights are kept, an update over the warm start only when
    significantly better on them (`PlacementTrainConfig.significant_update`; with 2, judged
    by the predictor, updates worse on held-out sequences replaced the warm start:
    docs/harmony.md)."""
    eval: HarmonyEvalConfig = field(default_factory=HarmonyEvalConfig)
    """The evaluation in Harmony's own scenario (held-out sequences, baselines)."""
    init: str = "latest"
    """Training starts from "latest" (newest registered policy of the same system) or
    "scratch"."""
    online_max_sets: int = 500
    """Observed intervals appended to the samples per evaluation."""
    seed: int = 0
    """Root seed of the training and validation sequences and of the placement training."""

    def train_config(self, variant: str) -> PlacementTrainConfig:
        """The placement trainer's config for one variant (`VARIANTS`): `train` with this
        config's seed and the variant's switches."""
        if variant not in VARIANTS:
            raise ValueError(f"unknown Harmony variant {variant!r}; known: {', '.join(VARIANTS)}")
        return replace(self.train, seed=self.seed, **VARIANTS[variant])

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class HarmonyArenaConfig:
    """Harmony's placement policy trained for the arena: the run's synthetic workload set
    in the DL2 setting (96 servers, a window of 20), jobs at their requested workers and
    PSs (`models.harmony.arena`). The default budget trains in about 32 s of one core here
    (120 updates of 2 workers, 4 validations of 2 sequences)."""

    workload_set: str = "dl2-synthetic"
    """Derivation whose train split is trained on and whose validation split picks the
    best weights (the evaluation runs its test split)."""
    train: PlacementTrainConfig = field(default_factory=arena_training)
    """The actor-critic of the own scenario (`models.harmony.train`) in the arena's
    simulator. Its rollouts run on the simulator's own speeds (`rollout_speed`), not the
    reward predictor's: the predictor is fitted on saturated 6-server co-location sets,
    and on the 96-server cluster, where jobs mostly run on servers of their own, it ranks
    contention well (correlation 0.94 with the true slowdown under bin packing) but not
    the locality gain that separates placements there (correlation -0.06 under LIF, 11%
    error on an effect of 1-6%). It still shares each interval's observed progress among
    the interval's inferences (`credit`), resized to the cluster
    (`RewardPredictor.for_cluster`). The starting policy is validated too and kept unless a
    later validation beats it (`keep_start`): at this budget the updates do not improve on
    it (docs/harmony.md), and a run must not leave the arena a worse policy than it had."""
    train_sequences: int | None = 16
    """At most this many training sequences (the lowest sequence numbers; None: all)."""
    val_sequences: int | None = 2
    """At most this many validation sequences (each validation simulates each of them)."""
    init: str = "latest"
    """"latest": from the newest `harmony-arena` policy, else the pair head of the newest
    own-scenario `harmony` policy (`HarmonyPolicy.resized`), else from scratch; "scratch"."""
    seed: int = 0
    """Root seed of the arena's placement training."""

    def train_config(self) -> PlacementTrainConfig:
        """The trainer's config, with this config's seed."""
        return replace(self.train, seed=self.seed)


@dataclass(frozen=True)
class HarmonyRunConfig:
    """Harmony in `schedlab run`: its stages' config and whether the online update runs."""

    stage: HarmonyStageConfig = field(default_factory=HarmonyStageConfig)
    arena: HarmonyArenaConfig = field(default_factory=HarmonyArenaConfig)
    """Its placement policy trained for the evaluation on every workload set."""
    online_update: bool = False
    """After the evaluation, re-fit the predictor and the policies on the observed speeds."""
