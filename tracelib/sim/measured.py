"""The simulator's speed truth: the DL2 authors' measured speed surface.

    m = load_measured_speeds()                     # the shipped measurements (or a path)
    table = m.table("resnet-50", cap=16)          # (17, 17) speed[w, p], mini-batches/s
    m.loo_error("resnet-50")                       # leave-one-out relative error

What is measured: `tracelib/data/dl2-measured-speeds.csv` (provenance in
`tracelib/data/README.md`): 804 (model, PSs, workers) runs of 8 models on the DL2 authors'
MXNet testbed, each the summed speed of the workers in mini-batches per second. Runs that
measured 0 (failed runs: 8 for VGG-16, 1 for Inception-BN) are left out.

Between measured points: a linear radial basis function through every measured point of the
model, in (workers, PSs) coordinates, as the authors' own simulator did
(`scipy.interpolate.RBFInterpolator(kernel="linear")`, their `Rbf(function="linear")`). It
passes through each measured point exactly, so the simulator's speed at a measured
configuration is the measurement. Its leave-one-out error (each point predicted from all the
others) is 3.9-8.3% per model, 6.6% on average; a piecewise-linear interpolation on the
Delaunay triangulation gives 6.8% and the same in log-speed 7.0%, so the authors' choice is
also the most accurate of the three (`python -m tracelib.sim.measured` prints them).

Outside the measured range (ResNet-50 and VGG-16 were measured up to 12 workers, the other
six up to 11; jobs may have 16): the conservative rule is that a job gains nothing beyond what
was measured: workers and PSs are clamped to the measured range before interpolating, so the
speed is that of the nearest measured edge. Neither the interpolation nor the clamp is convex
or of the Optimus form: the surface keeps the measurements' bumps (ResNet-50 runs 35.1
mini-batches/s with 3 workers + 3 PSs and 32.4 with 4 + 4), which is what an allocator that
trusts a convex model gets wrong.

The measurements are data, not code: `load_measured_speeds(path)` reads any CSV with the
columns `model, num_ps, num_workers, speed_batches_per_s` (the others are optional), so a
user can simulate their own cluster from their own measurements. A malformed file fails with
`MeasurementError` naming the file, the line and the column.
"""

from __future__ import annotations

import csv
import hashlib
import math
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

import numpy as np
from scipy.interpolate import RBFInterpolator

REQUIRED_COLUMNS = ("model", "num_ps", "num_workers", "speed_batches_per_s")
"""Columns a measurement file must have (`tracelib/data/README.md` describes the rest)."""

MODEL_ALIASES = {"cnn-text-classification": "cnn-text"}
"""Names in the DL2 authors' file -> catalogue model names."""

DEFAULT_FILE = "dl2-measured-speeds.csv"


class MeasurementError(ValueError):
    """A measurement file that cannot be used (names the file, line and column)."""


@dataclass(frozen=True)
class MeasuredSpeeds:
    """Measured (workers, PSs, speed) points per model, and the surface through them."""

    source: str
    """Where the points came from (the file path, or the packaged file's name)."""
    sha256: str
    """Content hash of the file (stamped on the fidelity checks)."""
    points: dict[str, np.ndarray]
    """model -> (n, 3) float array of (workers, PSs, speed) with speed > 0."""
    failed_runs: int
    """Rows with speed 0 (failed runs), left out."""

    @property
    def models(self) -> tuple[str, ...]:
        """Measured models (catalogue names), in file order."""
        return tuple(self.points)

    def interpolator(self, model: str, exclude: int | None = None):
        """The linear RBF through the model's points (without point `exclude`)."""
        pts = self.points[model]
        if exclude is not None:
            pts = np.delete(pts, exclude, axis=0)
        return RBFInterpolator(pts[:, :2], pts[:, 2], kernel="linear")

    def table(self, model: str, cap: int) -> np.ndarray:
        """speed[w, p] for w, p in 0..cap, (cap + 1, cap + 1); 0 without a worker or a PS.
        Counts outside the measured range are clamped to it first (no extrapolated gain)."""
        pts = self.points[model]
        lo, hi = pts[:, :2].min(axis=0), pts[:, :2].max(axis=0)
        w, p = np.meshgrid(np.arange(1, cap + 1), np.arange(1, cap + 1), indexing="ij")
        query = np.column_stack([w.ravel(), p.ravel()]).astype(float)
        speeds = self.interpolator(model)(np.clip(query, lo, hi)).reshape(cap, cap)
        # The RBF passes through every point; between them it stays within the neighbours'
        # range, but guard against a non-positive value from a user's sparse file.
        floor = 0.05 * float(pts[:, 2].min())
        out = np.zeros((cap + 1, cap + 1))
        out[1:, 1:] = np.maximum(speeds, floor)
        return out

    def loo_error(self, model: str) -> float:
        """Mean relative error predicting each measured point from all the others."""
        pts = self.points[model]
        if len(pts) < 4:
            return math.nan
        errors = []
        for i in range(len(pts)):
            pred = float(self.interpolator(model, exclude=i)(pts[i : i + 1, :2])[0])
            errors.append(abs(pred - pts[i, 2]) / pts[i, 2])
        return float(np.mean(errors))


