"""Calibration: the targets behind the catalogue's coefficients and the experiments that
check them (`python -m tracelib.sim.calibration` prints the figures).

- `SPEED_TARGETS`: measured (workers, PSs, speed) points, a subset of the DL2 authors' 800
  published measurements (sum of per-worker mini-batches per second): equal workers and PSs
  up to 8 (DL2 Fig. 1's experiment) and splits of 12 tasks (DL2 Fig. 2's). VGG-16's (8, 4)
  run measured 0 (a failed run) and is left out. Only ResNet-50 and VGG-16 were measured at
  even counts.
- `fit_speed_coefficients`: NNLS on those points, relative error, weights 10 for (1,1),
  3 for the other equal points and 1 for the splits; the (1,1) point was measured with the
  worker and PS on one server, so it is first divided by the model's locality speed-up.
- `dl2_speedup_curve`: speeds as DL2 section 2.2 measured them (the (1,1) job on one
  server, more workers/PSs load-balanced) relative to (1,1).
- `harmony_packing`: Harmony case study 1 run through the simulator.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import nnls

from tracelib.catalogue import (
    DL2_CATALOGUE,
    DL2_SIM_FACTS,
    JobType,
    SimFacts,
    by_name,
    locality_gain,
    sim_facts_by_name,
)
from tracelib.sim.config import ClusterConfig, SimConfig, SpeedConfig
from tracelib.sim.engine import Simulator
from tracelib.sim.jobs import JobSpec
from tracelib.sim.placement import BinPacking
from tracelib.sim.policy import RequestedAllocation, Scheduler
from tracelib.sim.snapshot import JobPlacement
from tracelib.sim.speed import SpeedModel

SPEED_TARGETS: dict[str, tuple[tuple[int, int, float], ...]] = {
    "resnet-50": (
        (1, 1, 15.78), (2, 2, 27.29), (3, 3, 35.06), (3, 9, 46.23), (4, 4, 32.42), (4, 8, 35.75),
        (5, 5, 38.55), (5, 7, 30.74), (6, 6, 31.97), (7, 5, 32.28), (7, 7, 29.41), (8, 4, 20.34),
        (8, 8, 31.1), (9, 3, 21.11),
    ),
    "vgg-16": (
        (1, 1, 9.554), (2, 2, 11.04), (3, 3, 13.43), (3, 9, 20.71), (4, 4, 14.62), (4, 8, 18.18),
        (5, 5, 15.11), (5, 7, 16.35), (6, 6, 15.01), (7, 5, 12.11), (7, 7, 13.23), (8, 8, 12.14),
        (9, 3, 8.078),
    ),
    "resnext-110": (
        (1, 1, 382.8), (3, 3, 400.1), (3, 9, 406.3), (5, 5, 388.5), (5, 7, 288.6), (7, 5, 312.1),
        (7, 7, 268.5), (9, 3, 195.8),
    ),
    "inception-bn": (
        (1, 1, 169.8), (3, 3, 268.1), (3, 9, 292.5), (5, 5, 267.5), (5, 7, 238.6), (7, 5, 232.8),
        (7, 7, 209.5), (9, 3, 151.7),
    ),
    "seq2seq": (
        (1, 1, 276.7), (3, 3, 382.8), (3, 9, 488.3), (5, 5, 466.1), (5, 7, 465.9), (7, 5, 429.6),
        (7, 7, 372.6), (9, 3, 218.0),
    ),
    "cnn-text": (
        (1, 1, 61.87), (3, 3, 90.73), (3, 9, 95.45), (5, 5, 100.1), (5, 7, 98.3), (7, 5, 93.16),
        (7, 7, 95.91), (9, 3, 82.29),
    ),
    "dssm": (
        (1, 1, 462.2), (3, 3, 985.6), (3, 9, 1015.0), (5, 5, 1125.0), (5, 7, 1189.0),
        (7, 5, 1019.0), (7, 7, 1092.0), (9, 3, 1043.0),
    ),
    "wlm": (
        (1, 1, 162.0), (3, 3, 268.1), (3, 9, 391.3), (5, 5, 290.4), (5, 7, 322.8), (7, 5, 263.8),
        (7, 7, 262.0), (9, 3, 165.8),
    ),
}  # fmt: skip

DL2_FIG1_RESNET50 = {1: 1.0, 2: 1.7, 4: 2.1, 8: 2.0}
"""DL2 Fig. 1 (SPEC): ResNet-50 speed relative to (1,1) with equal workers and PSs."""

HARMONY_TABLE_I = ("resnet-50", "vgg-16", "resnext-110", "seq2seq", "cnn-text", "wlm")
"""Harmony Table I's six models (its table lost its rows in conversion): the six the text
names (ResNet and WLM, ResNet and Seq2Seq in case study 2; CTC with VGG-16 or ResNeXt-110
in case study 3; Seq2Seq and CTC in Fig. 9(b)). Inception-BN is never mentioned."""


def _weight(w: int, p: int) -> float:
    if (w, p) == (1, 1):
        return 10.0
    return 3.0 if w == p else 1.0


def fit_speed_coefficients(
    jt: JobType,
    facts: SimFacts,
    targets: tuple[tuple[int, int, float], ...] | None = None,
) -> tuple[float, float, float, float, float]:
    """(a, b, c, d, e) >= 0 minimising the weighted relative error of 1/speed on `targets`
    (default SPEED_TARGETS[jt.model]); (1,1) is converted from co-located to spread."""
    points = SPEED_TARGETS[jt.model] if targets is None else targets
    beta = locality_gain(jt, facts)
    rows, rhs = [], []
    for w, p, speed in points:
        if (w, p) == (1, 1):
            speed = speed * (1.0 - beta)  # measured on one server: remove locality speed-up
        weight = _weight(w, p)
        # 1/speed = x . theta, divided by 1/speed: relative error, NNLS keeps theta >= 0.
        rows.append(np.array([1.0 / w, 1.0, w / p, w, p]) * speed * weight)
        rhs.append(weight)
    theta, _ = nnls(np.array(rows), np.array(rhs))
    return tuple(float(x) for x in theta)  # type: ignore[return-value]


def fit_all(
    catalogue: tuple[JobType, ...] = DL2_CATALOGUE,
    facts: tuple[SimFacts, ...] = DL2_SIM_FACTS,
) -> dict[str, tuple[float, float, float, float, float]]:
    """`fit_speed_coefficients` for every catalogue model."""
    named = sim_facts_by_name(facts)
    return {jt.model: fit_speed_coefficients(jt, named[jt.model]) for jt in catalogue}


def spread(workers: int, ps: int) -> JobPlacement:
    """Every worker and PS on its own server."""
    return JobPlacement.of(range(workers), range(workers, workers + ps))


def colocated(workers: int, ps: int) -> JobPlacement:
    """The whole job on server 0."""
    return JobPlacement.of([0] * workers, [0] * ps)


def placed_speed(model: SpeedModel, jt: JobType, workers: int, ps: int, pl: JobPlacement):
    """Speed of a lone job with the given placement."""
    n = 1 + max(pl.workers + pl.ps)
    return float(model.placed([jt.type_index], [workers], [ps], [pl], n)[0])


def dl2_speedup_curve(
    model_name: str, workers: tuple[int, ...] = (1, 2, 4, 8), speed_model: SpeedModel | None = None
) -> dict[int, float]:
    """Speed with w workers and w PSs load-balanced, relative to one worker and one PS on one
    server: DL2 section 2.2's experiment."""
    sm = speed_model or SpeedModel()
    jt = by_name()[model_name]
    ref = placed_speed(sm, jt, 1, 1, colocated(1, 1))
    out = {}
    for w in workers:
        pl = colocated(1, 1) if w == 1 else spread(w, w)
        out[w] = placed_speed(sm, jt, w, w, pl) / ref
    return out


