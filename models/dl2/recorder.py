"""Decision logs for DL2's supervised warm-up, recorded from outside the heuristic.

The simulator runs a workload through a `SimSession`. At each decision the heuristic is
asked for its allocation (`teacher.allocate(snapshot)`, nothing else: it does not know it
is recorded); that allocation is then rebuilt as a sequence of DL2 actions through a fresh
`AllocationBuilder`: worker+PS pairs first, in the order the teacher adds them (`order`),
then single workers and PSs, then stop when anything else is still valid. Before each step
the encoded observation, the action mask (what a DL2 policy of `cfg.net` may do there,
`networks.policy_mask`, bundle rule included) and the action are logged. The replay must
reproduce the heuristic's allocation exactly (else `ReplayMismatch`), and the heuristic's
own allocation and placement are what the simulator receives, so the recorded run is the
run `simulate(jobs, Scheduler(teacher, placement), sim)` would make.

    frame = record_decisions({"w0": jobs}, "drf", RecorderConfig())   # decision_traces rows
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import polars as pl

from models.contracts import KINDS, DecisionTraces
from models.dl2.config import DL2NetConfig, RecorderConfig
from models.dl2.networks import policy_mask
from models.dl2.policy import workload_seeds
from models.heuristics.common import nominal_remaining_s
from models.heuristics.registry import ALLOCATIONS, PLACEMENTS
from tracelib.envs.observation import encode_allocation, refresh_allocation_row
from tracelib.progress import ProgressFn, no_progress
from tracelib.provenance import code_version
from tracelib.sim.builder import Action, AllocationBuilder
from tracelib.sim.engine import SimResult, Simulator
from tracelib.sim.jobs import JobSpec, jobs_from_frame
from tracelib.sim.policy import AllocationPolicy, Scheduler
from tracelib.sim.snapshot import Allocation, Snapshot
from warehouse.io import column_types

Workloads = Mapping[str, Sequence[JobSpec]] | pl.DataFrame | Iterable[tuple[str, Sequence[JobSpec]]]
"""workload id -> jobs; or a frame of `workload_jobs` rows (grouped by workload_id)."""


class ReplayMismatch(RuntimeError):
    """The action sequence did not rebuild the heuristic's allocation."""


def as_workloads(workloads: Workloads) -> list[tuple[str, tuple[JobSpec, ...]]]:
    """(workload id, jobs) pairs from any accepted form, in a stable order."""
    if isinstance(workloads, pl.DataFrame):
        ids = workloads["workload_id"].unique(maintain_order=True).to_list()
        return [
            (str(w), jobs_from_frame(workloads.filter(pl.col("workload_id") == w))) for w in ids
        ]
    items = workloads.items() if isinstance(workloads, Mapping) else workloads
    return [(str(w), tuple(jobs)) for w, jobs in items]


def record_decisions(
    workloads: Workloads,
    teacher: AllocationPolicy | str | None = None,
    cfg: RecorderConfig | None = None,
    **options: Any,
) -> pl.DataFrame:
    """`decision_traces` rows of `teacher` (default `cfg.teacher`) run over every workload:
    the frame of `record_runs` with the same arguments (`options`: its keyword options,
    `run_id`, `trace_version` and `progress`, called with (workloads done, total) after
    each)."""
    frame, _ = record_runs(workloads, teacher, cfg, **options)
    return frame


