"""The registry of learned systems: flags generated from option docstrings, and a fifth
system added as a folder plus a registry line."""

from pathlib import Path

import pytest

from pipelines.cli import build_parser
from pipelines.config import run_config
from pipelines.registry import SYSTEMS
from pipelines.system import Registry, field_docs
from pipelines.systems.dl2.plugin import DL2Options
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
    assert "{drf,fifo,srtf,optimus}" in text
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
        n_jobs=60,
        jobs_per_sequence=10,
        budget="smoke",
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
