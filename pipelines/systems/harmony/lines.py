"""The lines Harmony's reward model prints about Gavel's GPU types: in the stage's progress
(`stages.py`) and in the run's end summary (`plugin.py`). Imports nothing: the plugin is
read before any command runs."""

from __future__ import annotations

from collections.abc import Mapping

GAVEL_ESTIMATORS = (
    ("harmony-nn", "predictor"),
    ("lif-line", "LIF-Line"),
    ("lif-quad", "LIF-Quad"),
    ("gradient-boosting", "gradient boosting"),
)
"""The estimators of a Gavel GPU type's line, in order, with their printed names."""


def gavel_line(gpu: str, errors: Mapping[str, float]) -> str:
    """One GPU type's held-out mean relative error of the predictor beside LIF's and
    gradient boosting's on the same split (`errors`: `RewardResult.gavel_errors[gpu]`)."""
    parts = [
        f"{name} {errors[key]:.1%}" if key in errors else f"{name} n/a"
        for key, name in GAVEL_ESTIMATORS
    ]
    n = int(errors.get("test_samples", 0))
    return f"Gavel {gpu}: held-out relative error ({n} samples) {', '.join(parts)}"


def skipped_line(key: str, reason: str) -> str:
    """A Gavel key that gave no samples, and why."""
    return f"Gavel {key}: skipped ({reason})"