def harmony_packing(
    models: tuple[str, ...] = HARMONY_TABLE_I, speed: SpeedConfig | None = None
) -> dict[str, float]:
    """Harmony case study 1: slowdown of each 1-worker + 1-PS job when the jobs are bin-packed
    two per server on len(models)/2 testbed servers, against running alone on a server.

    Both runs go through the simulator (requested allocation, bin-packing placement); the
    slowdown is 1 - packed speed / standalone speed, as Harmony defines it."""
    speed = speed or SpeedConfig()
    jobs = tuple(JobSpec(i, m, epochs=1e6, arrival_s=0.0) for i, m in enumerate(models))
    sched = Scheduler(RequestedAllocation(), BinPacking())

    def first_rates(js: tuple[JobSpec, ...], n_servers: int) -> dict[int, float]:
        cfg = SimConfig(cluster=ClusterConfig(n_servers=n_servers), speed=speed)
        events = Simulator(js, sched, cfg).run(until_s=0.0).events
        return {e.job_id: e.value for e in events if e.kind == "alloc"}

    packed = first_rates(jobs, (len(models) + 1) // 2)
    alone = {j.job_id: first_rates((j,), 1)[j.job_id] for j in jobs}
    return {m: 1.0 - packed[i] / alone[i] for i, m in enumerate(models)}


def main() -> None:
    """Print the calibration figures."""
    sm = SpeedModel()
    print("speed coefficients (NNLS re-fit) vs catalogue:")
    for jt in DL2_CATALOGUE:
        fitted = fit_all()[jt.model]
        print(f"  {jt.model:13s} fit {[f'{x:.3g}' for x in fitted]} cat {list(jt.coefficients)}")
    for jt in DL2_CATALOGUE:
        curve = dl2_speedup_curve(jt.model, (1, 2, 4, 8, 16), sm)
        best = max(curve.values())
        print(f"  {jt.model:13s} DL2 curve {[round(v, 2) for v in curve.values()]} best {best:.2f}")
    slow = harmony_packing()
    print("harmony packing:", {k: round(v, 3) for k, v in slow.items()})
    print(f"  average {np.mean(list(slow.values())):.3f}")


if __name__ == "__main__":
    main()