def record_runs(
    workloads: Workloads,
    teacher: AllocationPolicy | str | None = None,
    cfg: RecorderConfig | None = None,
    *,
    run_id: str = "adhoc",
    trace_version: str = "",
    progress: ProgressFn = no_progress,
) -> tuple[pl.DataFrame, dict[str, SimResult]]:
    """`record_decisions` plus each workload's simulation result (the teacher's run)."""
    cfg = cfg or RecorderConfig()
    if teacher is None or isinstance(teacher, str):
        teacher_name = teacher or cfg.teacher
        policy = ALLOCATIONS.create(teacher_name)
    else:
        policy, teacher_name = teacher, teacher.name
    placement = PLACEMENTS.create(cfg.placement)
    order = cfg.resolved_order()
    if order == "teacher" and not hasattr(policy, "allocate_in_order"):
        raise ValueError(f"teacher {teacher_name!r} does not give its order (allocate_in_order)")
    # The teacher decides at the student's interval, so the recorded states are the
    # states the student meets (DL2NetConfig.interval_s; None: every slot).
    timed = _AtInterval(policy, cfg.net.interval_s, cfg.net.trigger)
    obs_json = json.dumps(
        {
            "window": cfg.net.window,
            "models": list(cfg.net.models),
            "slots_scale": cfg.net.slots_scale,
            "epochs_scale": cfg.net.epochs_scale,
            "bundle_first": cfg.net.bundle_first,
            "interval_s": cfg.net.interval_s,
            "trigger": cfg.net.trigger,
        },
        sort_keys=True,
    )
    items = as_workloads(workloads)
    seeds = workload_seeds(cfg.seed, len(items))
    columns: dict[str, list[Any]] = {c: [] for c in DecisionTraces.to_schema().columns}
    results: dict[str, SimResult] = {}
    for (workload_id, jobs), seed in zip(items, seeds, strict=True):
        sim_cfg = replace(cfg.sim, window=cfg.net.window, seed=seed)
        sim = Simulator(jobs, Scheduler(timed, placement), sim_cfg)
        _check_catalogue(sim.catalogue, cfg.net.models)
        session = sim.session()
        while not session.done:
            snap = session.snapshot
            if order == "teacher":
                alloc, trail = policy.allocate_in_order(snap)
            else:
                alloc, trail = policy.allocate(snap), None
            for step, row in enumerate(replay(snap, alloc, order, cfg.net, trail)):
                time_s, n_jobs, obs, mask, action, kind, job_index = row
                columns["run_id"].append(run_id)
                columns["workload_id"].append(workload_id)
                columns["teacher"].append(teacher_name)
                columns["seed"].append(seed)
                columns["decision"].append(snap.decision)
                columns["step"].append(step)
                columns["time_s"].append(time_s)
                columns["n_jobs"].append(n_jobs)
                columns["obs_window"].append(cfg.net.window)
                columns["n_features"].append(cfg.net.n_features)
                columns["observation"].append(obs)
                columns["mask"].append(mask)
                columns["action"].append(action)
                columns["kind"].append(kind)
                columns["job_index"].append(job_index)
                columns["obs_config"].append(obs_json)
                columns["trace_version"].append(trace_version)
                columns["code_version"].append(code_version())
            session.submit(alloc, placement.place(snap, alloc, session.rng))
        results[workload_id] = session.result()
        progress(len(results), len(items))
    frame = pl.DataFrame(columns, schema=column_types(DecisionTraces))
    return frame, results


class _AtInterval:
    """A teacher deciding every `interval_s` seconds (None: every slot), or at every event
    with `trigger="events"`, nothing else changed: the recording's decisions happen when
    the student's will."""

    def __init__(
        self, policy: AllocationPolicy, interval_s: float | None, trigger: str = "interval"
    ) -> None:
        self.policy = policy
        self.name = policy.name
        self.interval_s = interval_s
        self.trigger = trigger
        self.uses_oracle = policy.uses_oracle

    def allocate(self, snap: Snapshot) -> Allocation:
        """Never called: the recorder asks the teacher itself."""
        raise RuntimeError("the recorder asks the teacher directly")


def _check_catalogue(catalogue, models: tuple[str, ...]) -> None:
    ordered = tuple(jt.model for jt in sorted(catalogue, key=lambda jt: jt.type_index))
    if ordered != tuple(models):
        raise ValueError(f"observation models {models} do not match the catalogue {ordered}")


