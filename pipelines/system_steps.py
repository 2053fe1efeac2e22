"""What every learned system's `steps.py` (pipelines/system.py `Steps`) shares: one Prefect
task that runs any of its stages, waiting on futures and reading them back, and the report
table of its own evaluation's view, and what their arena loaders check and compose.

A system's steps name their stages and what each waits for; `submit_stage` runs a stage
function `stage(warehouse, *args, progress)` as a task of the given name, inside a
progress line, and returns its result as a dict (`asdict`). Prefect resolves the futures
among `args` before the stage runs, so a stage gets the dicts its inputs returned.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict
from typing import Any

from prefect import task

from models.evaluation import EvalConfig, LearnedPolicy, NotApplicable
from pipelines.progress import QUIET, Reporter
from pipelines.retries import IO_RETRIES
from pipelines.sections import Section, exists, frame_table
from pipelines.system import ArenaPolicies, Pending, RunContext
from tracelib.sim import DecisionPolicy, Scheduler
from warehouse import read_frame


@task(name="system-stage", **IO_RETRIES)
def stage_task(
    stage: Callable[..., Any],
    label: str,
    warehouse: str | None,
    args: tuple,
    progress: Reporter = QUIET,
) -> dict:
    """Run `stage(warehouse, *args, progress)` inside the progress line `label`; its
    result (a dataclass) as a dict."""
    with progress.stage(label):
        return asdict(stage(warehouse, *args, progress))


def submit_stage(
    name: str,
    label: str,
    stage: Callable[..., Any],
    run: RunContext,
    *args: Any,
    wait_for: Iterable[Any] = (),
) -> Any:
    """Submit `stage` as the task `name` (its Prefect task name, e.g. "chic-train"), after
    `wait_for`; the future of its result dict."""
    task_of = stage_task.with_options(name=name)
    return task_of.submit(stage, label, run.warehouse, args, run.progress, wait_for=list(wait_for))


def results(pending: Any) -> Any:
    """`pending` with every future replaced by its result, through nested dicts."""
    if isinstance(pending, Mapping):
        return {k: results(v) for k, v in pending.items()}
    return pending.result()


def policy_ids(futures: Mapping[str, Any]) -> dict[str, str]:
    """The policy id of each training's result, by the same keys."""
    return {name: f.result()["policy_id"] for name, f in futures.items()}


def arena_entry(scheduler: str, pending: Pending) -> ArenaPolicies:
    """A system's one arena policy per set (`pending["arena"]`: set -> training future)
    under `scheduler`; none when it trained none."""
    return {scheduler: policy_ids(pending["arena"])} if "arena" in pending else {}


def of_system(policy: Any, ref: LearnedPolicy) -> Any:
    """The policy loaded from `ref`'s checkpoint, when it is of the system `ref` was
    registered as (its `system`); NotApplicable otherwise."""
    if policy.system != ref.system:
        raise NotApplicable(f"{ref.policy_id}: checkpoint of system {policy.system!r}")
    return policy


def placed(allocation: Any, cfg: EvalConfig) -> DecisionPolicy:
    """An allocation policy placed by the evaluation's default placement (DL2's: load
    balancing)."""
    from models.heuristics.registry import PLACEMENTS

    return Scheduler(allocation, PLACEMENTS.create(cfg.default_placement))


def nothing(run: RunContext, *_: Any) -> Pending:
    """Nothing to submit (a step a system does not need)."""
    return {}


def view_section(con, section: Section, view: str, hidden: tuple[str, ...]) -> list[Section]:
    """`section` with the view's rows as a table (less `hidden` columns: JSON configs and
    seed lists belong in SQL, not in the report) when the view exists and has any."""
    if exists(con, view):
        frame = read_frame(con, f"SELECT * FROM {view} ORDER BY ALL")
        if frame.height:
            keep = [c for c in frame.columns if c not in hidden]
            section.tables.append(frame_table(view, frame.select(keep)))
    return [section]
