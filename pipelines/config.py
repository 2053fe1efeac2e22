"""The configuration of one `schedlab run`: one dataclass per stage, composed here.

The whole config is stored, as JSON, with the run's row in `pipeline_runs`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from models.fidelity import FidelityConfig
from models.rltaps.config import MODES as RLTAPS_MODES
from pipelines.stages_chic import ChicEvalConfig, ChicTrainConfig
from pipelines.stages_dl2 import DL2StageConfig
from pipelines.stages_harmony import HarmonyStageConfig
from pipelines.stages_rltaps import RLTapsStageConfig
from tracelib.interference import InterferenceConfig
from tracelib.synthetic import DiurnalConfig
from tracelib.workloads import DeriveConfig


@dataclass(frozen=True)
class TraceInput:
    """A production trace the run ingests before deriving workloads."""

    path: str
    format: str
    mapping: str | None = None
    source_id: str | None = None


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

    def train_configs(self) -> list[ChicTrainConfig]:
        return [
            replace(self.train, variant=v, rate_per_hour=r)
            for v in self.variants
            for r in self.train_rates
        ]


@dataclass(frozen=True)
class RLTapsRunConfig:
    """RL-TAPS in `schedlab run`: one policy per training mode, then the evaluation."""

    stage: RLTapsStageConfig = field(default_factory=RLTapsStageConfig)
    modes: tuple[str, ...] = RLTAPS_MODES

    def train_configs(self) -> list[RLTapsStageConfig]:
        return [replace(self.stage, mode=m) for m in self.modes]


@dataclass(frozen=True)
class RunConfig:
    """Everything `schedlab run` does, with the embedded default: a DL2-style synthetic trace."""

    seed: int = 0
    """One seed for the run; every stage's generators are derived from it."""
    synthetic: DiurnalConfig = field(default_factory=lambda: DiurnalConfig(n_jobs=600))
    """Synthetic DL2-style trace: 600 jobs -> 10 sequences of 60 (DL2's small setting)."""
    derive: DeriveConfig = field(default_factory=lambda: DeriveConfig(name="dl2-synthetic"))
    traces: tuple[TraceInput, ...] = ()
    """Production traces to ingest; each gets its own derivation named after its source."""
    interference: InterferenceConfig = field(default_factory=InterferenceConfig)
    """Harmony-style co-location samples (`interference_samples`), 13,177 by default."""
    fidelity: FidelityConfig = field(default_factory=FidelityConfig)
    """The simulator's fidelity checks (`fidelity_checks`); smoke runs skip the large ones."""
    dl2: DL2StageConfig | None = field(default_factory=DL2StageConfig)
    """DL2: decision logs, warm-up, fine-tuning on the synthetic set (None: skipped)."""
    harmony: HarmonyStageConfig | None = field(default_factory=HarmonyStageConfig)
    """Harmony: reward predictor on the interference samples, placement DRL and its
    ablations, evaluation under three arrival patterns (None: skipped)."""
    chic: ChicRunConfig | None = field(default_factory=ChicRunConfig)
    """Chic and Chic-Pair: cross-entropy-method training, evaluation against Optimus."""
    rltaps: RLTapsRunConfig | None = field(default_factory=RLTapsRunConfig)
    """RL-TAPS: REINFORCE in both training modes, evaluation against the job pickers."""
    eval_seeds: int = 3
    """DL2-setting evaluation: simulator seeds per test sequence (0 skips it)."""
    eval_sequences: int | None = 4
    """DL2-setting evaluation: at most this many test sequences per workload set (None:
    all), so a large trace's many sequences do not multiply the evaluation."""

    def seeded(self) -> RunConfig:
        """The stage configs with the run seed pushed down (the single place seeds are set)."""
        return replace(
            self,
            synthetic=replace(self.synthetic, seed=self.seed),
            derive=replace(self.derive, seed=self.seed),
            interference=replace(self.interference, seed=self.seed),
            dl2=replace(self.dl2, seed=self.seed, workload_set=self.derive.name)
            if self.dl2
            else None,
            harmony=replace(self.harmony, seed=self.seed) if self.harmony else None,
            chic=replace(
                self.chic,
                train=replace(self.chic.train, seed=self.seed),
                eval=replace(self.chic.eval, seed=self.seed),
            )
            if self.chic
            else None,
            rltaps=replace(self.rltaps, stage=replace(self.rltaps.stage, seed=self.seed))
            if self.rltaps
            else None,
        )

    def to_dict(self) -> dict:
        return asdict(self)


