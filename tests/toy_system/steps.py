"""The toy's steps: a "training" task whose score is a function of its seed and steps, an
evaluation task that reads the warehouse, and a report section."""

from __future__ import annotations

from dataclasses import dataclass

from prefect import task

from pipelines.retries import IO_RETRIES
from pipelines.sections import Section, Table
from pipelines.system import Pending, RunContext
from pipelines.system_steps import nothing
from warehouse import connect


@dataclass(frozen=True)
class ToyConfig:
    steps: int = 5
    flavour: str = "plain"
    verbose: bool = False
    seed: int = 0
    workload_set: str = ""


def config() -> ToyConfig:
    """The toy's run config at the default budget."""
    return ToyConfig()


@task(name="toy-train", **IO_RETRIES)
def train_task(cfg: ToyConfig) -> dict:
    return {"score": cfg.seed % 1000 + cfg.steps}


@task(name="toy-evaluate", **IO_RETRIES)
def evaluate_task(warehouse: str | None, cfg: ToyConfig) -> str:
    with connect(warehouse) as con:
        [(n,)] = con.sql(
            "SELECT count(*) FROM workloads WHERE derivation = ?", params=[cfg.workload_set]
        ).fetchall()
    return f"{n} workloads in {cfg.workload_set}"


prepare = arena = nothing


def train(run: RunContext, cfg: ToyConfig, pending: Pending) -> Pending:
    return {"train": train_task.submit(cfg)}


def evaluate(run: RunContext, cfg: ToyConfig, pending: Pending) -> Pending:
    return {"evaluation": evaluate_task.submit(run.warehouse, cfg, wait_for=[pending["train"]])}


def collect(run: RunContext, cfg: ToyConfig, pending: Pending) -> dict:
    return {
        **pending["train"].result(),
        "flavour": cfg.flavour,
        "evaluation": pending["evaluation"].result(),
    }


def report(con) -> list[Section]:
    return [Section("Toy system", "A fifth system.", [Table("toy table", ["a"], [["1"]])])]


def loaders() -> dict:
    return {}
