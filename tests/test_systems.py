"""The registry of learned systems: flags generated from option docstrings, and a fifth
system added as a folder plus a registry line."""

import hashlib
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import pytest

from pipelines.cli import build_parser
from pipelines.config import run_config
from pipelines.progress import QUIET
from pipelines.registry import SYSTEMS
from pipelines.system import (
    Registry,
    RunContext,
    arena_configs,
    arena_policy,
    field_docs,
    stage_seed,
)
from pipelines.systems.dl2.plugin import DL2Options
from tests.tiny_run import SMALL_RUN
from tests.toy_system import TOY

WITH_TOY = Registry([*SYSTEMS, TOY])
"""The registry with the fifth system's line added."""


def _help(parser, command: str) -> str:
    return parser._subparsers._group_actions[0].choices[command].format_help()


def test_run_flags_come_from_the_options_and_their_docstrings():
    parser = build_parser(SYSTEMS)
    text = " ".join(_help(parser, "run").split())
    for flag in (
        "--dl2-updates",
        "--dl2-warmup-epochs",
        "--no-dl2-baselines",
        "--harmony-updates",
        "--harmony-gavel",
        "--harmony-online-update",
        "--chic-iterations",
        "--chic-as-published",
        "--dl2-as-published",
        "--rltaps-epochs",
    ):
        assert flag in text, flag
    assert field_docs(DL2Options)["teacher"] in text
    assert "{searched,drf,fifo,srtf,optimus}" in text
    args = parser.parse_args(
        ["run", "--dl2-updates", "7", "--no-dl2-baselines", "--dl2-teacher", "srtf"]
    )
    assert (args.dl2_updates, args.dl2_baselines, args.dl2_teacher) == (7, False, "srtf")
    assert args.harmony_online_update is False and args.chic_iterations is None
    with pytest.raises(SystemExit):
        parser.parse_args(["run", "--dl2-teacher", "tetris"])


def test_a_fifth_system_is_a_folder_and_a_registry_line():
    cfg = run_config(WITH_TOY, seed=3, budget="smoke")
    assert list(cfg.learned) == ["dl2", "harmony", "chic", "rl-taps", "toy"]
    toy = cfg.learned["toy"]
    assert toy.steps == 2 and toy.workload_set == cfg.derive.name  # its smoke budget
    assert run_config(WITH_TOY, budget="large").learned["toy"].steps == 50
    assert run_config(WITH_TOY).learned["toy"].steps == 5  # its default
    assert "toy" not in run_config(WITH_TOY, options={"toy_steps": 0}).learned
    assert toy.seed not in {cfg.learned["dl2"].seed, cfg.synthetic.seed}
    # Its flags, from its options' docstrings, and only where it is registered.
    parser = build_parser(WITH_TOY)
    assert "toy training steps" in _help(parser, "run")
    args = parser.parse_args(["run", "--toy-steps", "9", "--toy-flavour", "fancy", "--toy-verbose"])
    assert (args.toy_steps, args.toy_flavour, args.toy_verbose) == (9, "fancy", True)
    with pytest.raises(SystemExit):
        build_parser(SYSTEMS).parse_args(["run", "--toy-steps", "9"])


@pytest.mark.flow
def test_the_nightly_flow_and_the_report_run_the_fifth_system(prefect_harness, warehouse_path):
    from pipelines.flows import nightly_flow

    summary = nightly_flow(
        warehouse=str(warehouse_path),
        seed=3,
        **SMALL_RUN,
        eval_seeds=0,
        systems=["toy"],
        options={"toy_steps": 4, "toy_flavour": "fancy"},
        registry=WITH_TOY,
    )
    cfg = run_config(WITH_TOY, seed=3, budget="smoke", systems=["toy"])
    assert summary["toy"]["score"] == cfg.learned["toy"].seed % 1000 + 4
    assert summary["toy"]["flavour"] == "fancy"
    n_sets = summary["derived"][0]["workloads"]
    assert summary["toy"]["evaluation"] == f"{n_sets} workloads in dl2-synthetic"
    assert summary["dl2"] is None and summary["rltaps"] is None  # registered, not chosen
    html = Path(summary["report"]).read_text()
    assert ">Toy system</h2>" in html and "toy table" in html
    assert ">Harmony: interference-aware placement</h2>" in html  # registered: its section too


def test_arena_configs_give_each_set_its_own_seed_and_the_set_its_policy():
    chic = run_config(SYSTEMS, seed=3).learned["chic"].arena
    run = RunContext(None, QUIET, None, ("prod",), "dl2-synthetic", ("dl2-synthetic", "prod"))
    configs = arena_configs(run, chic)
    assert list(configs) == ["dl2-synthetic", "prod"]
    assert configs["dl2-synthetic"] == chic  # the synthetic set's training is unchanged
    prod = configs["prod"]
    assert prod.workload_set == "prod" and prod.seed == stage_seed(chic.seed, "prod")
    assert (
        prod.seed != chic.seed
        and replace(prod, workload_set=chic.workload_set, seed=chic.seed) == chic
    )
    only = replace(run, arena_sets=("dl2-synthetic",))
    assert list(arena_configs(only, chic)) == ["dl2-synthetic"]
    # A set's evaluation runs its own policy, else the synthetic set's, else none.
    by_set = {"dl2-synthetic": "p-syn", "prod": "p-prod"}
    assert arena_policy(by_set, "prod", "dl2-synthetic") == "p-prod"
    assert arena_policy(by_set, "other", "dl2-synthetic") == "p-syn"
    assert arena_policy({}, "prod", "dl2-synthetic") is None


def test_newest_policy_of_a_set_never_takes_another_sets(warehouse_path, tmp_path):
    from models.checkpoints import register_policy
    from pipelines.trained import newest_policy
    from warehouse import connect, transaction

    checkpoint = tmp_path / "policy.pt"
    checkpoint.write_bytes(b"weights")
    sha = hashlib.sha256(b"weights").hexdigest()
    rows = [
        ("a-1", {"workload_set": "dl2-synthetic"}, datetime(2026, 1, 1)),
        ("a-2", {"stage_config": {"workload_set": "prod"}}, datetime(2026, 1, 2)),
        ("a-3", {"workload_set": "dl2-synthetic"}, datetime(2026, 1, 3)),
    ]
    with connect(warehouse_path) as con, transaction(con):
        for policy_id, metrics, created in rows:
            register_policy(
                con,
                system="toy-arena",
                config={},
                checkpoint_path=checkpoint,
                sha256=sha,
                training_workloads=[],
                metrics=metrics,
                policy_id=policy_id,
                created_at=created,
            )
    with connect(warehouse_path) as con:
        assert newest_policy(con, "toy-arena") == "a-3"
        assert newest_policy(con, "toy-arena", "dl2-synthetic") == "a-3"
        assert newest_policy(con, "toy-arena", "prod") == "a-2"  # from its stage config
        assert newest_policy(con, "toy-arena", "new-trace") is None  # trains from its start