def trace_inputs_from_dir(folder: str | Path) -> tuple[TraceInput, ...]:
    """Trace files in a folder, their format read from the name: `<format>-<anything>.<ext>`
    (a `.toml` of the same stem is the generic mapping); PAI traces are sub-folders `pai-*`."""
    folder = Path(folder)
    found = []
    for entry in sorted(folder.iterdir()) if folder.is_dir() else []:
        fmt = entry.name.split("-", 1)[0].split(".", 1)[0]
        if entry.suffix == ".toml" or fmt not in ("philly", "pai", "helios", "generic"):
            continue
        mapping = entry.with_suffix(".toml") if fmt == "generic" else None
        found.append(
            TraceInput(str(entry), fmt, str(mapping) if mapping and mapping.exists() else None)
        )
    return tuple(found)


BUDGETS = ("smoke", "default", "large")


def budgeted(cfg: RunConfig, budget: str) -> RunConfig:
    """`cfg` with every learned system's training and evaluation sized to `budget`:

    smoke    every stage runs, each as small as it can be (about a minute here): for
             tests and for checking an installation; the numbers mean nothing.
    default  the embedded default (`make run`): minutes here, results worth reading.
    large    the benchmark-sized budgets of each system (hours here).

    Budgets are counted in updates, iterations and sequences, never seconds, so the same
    seed gives the same tables on any machine."""
    if budget not in BUDGETS:
        raise ValueError(f"unknown budget {budget!r}; choose one of {BUDGETS}")
    if budget == "default":
        return cfg
    small = budget == "smoke"
    out = replace(
        cfg,
        eval_seeds=1 if small else 3,
        eval_sequences=1 if small else 16,
        fidelity=replace(cfg.fidelity, large=not small),
    )
    if cfg.dl2 is not None:
        out = replace(
            out,
            dl2=replace(
                cfg.dl2,
                updates=20 if small else 20_000,
                warmup_epochs=2 if small else 100,
                val_every=10 if small else 1000,
                train_sequences_per_set=2 if small else 64,
                val_sequences_per_set=1 if small else 16,
            ),
        )
    if cfg.harmony is not None:
        h = cfg.harmony
        out = replace(
            out,
            harmony=replace(
                h,
                reward=replace(h.reward, epochs=2 if small else 200),
                train=replace(
                    h.train,
                    updates=4 if small else 2000,
                    val_every=2 if small else 200,
                    n_workers=2 if small else h.train.n_workers,
                ),
                n_train_sequences=1 if small else 32,
                n_val_sequences=1 if small else 4,
                eval=replace(h.eval, n_sequences=1 if small else 10),
            ),
        )
    if cfg.chic is not None:
        c = cfg.chic
        out = replace(
            out,
            chic=replace(
                c,
                train=replace(
                    c.train,
                    iterations=2 if small else 30,
                    n_trajectories=4 if small else c.train.n_trajectories,
                    train_sequences=4 if small else c.train.train_sequences,
                    val_sequences=2 if small else c.train.val_sequences,
                    fit_epochs=2 if small else c.train.fit_epochs,
                ),
                eval=replace(c.eval, test_sequences=2 if small else c.eval.test_sequences),
            ),
        )
    if cfg.rltaps is not None:
        r = cfg.rltaps.stage
        out = replace(
            out,
            rltaps=replace(
                cfg.rltaps,
                stage=replace(
                    r,
                    n_jobs=10 if small else r.n_jobs,
                    epochs=1 if small else 50,
                    train_sequences=1 if small else 20,
                    val_sequences=1 if small else r.val_sequences,
                    episodes=2 if small else 20,
                    batch_sequences=1 if small else r.batch_sequences,
                    test_sequences=2 if small else 30,
                ),
            ),
        )
    return out


