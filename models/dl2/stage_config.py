"""DL2 in `schedlab run`: the stage config, each algorithm's config held by value."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from models.dl2.config import (
    ALGORITHMS,
    DL2_FINETUNE,
    DL2_NET,
    DL2_WARMUP,
    PUBLISHED_DEVIATIONS,
    SWITCHES,
    VARIANTS,
    DL2NetConfig,
    FinetuneConfig,
    GroupedConfig,
    RecorderConfig,
    WarmupConfig,
)
from models.dl2.search import TEACHER as SEARCHED
from models.dl2.search import (
    SearchConfig,
)
from models.evaluation import eval_setting
from tracelib.configs import resized
from tracelib.sim import SimConfig


@dataclass(frozen=True)
class DL2StageConfig:
    """DL2 in `schedlab run`: which workloads, which teacher, the network, and each
    algorithm's config (by value: what the stage hands the algorithm is that config with
    the run's seed, simulator and network filled in, `recorder_config()`, `warmup_config()`,
    `finetune_config()`, `grouped_config()`).

    The default budget is small (a few minutes here); `--dl2-updates` and
    `--dl2-warmup-epochs` make it larger, and every algorithm field has its flag
    (`--dl2-grouped-lr`). Budgets are counted in epochs and updates, not seconds, so the
    same seed gives the same policy."""

    workload_set: str = "dl2-synthetic"
    """Derivation whose train split is recorded and trained on and whose val split
    validates."""
    teacher: str = PUBLISHED_DEVIATIONS["teacher"][1]
    """Allocation policy whose decisions the warm-up imitates: a heuristic (drf, fifo, srtf,
    optimus) or "searched" (default, a deviation; the paper warms up from drf): each model's
    workers and PSs searched on the training sequences' JCT from Optimus' (`search`,
    `models.dl2.search`), recorded job by job (RecorderConfig order "rows")."""
    search: SearchConfig = field(default_factory=SearchConfig)
    """The searched teacher's search (with teacher "searched")."""
    sim: SimConfig = field(default_factory=eval_setting)
    """Simulator of recording, training and validation (default: the evaluation's)."""
    net: DL2NetConfig = field(default_factory=lambda: DL2_NET)
    """The networks, and when they decide (its window is the simulator's, its
    `bundle_first` the teacher's: `network`). Deviations from the paper: the "rows" head
    (paper: "flat"), two hidden layers of 64 (DL2: two of 256; as good as two of 128 in
    `bench_dl2_arena`, at half the training time), a decision at every arrival and
    completion (trigger "events", as Optimus at its best; paper: "interval") or else every
    600 s (interval_s, as Optimus; paper: every 20-minute slot)."""
    recorder: RecorderConfig = field(default_factory=RecorderConfig)
    """How the teacher's decisions are recorded (its teacher, network, simulator and seed
    are the stage's: `recorder_config()`)."""
    warmup: WarmupConfig = field(default_factory=lambda: DL2_WARMUP)
    """The supervised warm-up (its network and seed are the stage's: `warmup_config()`).
    Default: 40 epochs at most, patience 6."""
    finetune: FinetuneConfig = field(default_factory=lambda: DL2_FINETUNE)
    """The paper's actor-critic fine-tuning (DL2's own with `algorithm` "actor-critic", and
    every variant's; its network, simulator and seed are the stage's, and its validation
    interval and critic warm-up are capped by its updates: `finetune_config()`). Defaults
    that deviate from the paper: no job-aware exploration (measured to cost more than it
    gives here), clip 0.2 and KL to the warm-up 1.0 (without them fine-tuning left the
    Optimus warm-up for a policy 45% slower on validation within 3000 updates)."""
    grouped: GroupedConfig = field(default_factory=GroupedConfig)
    """DL2's own fine-tuning by grouped PPO (`algorithm` "grouped-ppo"; its network,
    simulator and seed are the stage's, its validation interval capped by its iterations:
    `grouped_config()`)."""
    algorithm: str = PUBLISHED_DEVIATIONS["algorithm"][1]
    """How DL2 itself is fine-tuned: "grouped-ppo" (default, a deviation: PPO over groups
    of rollouts of one sequence, each judged by the time its jobs spend in the system
    against the group's other rollouts, `models.dl2.grouped`) or "actor-critic" (the
    paper's, `models.dl2.finetune`; its Table 2 ablations and OfflineRL always use it)."""
    record_repeats: int = 1
    """The teacher runs each training sequence this many times, each with its own
    simulator seed, and the warm-up imitates them all (more states of the same teacher).
    Measured with Optimus, one training seed: 3 made the warm-up worse (14% slower than
    its teacher on validation instead of 7%, early stopping after 7 epochs), so 1."""
    seed: int = 0
    """Root seed of recording, initialization, exploration and replay."""
    variants: tuple[str, ...] = (
        "dl2-without-grouped-ppo",
        "offline-rl",
        "dl2-without-critic",
        "dl2-without-exploration",
        "dl2-without-replay",
    )
    """Also trained, with the same budget, and evaluated beside DL2: DL2 fine-tuned by the
    paper's actor-critic instead of grouped PPO (dl2-without-grouped-ppo), the OfflineRL
    baseline and the paper's Table 2 ablations of its actor-critic (VARIANTS); a variant
    that would train what DL2 or an earlier variant trains (without exploration, while the
    actor-critic runs without it; dl2-without-grouped-ppo, while DL2 uses the
    actor-critic) is skipped (`trained_variants`)."""
    finetune_sets: tuple[str, ...] = ()
    """Further derived sets whose train and validation workloads fine-tuning also uses (the
    nightly flow passes each production trace's set, so a new trace retrains every variant
    from its latest policy); sets without such a split are skipped."""
    train_sequences_per_set: int | None = 16
    """At most this many training sequences of each set are recorded and trained on (the
    lowest sequence numbers; None: all), so a large production trace does not make every
    stage larger: the budget sizes the work, not the trace."""
    val_sequences_per_set: int | None = 4
    """At most this many validation sequences of each set are used (every validation
    point of fine-tuning simulates each of them)."""
    init: str = "latest"
    """Fine-tuning starts from: "latest" (the newest registered fine-tuned DL2 policy, else
    this run's warm-up), "warmup" (this run's warm-up), or a policy id."""

    def __post_init__(self) -> None:
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {self.algorithm!r}")

    @property
    def window(self) -> int:
        return self.sim.window or 20

    def as_published(self) -> DL2StageConfig:
        """This config with the paper's choices where the default deviates (PUBLISHED)."""
        return resized(self, {k: v for k, (v, _) in PUBLISHED_DEVIATIONS.items()})

    # What the stage hands each algorithm: its config with the run-level values (seed,
    # simulator, network) filled in, here and nowhere else.

    def network(self, bundle_first: bool = True) -> DL2NetConfig:
        """The networks' shape and decision interval, with the simulator's window."""
        return replace(self.net, window=self.window, bundle_first=bundle_first)

    def recorder_config(self) -> RecorderConfig:
        # DRF's and Optimus' decisions give every job a worker+PS pair first; FIFO's and
        # SRTF's fill one job at a time, which the bundle-first rule would reject
        # (DL2NetConfig).
        net = self.network(bundle_first=self.teacher in ("drf", "optimus", SEARCHED))
        return replace(self.recorder, teacher=self.teacher, net=net, sim=self.sim, seed=self.seed)

    def warmup_config(self) -> WarmupConfig:
        return replace(self.warmup, hidden=self.net.hidden, head=self.net.head, seed=self.seed)

    def _fine_tuning(self, algorithm: Any, steps: int, **more: Any) -> Any:
        """A fine-tuning algorithm's config with the network, simulator and seed filled in,
        validating at least once in its `steps` (updates or iterations)."""
        return replace(
            algorithm,
            net=self.network(),
            sim=self.sim,
            val_every=min(algorithm.val_every, steps),
            seed=self.seed,
            **more,
        )

    def finetune_config(self) -> FinetuneConfig:
        """The paper's actor-critic (DL2's with `algorithm` "actor-critic", every variant's)."""
        ft = self.finetune
        # a third of a short run at most trains the critic alone
        warmup = min(ft.critic_warmup, ft.max_updates // 3)
        return self._fine_tuning(ft, ft.max_updates, critic_warmup=warmup)

    def grouped_config(self) -> GroupedConfig:
        """DL2's own fine-tuning by grouped PPO (`algorithm` "grouped-ppo")."""
        return self._fine_tuning(self.grouped, self.grouped.iterations)

    def algorithm_of(self, variant: str) -> str:
        """The fine-tuning algorithm of `variant`: DL2's own is `algorithm`; every other
        variant uses the paper's actor-critic."""
        return self.algorithm if variant == "dl2" else "actor-critic"

    def trained_variants(self) -> tuple[str, ...]:
        """`variants` less those that would train what DL2 itself, or a variant listed
        before them, trains (same algorithm, same switches)."""
        ft = self.finetune_config()

        def what(variant: str) -> tuple:
            algorithm = self.algorithm_of(variant)
            if algorithm != "actor-critic":
                return (algorithm,)
            return (algorithm, *(getattr(replace(ft, **VARIANTS[variant]), k) for k in SWITCHES))

        seen = {what("dl2")}
        out = []
        for v in self.variants:
            if what(v) not in seen:
                seen.add(what(v))
                out.append(v)
        return tuple(out)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