def replay(
    snap: Snapshot,
    alloc: Allocation,
    order: str,
    net: DL2NetConfig,
    trail: Sequence[tuple[int, int, int]] | None = None,
) -> list[tuple]:
    """The DL2 action sequence that rebuilds `alloc` on `snap`, one tuple per step, masks as
    a policy of config `net` sees them (`policy_mask`). Order "teacher" replays `trail`, the
    teacher's own additions ((job row, workers, PSs) of 1 each: both, worker, PS), as given:
    (time_s, n_jobs, observation rows (list of float), mask (3 n_jobs + 1 bools), action in
    the 3J + 1 space, kind, job id or None). Raises ReplayMismatch if it does not rebuild it."""
    builder = AllocationBuilder(snap)
    n = len(builder.jobs)
    obs_cfg = net.obs
    window, actions = obs_cfg.window, net.actions
    if n > window or any(job_id not in builder.index for job_id in alloc.counts):
        raise ReplayMismatch(
            f"decision {snap.decision}: the teacher allocated jobs outside the first {window} "
            "visible ones (set the simulator's window to the observation's)"
        )
    if n == 0:
        return []
    target = [alloc.get(j.job_id) for j in builder.jobs]
    pairs = [min(w, p) for w, p in target]
    steps: list[tuple] = []
    obs = encode_allocation(builder, obs_cfg)

    def act(row: int | None, kind: str) -> None:
        mask = policy_mask(builder, net)
        action = actions.stop if row is None else actions.of(row, KINDS.index(kind))
        if not mask[action]:
            raise ReplayMismatch(
                f"decision {snap.decision}: the teacher's {kind} for job row {row} is not a "
                "valid action at its turn: the order differs from the teacher's, or the "
                "teacher does not give every job a worker+PS pair first (record it with "
                "DL2NetConfig(bundle_first=False))"
            )
        trimmed = np.concatenate([mask[actions.rows(n)], mask[actions.stop :]])
        steps.append(
            (
                snap.time_s,
                n,
                obs[:n].reshape(-1).tolist(),
                trimmed.tolist(),
                action,
                kind,
                None if row is None else builder.jobs[row].job_id,
            )
        )
        if row is not None:
            if not builder.step(row, Action(KINDS.index(kind))):
                raise ReplayMismatch(f"decision {snap.decision}: {kind} on row {row} failed")
            refresh_allocation_row(obs, builder, row)

    if order == "teacher":
        if trail is None:
            raise ValueError("order 'teacher' needs the teacher's additions (trail)")
        for row, workers, ps in trail:
            act(row, _TRAIL_KINDS[(workers, ps)])
    for row in _pair_order(builder, pairs, order, snap) if order != "teacher" else ():
        act(row, "both")
    for row in range(n):
        w, p = target[row]
        for _ in range(w - builder.workers[row]):
            act(row, "worker")
        for _ in range(p - builder.ps[row]):
            act(row, "ps")
    if policy_mask(builder, net)[:-1].any():
        act(None, "stop")
    if dict(builder.allocation().counts) != dict(alloc.counts):
        raise ReplayMismatch(
            f"decision {snap.decision}: replay built {dict(builder.allocation().counts)}, the "
            f"teacher {dict(alloc.counts)}"
        )
    return steps


_TRAIL_KINDS = {(1, 1): "both", (1, 0): "worker", (0, 1): "ps"}


def _pair_order(builder: AllocationBuilder, pairs: list[int], order: str, snap: Snapshot):
    """Rows receiving worker+PS pairs, one per pair, in the teacher's order (a generator:
    "share" reads the builder's dominant shares as the pairs are added)."""
    left = list(pairs)
    n = len(left)
    if order == "share":
        while True:
            candidates = [(builder.dominant_share(i), i) for i in range(n) if left[i] > 0]
            if not candidates:
                return
            _, i = min(candidates)
            left[i] -= 1
            yield i
    if order == "rows":
        # one pair each by arrival (what bundle_first asks), then each job's other pairs
        for i in range(n):
            if left[i] > 0:
                left[i] -= 1
                yield i
        ranked = list(range(n))
    elif order == "arrival":
        ranked = list(range(n))
    elif order == "remaining":
        rem = [nominal_remaining_s(snap, j) for j in builder.jobs]
        ranked = sorted(range(n), key=lambda i: (rem[i], i))
    else:
        raise ValueError(f"unknown order {order!r}")
    for i in ranked:
        for _ in range(left[i]):
            yield i