SYSTEMS = ("dl2", "harmony", "chic", "rl-taps")
"""The learned systems `schedlab run` trains (`--systems` picks some)."""


def run_config(
    *,
    seed: int = 0,
    n_jobs: int = 600,
    jobs_per_sequence: int = 60,
    incoming: str | None = None,
    budget: str = "default",
    systems: list[str] | tuple[str, ...] | None = None,
    dl2_updates: int | None = None,
    dl2_warmup_epochs: int | None = None,
    dl2_teacher: str = "drf",
    dl2_baselines: bool = True,
    harmony_updates: int | None = None,
    harmony_gavel: str | None = None,
    chic_iterations: int | None = None,
    chic_deviations: bool = False,
    rltaps_epochs: int | None = None,
    eval_seeds: int | None = None,
    eval_sequences: int | None = None,
) -> RunConfig:
    """The run's config from the nightly flow's parameters: the budget first, then the
    per-system overrides (0 updates, epochs or iterations skips that system; None keeps
    the budget's; `eval_sequences=0` evaluates every test sequence), then the seed pushed
    down to every stage."""
    chosen = tuple(systems) if systems is not None else SYSTEMS
    unknown = sorted(set(chosen) - set(SYSTEMS))
    if unknown:
        raise ValueError(f"unknown learned system(s) {unknown}; choose from {SYSTEMS}")
    base = RunConfig(seed=seed)
    cfg = budgeted(
        replace(
            base,
            synthetic=replace(base.synthetic, n_jobs=n_jobs),
            derive=replace(base.derive, jobs_per_sequence=jobs_per_sequence),
            traces=trace_inputs_from_dir(incoming) if incoming else (),
            dl2=replace(
                DL2StageConfig(),
                teacher=dl2_teacher,
                variants=DL2StageConfig().variants if dl2_baselines else (),
            ),
            harmony=replace(HarmonyStageConfig(), gavel_path=harmony_gavel),
        ),
        budget,
    )
    dl2, harmony, chic, rltaps = cfg.dl2, cfg.harmony, cfg.chic, cfg.rltaps
    if dl2_updates is not None:
        dl2 = replace(dl2, updates=dl2_updates, val_every=min(dl2.val_every, max(dl2_updates, 1)))
    if dl2_warmup_epochs is not None:
        dl2 = replace(dl2, warmup_epochs=dl2_warmup_epochs)
    if harmony_updates is not None:
        train = replace(
            harmony.train,
            updates=harmony_updates,
            val_every=min(harmony.train.val_every, max(harmony_updates, 1)),
        )
        harmony = replace(harmony, train=train)
    if chic_iterations is not None:
        chic = replace(chic, train=replace(chic.train, iterations=chic_iterations))
    if chic_deviations:
        # The four measured departures from the paper's MDP under which Chic and Chic-Pair
        # reach the paper's gains over Optimus (README, Chic section).
        chic = replace(
            chic,
            train=replace(
                chic.train,
                mask_absent=True,
                work_conserving=True,
                shared_sequence=True,
                smoothing=1.0,
            ),
        )
    if rltaps_epochs is not None:
        rltaps = replace(rltaps, stage=replace(rltaps.stage, epochs=rltaps_epochs))
    if eval_seeds is not None:
        cfg = replace(cfg, eval_seeds=eval_seeds)
    if eval_sequences is not None:
        cfg = replace(cfg, eval_sequences=eval_sequences or None)
    return replace(
        cfg,
        dl2=dl2 if "dl2" in chosen and dl2.updates > 0 else None,
        harmony=harmony if "harmony" in chosen and harmony.train.updates > 0 else None,
        chic=chic if "chic" in chosen and chic.train.iterations > 0 else None,
        rltaps=rltaps if "rl-taps" in chosen and rltaps.stage.epochs > 0 else None,
    ).seeded()
