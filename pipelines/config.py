"""The configuration of one `schedlab run`: the shared stages' dataclasses and each learned
system's run config (its `Steps.config`, sized by its budgets), composed here.

The whole config is stored, as JSON, with the run's row in `pipeline_runs`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, get_args

from models.fidelity import FidelityConfig
from pipelines.system import BUDGETS, LearnedSystem, stage_seed
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


SYNTHETIC_JOBS = 1080
"""The embedded default trace's jobs: 18 sequences of 60 (DL2's small setting), split by
`SPLIT_FRACTIONS` into 6 to train on, 3 to validate and choose the best heuristic on, and 9
to test on (docs/benchmarks.md: how many test sequences resolve a 5% difference)."""

SPLIT_FRACTIONS = (1 / 3, 1 / 6, 1 / 2)
"""Train, validation and test fractions of the synthetic set's sequences: half held out for
the test, so that a paired 5% difference is resolved at the measured between-sequence
spread (docs/benchmarks.md)."""

ArenaTraining = Literal["synthetic", "every-set"]
"""Which workload sets the arena policies train on (`RunConfig.arena_training`)."""


@dataclass(frozen=True)
class RunConfig:
    """Everything `schedlab run` does, with the embedded default: a DL2-style synthetic trace."""

    seed: int = 0
    """One seed for the run; every stage's seed is spawned from it (`stage_seed`)."""
    synthetic: DiurnalConfig = field(default_factory=lambda: DiurnalConfig(n_jobs=SYNTHETIC_JOBS))
    """Synthetic DL2-style trace (`SYNTHETIC_JOBS`)."""
    derive: DeriveConfig = field(
        default_factory=lambda: DeriveConfig(name="dl2-synthetic", split_fractions=SPLIT_FRACTIONS)
    )
    """How the synthetic set is derived (a production trace's: this with its own name and
    `production_splits`)."""
    production_splits: tuple[float, float, float] = (0.6, 0.2, 0.2)
    """Train, validation and test fractions of a production trace's set: its sequences are
    many (1,666 of 60 in 100,000 jobs), the evaluation reads at most `eval_sequences` of
    its test ones, so most go to training."""
    traces: tuple[TraceInput, ...] = ()
    """Production traces to ingest; each gets its own derivation named after its source."""
    interference: InterferenceConfig = field(default_factory=InterferenceConfig)
    """Harmony-style co-location samples (`interference_samples`), 13,177 by default."""
    fidelity: FidelityConfig = field(default_factory=FidelityConfig)
    """The simulator's fidelity checks (`fidelity_checks`); smoke runs skip the large ones."""
    learned: dict[str, Any] = field(default_factory=dict)
    """Each learned system's run config, by system name, in the registry's order; a system
    the run does not train is absent."""
    eval_seeds: int = 3
    """DL2-setting evaluation: simulator seeds per test sequence (0 skips it)."""
    eval_sequences: int | None = 9
    """DL2-setting evaluation: at most this many test sequences per workload set (None:
    all), so a large trace's many sequences do not multiply the evaluation; the default
    evaluates the synthetic set's 9."""
    arena_training: ArenaTraining = "every-set"
    """Which workload sets each learned system trains its arena policy on: the synthetic
    set only (the smoke budget's: production sets are then evaluated with the policy
    trained on it), or every derived set, each with its own policy (each production
    trace's set adds one training per system, at the system's budget)."""

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


ARENA_TRAINING = get_args(ArenaTraining)
"""`RunConfig.arena_training`'s choices."""


def budgeted(cfg: RunConfig, budget: str) -> RunConfig:
    """The shared stages of `cfg` sized to `budget` (each learned system sizes itself,
    `LearnedSystem.budgets`):

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
    return replace(
        cfg,
        arena_training="synthetic" if small else "every-set",
        eval_seeds=1 if small else 3,
        eval_sequences=1 if small else 16,
        fidelity=replace(cfg.fidelity, large=not small),
    )


def run_config(
    registry: Iterable[LearnedSystem],
    *,
    seed: int = 0,
    n_jobs: int = SYNTHETIC_JOBS,
    jobs_per_sequence: int = 60,
    incoming: str | None = None,
    budget: str = "default",
    systems: Sequence[str] | None = None,
    options: Mapping[str, Any] | None = None,
    eval_seeds: int | None = None,
    eval_sequences: int | None = None,
    arena_training: str | None = None,
) -> RunConfig:
    """The run's config from the nightly flow's parameters: the budget first, then each
    system's options (flat, by flag dest: `dl2_updates`; 0 updates, epochs or iterations
    skip that system; None keeps the budget's), then the seeds spawned for every stage.
    `systems` names the learned systems to train (default: every one of `registry`);
    `eval_sequences=0` evaluates every test sequence; `arena_training` (None: the
    budget's) says which sets the arena policies train on (`RunConfig.arena_training`)."""
    names = [s.name for s in registry]
    chosen = tuple(systems) if systems is not None else tuple(names)
    unknown = sorted(set(chosen) - set(names))
    if unknown:
        raise ValueError(f"unknown learned system(s) {unknown}; choose from {tuple(names)}")
    options = dict(options or {})
    dests = {flag.dest for s in registry for flag in s.flags()}
    if set(options) - dests:
        raise ValueError(
            f"unknown option(s) {sorted(set(options) - dests)}; known: {sorted(dests)}"
        )
    base = RunConfig(seed=seed)
    cfg = budgeted(
        replace(
            base,
            synthetic=replace(base.synthetic, n_jobs=n_jobs),
            derive=replace(base.derive, jobs_per_sequence=jobs_per_sequence),
            traces=trace_inputs_from_dir(incoming) if incoming else (),
        ),
        budget,
    )
    if eval_seeds is not None:
        cfg = replace(cfg, eval_seeds=eval_seeds)
    if eval_sequences is not None:
        cfg = replace(cfg, eval_sequences=eval_sequences or None)
    if arena_training is not None:
        if arena_training not in ARENA_TRAINING:
            raise ValueError(
                f"unknown arena training {arena_training!r}; choose one of {ARENA_TRAINING}"
            )
        cfg = replace(cfg, arena_training=arena_training)
    learned = {}
    for system in registry:
        configured = system.configured(budget, options) if system.name in chosen else None
        if configured is not None:
            learned[system.name] = system.seeded(
                configured, stage_seed(seed, system.name), cfg.derive.name
            )
    return replace(
        cfg,
        synthetic=replace(cfg.synthetic, seed=stage_seed(seed, "synthetic")),
        derive=replace(cfg.derive, seed=stage_seed(seed, "derive")),
        interference=replace(cfg.interference, seed=stage_seed(seed, "interference")),
        learned=learned,
    )
