"""The configuration of one `schedlab run`: one dataclass per stage, composed here.

The whole config is stored, as JSON, with the run's row in `pipeline_runs`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from pipelines.stages_dl2 import DL2StageConfig
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
    dl2: DL2StageConfig | None = field(default_factory=DL2StageConfig)
    """DL2: decision logs, warm-up, fine-tuning on the synthetic set (None: skipped)."""

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
