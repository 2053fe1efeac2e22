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
- `harmony_packing`: Harmony case study 1 run through the simulator; `harmony_pairs`: case
  study 2 (every pair of Table I's models on one server); `calibrate_contention`: the grid
  search that fixed the contention model's scales (catalogue docstring) to them and to
  Gavel's spread of pairwise slowdowns (`pair_slowdowns`, `pair_spread`).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

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
from tracelib.sim.speed import ContentionModel, SpeedModel

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


QUIET = SpeedConfig(speed_variation=0.0, slot_noise=0.0)
"""The speed model without run-to-run variation: what a calibration experiment averages to."""

HARMONY_MILD_PAIRS = (("resnet-50", "wlm"), ("resnet-50", "seq2seq"))
"""Harmony case study 2 (Fig. 2): the pairs that interfere least."""

HARMONY_SEVERE_PAIR = ("resnext-110", "cnn-text")
"""Harmony case study 3 (Fig. 4, 5): ResNeXt-110 and CTC interfere severely."""

GAVEL_V100_QUARTILES = (0.158, 0.321, 0.516)
"""Quartiles of the slowdown (1 - paired / alone throughput) of single-GPU job pairs on a
V100 in Gavel's measured co-location throughputs (stanford-futuredata/gavel
scheduler/simulation_throughputs.json, 636 pairs with both throughputs positive)."""

GAVEL_SPREAD = (GAVEL_V100_QUARTILES[2] - GAVEL_V100_QUARTILES[0]) / GAVEL_V100_QUARTILES[1]
"""Gavel's (Q3 - Q1) / median: the shape (spread) of measured pairwise slowdowns."""


def harmony_packing(
    models: tuple[str, ...] = HARMONY_TABLE_I,
    speed: SpeedConfig | None = None,
    speed_model: SpeedModel | None = None,
) -> dict[str, float]:
    """Harmony case study 1: slowdown of each 1-worker + 1-PS job when the jobs are bin-packed
    two per server on len(models)/2 testbed servers, against running alone on a server.

    Both runs go through the simulator (requested allocation, bin-packing placement); the
    slowdown is 1 - packed speed / standalone speed, as Harmony defines it. Default: no
    run-to-run variation (`QUIET`); `speed_model` replaces the simulator's."""
    speed = speed or QUIET
    jobs = tuple(JobSpec(i, m, epochs=1e6, arrival_s=0.0) for i, m in enumerate(models))
    sched = Scheduler(RequestedAllocation(), BinPacking())

    def first_rates(js: tuple[JobSpec, ...], n_servers: int) -> dict[int, float]:
        cfg = SimConfig(cluster=ClusterConfig(n_servers=n_servers), speed=speed)
        events = Simulator(js, sched, cfg, speed_model=speed_model).run(until_s=0.0).events
        return {e.job_id: e.value for e in events if e.kind == "alloc"}

    packed = first_rates(jobs, (len(models) + 1) // 2)
    alone = {j.job_id: first_rates((j,), 1)[j.job_id] for j in jobs}
    return {m: 1.0 - packed[i] / alone[i] for i, m in enumerate(models)}


def harmony_pairs(
    models: tuple[str, ...] = HARMONY_TABLE_I, speed_model: SpeedModel | None = None
) -> dict[tuple[str, str], float]:
    """Harmony case study 2: for each pair of models, two 1-worker + 1-PS jobs on one server;
    the pair's interference level is the sum of both jobs' slowdowns against running alone
    on the server."""
    sm = speed_model or SpeedModel(QUIET)
    names = by_name()
    one = colocated(1, 1)
    alone = {m: placed_speed(sm, names[m], 1, 1, one) for m in models}
    out = {}
    for a, b in itertools.combinations(models, 2):
        types = [names[a].type_index, names[b].type_index]
        both = sm.placed(types, [1, 1], [1, 1], [one, one], 1)
        out[(a, b)] = float(2.0 - both[0] / alone[a] - both[1] / alone[b])
    return out


def pair_slowdowns(speed_model: SpeedModel | None = None) -> list[float]:
    """Each job's slowdown when two 1-worker + 1-PS jobs of every pair of catalogue models
    (a model with itself included) share one server, against alone on it."""
    sm = speed_model or SpeedModel(QUIET)
    one = colocated(1, 1)
    types = sorted(jt.type_index for jt in DL2_CATALOGUE)
    alone = {t: float(sm.placed([t], [1], [1], [one], 1)[0]) for t in types}
    out = []
    for i, a in enumerate(types):
        for b in types[i:]:
            both = sm.placed([a, b], [1, 1], [1, 1], [one, one], 1)
            out += [1.0 - both[0] / alone[a], 1.0 - both[1] / alone[b]]
    return out


def pair_spread(slowdowns: list[float]) -> float:
    """(Q3 - Q1) / median of pairwise slowdowns (compare with `GAVEL_SPREAD`)."""
    q1, q2, q3 = np.quantile(slowdowns, [0.25, 0.5, 0.75])
    return float((q3 - q1) / q2) if q2 > 0 else math.nan  # no slowdown: no shape


def contention_loss(
    packing: dict[str, float], pairs: dict[tuple[str, str], float], spread: float
) -> float:
    """How far a contention model is from Harmony II.B and Gavel: squared distance of the
    average packing slowdown from 33% (scale 2 points) and of ResNeXt-110's from 50% ("nearly
    2x", scale 5 points), plus the rank of the worse of the two mildest pairs from the
    mildest, plus the rank of ResNeXt-110 + CTC from the most severe, plus 4 x the squared
    log2 ratio of the pairwise slowdowns' spread to Gavel's."""
    ranked = sorted(pairs, key=pairs.get)
    mild_rank = max(ranked.index(p) for p in HARMONY_MILD_PAIRS)
    severe_rank = len(ranked) - 1 - ranked.index(HARMONY_SEVERE_PAIR)
    mean = float(np.mean(list(packing.values())))
    fit = ((mean - 0.33) / 0.02) ** 2 + ((packing["resnext-110"] - 0.5) / 0.05) ** 2
    shape = 4.0 * math.log2(spread / GAVEL_SPREAD) ** 2
    return fit + mild_rank + severe_rank + shape


def calibrate_contention(
    sharpness: tuple[float, ...] = (2.0, 4.0, 8.0),
    cpu_loads: tuple[float, ...] = (1.0, 1.5, 2.0, 2.5, 3.0),
    loads: tuple[float, ...] = (0.5, 0.75, 1.0, 1.25, 1.5, 2.0),
    sensitivities: tuple[float, ...] = (0.5, 1.0, 1.5, 2.0, 3.0),
    resnext: tuple[float, ...] = (2.0, 4.0, 6.0),
) -> list[tuple[float, ...]]:
    """Grid search of (CONTENTION_SHARPNESS, CPU_LOAD, CHANNEL_LOAD, SENSITIVITY,
    RESNEXT_SENSITIVITY) against Harmony II.B and Gavel (`contention_loss`), best first:
    rows (loss, sharpness, cpu load, load, sensitivity, resnext); about 25 s. The catalogue
    holds the best row of this default grid."""
    ordered = sorted(DL2_CATALOGUE, key=lambda jt: jt.type_index)
    named = sim_facts_by_name(DL2_SIM_FACTS)
    rows = []
    grid = itertools.product(sharpness, cpu_loads, loads, sensitivities, resnext)
    for n, cpu, load, sens, rx in grid:
        facts = [
            replace(named[jt.model], intf_sensitivity=rx if jt.model == "resnext-110" else 1.0)
            for jt in ordered
        ]
        sm = SpeedModel(QUIET, contention=ContentionModel(facts, load, sens, n, cpu))
        loss = contention_loss(
            harmony_packing(speed_model=sm),
            harmony_pairs(speed_model=sm),
            pair_spread(pair_slowdowns(sm)),
        )
        rows.append((loss, n, cpu, load, sens, rx))
    return sorted(rows)


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
    pairs = harmony_pairs()
    print("harmony pairs, mildest first:")
    for (a, b), v in sorted(pairs.items(), key=lambda kv: kv[1]):
        print(f"  {a:12s} + {b:12s} {v:.3f}")
    spread_now = pair_spread(pair_slowdowns())
    print(f"pairwise slowdown spread {spread_now:.2f} (Gavel {GAVEL_SPREAD:.2f})")
    print("contention grid search, best 5 (loss, sharpness, cpu load, load, sensitivity, resnext):")
    for row in calibrate_contention()[:5]:
        print("  " + ", ".join(f"{x:.3g}" for x in row))


if __name__ == "__main__":
    main()
