"""The counterfactual of a shadow day: its observed jobs replayed under the policy that was
shadowed, on the cluster its snapshots saw, beside what the real scheduler did.

Nothing new is simulated here: a policy that is a replay rule (`fifo`, `sjf`, `drf`,
`tiresias-las`, ...) runs through `schedlab replay`'s machinery (`pipelines.replay`, rows in
workload set `replay:<source>`), a learned family (`dl2`, `harmony`, ...) through the
learned whole-trace replay (`pipelines.replay_learned`, `replay-arena:<source>`). The
cluster is the servers of the day's newest snapshot, each with its own GPUs. What really
happened is read from the source's jobs (`observed`): mean JCT (end - submit) over the jobs
that ended within the day and mean queueing delay (start - submit) over those that
started; the replay's figures are taken over the same jobs (`compare`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import polars as pl

from pipelines.progress import QUIET, Reporter
from warehouse import read_frame

FINAL = ("completed", "failed", "killed")


@dataclass(frozen=True)
class ShadowReplay:
    """One shadow day's counterfactual replay (or why there is none)."""

    source_id: str
    policy: str
    eval_id: str | None
    note: str = ""


def shadow_replay_stage(
    warehouse: str | Path | None,
    source_id: str,
    policy: str,
    servers: dict[str, tuple[float, str | None]],
    progress: Reporter = QUIET,
) -> ShadowReplay:
    """Replay `source_id` under `policy` on `servers` (name -> (GPUs, type)) and store the
    evaluation; a policy that no replay runs, or a day that cannot be replayed, gives a
    ShadowReplay with its reason and no evaluation."""
    from models.heuristics import REPLAYS
    from pipelines.replay import ReplayConfig, ReplayInputError, replay_stage
    from pipelines.replay_learned import FAMILIES, LearnedReplayConfig, learned_replay_stage
    from tracelib.sim.replay import ReplayCluster, Unplaceable

    gpus = tuple(g for g, _ in servers.values() if g > 0)
    if not gpus:
        return ShadowReplay(source_id, policy, None, "no snapshot with GPU servers")
    try:
        if policy in REPLAYS.names():
            cluster = ReplayCluster(len(gpus), max(gpus), server_gpus=gpus)
            cfg = ReplayConfig(
                source_id, schedulers=(policy,), cluster=cluster, runner="sequential"
            )
            outcome = replay_stage(warehouse, cfg, progress)
            return ShadowReplay(source_id, policy, outcome.eval_id)
        if policy in FAMILIES:
            cfg = LearnedReplayConfig(source_id, (policy,), gpus=sum(gpus), skip_refused=True)
            learned = learned_replay_stage(warehouse, cfg, progress)
            return ShadowReplay(source_id, policy, learned.eval_id)
    except (ReplayInputError, Unplaceable) as exc:
        return ShadowReplay(source_id, policy, None, str(exc))
    return ShadowReplay(
        source_id, policy, None, f"{policy!r} is neither a replay rule nor a learned family"
    )


def observed(con, source_id: str) -> dict[str, float | int | None]:
    """What really happened on a shadow day: jobs, mean JCT over the jobs that ended, mean
    queueing delay over those that started (seconds)."""
    row = read_frame(
        con,
        "SELECT count(*) AS jobs, "
        "avg(epoch(end_time) - epoch(submit_time)) FILTER (WHERE status IN "
        "('completed', 'failed', 'killed') AND end_time IS NOT NULL) AS jct_s, "
        "avg(epoch(start_time) - epoch(submit_time)) FILTER (WHERE start_time IS NOT NULL) "
        "AS queueing_s FROM jobs WHERE source_id = ?",
        [source_id],
    ).row(0, named=True)
    return row


def compare(con, source_id: str) -> pl.DataFrame:
    """Observed against each newest replay of `source_id` (one row per replayed scheduler):
    mean JCT and queueing delay over the jobs that ended (started) in the day, in hours."""
    return read_frame(
        con,
        "WITH obs AS (SELECT job_id, status, epoch(end_time) - epoch(submit_time) AS jct_s, "
        "epoch(start_time) - epoch(submit_time) AS queueing_s FROM jobs WHERE source_id = $1), "
        "newest AS (SELECT workload_set, scheduler, arg_max(run_id, evaluated_at) AS run_id "
        "FROM eval_runs r JOIN eval_summary s USING (eval_id, scheduler, workload_set) "
        "WHERE workload_set IN ('replay:' || $1, 'replay-arena:' || $1) GROUP BY ALL) "
        "SELECT n.workload_set, n.scheduler, count(*) AS jobs, "
        "avg(o.jct_s) FILTER (WHERE o.status IN ('completed', 'failed', 'killed')) / 3600 "
        "AS observed_jct_h, "
        "avg(j.jct_s) FILTER (WHERE o.status IN ('completed', 'failed', 'killed')) / 3600 "
        "AS replayed_jct_h, "
        "avg(o.queueing_s) / 3600 AS observed_queueing_h, "
        "avg(j.start_s - j.arrival_s) FILTER (WHERE o.queueing_s IS NOT NULL) / 3600 "
        "AS replayed_queueing_h "
        "FROM newest n JOIN eval_jobs j USING (run_id) JOIN obs o USING (job_id) "
        "GROUP BY ALL ORDER BY n.workload_set, n.scheduler",
        [source_id],
    )