def _parse(text: str, source: str) -> MeasuredSpeeds:
    reader = csv.DictReader(text.splitlines())
    missing = [c for c in REQUIRED_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise MeasurementError(f"{source}: missing column(s) {', '.join(missing)}")
    rows: dict[str, list[tuple[float, float, float]]] = {}
    failed = 0
    for line, row in enumerate(reader, start=2):
        values = []
        for column in ("num_workers", "num_ps", "speed_batches_per_s"):
            raw = (row.get(column) or "").strip()
            try:
                value = float(raw)
            except ValueError:
                raise MeasurementError(
                    f"{source}: line {line}, column {column}: {raw!r} is not a number"
                ) from None
            if not math.isfinite(value) or value < 0:
                raise MeasurementError(
                    f"{source}: line {line}, column {column}: {raw!r} must be >= 0"
                )
            values.append(value)
        workers, ps, speed = values
        if workers < 1 or ps < 1 or workers != int(workers) or ps != int(ps):
            raise MeasurementError(
                f"{source}: line {line}: workers and PSs must be whole numbers >= 1"
            )
        model = (row.get("model") or "").strip()
        if not model:
            raise MeasurementError(f"{source}: line {line}, column model: empty")
        if speed == 0:
            failed += 1  # a failed run: measured nothing
            continue
        rows.setdefault(MODEL_ALIASES.get(model, model), []).append((workers, ps, speed))
    if not rows:
        raise MeasurementError(f"{source}: no measured point with a positive speed")
    points = {}
    for model, pts in rows.items():
        arr = np.array(pts, dtype=float)
        if len({(w, p) for w, p, _ in pts}) != len(pts):
            raise MeasurementError(f"{source}: model {model} has a (workers, PSs) point twice")
        arr.setflags(write=False)
        points[model] = arr
    digest = hashlib.sha256(text.encode()).hexdigest()
    return MeasuredSpeeds(source=source, sha256=digest, points=points, failed_runs=failed)


@cache
def load_measured_speeds(path: str | None = None) -> MeasuredSpeeds:
    """The measurements in `path` (default: the shipped DL2 file), read once per process."""
    if path is None:
        text = resources.files("tracelib").joinpath("data", DEFAULT_FILE).read_text()
        return _parse(text, f"tracelib/data/{DEFAULT_FILE}")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise MeasurementError(f"{path}: cannot be read ({exc})") from None
    return _parse(text, str(path))


def main() -> None:
    """Print each model's points and leave-one-out error."""
    m = load_measured_speeds()
    print(f"{m.source}: {sum(len(p) for p in m.points.values())} points, {m.failed_runs} failed")
    for model in m.models:
        loo = 100 * m.loo_error(model)
        print(f"  {model:13s} {len(m.points[model]):4d} points  LOO {loo:.1f}%")


if __name__ == "__main__":
    main()
