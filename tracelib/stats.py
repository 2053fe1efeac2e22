"""Confidence intervals every evaluation shares: one mean interval, one paired ratio.

Every table and benchmark that states "X is better than Y" goes through these two helpers,
so the intervals in `eval_summary` (every system's evaluation, its own scenario's too; the
`harmony_evaluation`, `chic_evaluation`, `rltaps_evaluation` views read it) and the
benchmarks' printouts are computed the same way: Student-t on
the mean (the samples are few, 3 to 30, so the normal quantile would be too narrow).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95


def mean_ci(
    values: Sequence[float] | np.ndarray, confidence: float = CONFIDENCE
) -> tuple[float, float | None, float | None]:
    """Mean and Student-t confidence interval (None, None with fewer than two values)."""
    from scipy import stats

    x = np.asarray(values, dtype=float)
    mean = float(x.mean())
    if x.size < 2:
        return mean, None, None
    half = float(stats.t.ppf(0.5 + confidence / 2, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size))
    return mean, mean - half, mean + half


def ci_half_width(values: Sequence[float] | np.ndarray, confidence: float = CONFIDENCE) -> float:
    """Half-width of `mean_ci`'s interval (0 for fewer than two values)."""
    mean, low, _ = mean_ci(values, confidence)
    return 0.0 if low is None else mean - low


@dataclass(frozen=True)
class PairedRatio:
    """Mean over pairs of (candidate / reference) with its interval; below 1: candidate better
    (for a cost such as JCT or slowdown)."""

    ratio: float
    low: float | None
    high: float | None
    n_pairs: int
    wins: int
    """Pairs where the candidate's cost is strictly lower."""

    @property
    def significant(self) -> bool:
        """True when the interval excludes 1."""
        return self.low is not None and (self.high < 1.0 or self.low > 1.0)

    def __str__(self) -> str:
        if self.low is None:
            return f"{self.ratio:.3f} (n={self.n_pairs})"
        return (
            f"{self.ratio:.3f} [{self.low:.3f}, {self.high:.3f}] "
            f"(n={self.n_pairs}, lower on {self.wins})"
        )


def paired_ratio(
    candidate: Sequence[float] | np.ndarray,
    reference: Sequence[float] | np.ndarray,
    confidence: float = CONFIDENCE,
) -> PairedRatio:
    """Paired ratio of two costs measured on the same pairs (same sequence, same seed):
    the per-pair ratios' mean and t-interval. Pairing cancels the sequences' own load, so
    the interval is much tighter than either mean's."""
    a = np.asarray(candidate, dtype=float)
    b = np.asarray(reference, dtype=float)
    if a.shape != b.shape or a.size == 0:
        raise ValueError(f"paired_ratio needs two equal, non-empty samples: {a.shape} vs {b.shape}")
    ratio, low, high = mean_ci(a / b, confidence)
    return PairedRatio(ratio, low, high, int(a.size), int((a < b).sum()))
