"""Chic's, RL-TAPS' and Harmony's run configs hold each algorithm's config by value, and
every flag of `schedlab run` for them reaches the algorithm config that uses it: the config
its trainer receives (DL2's: `test_dl2_configs.py`)."""

from __future__ import annotations

import pytest

from pipelines.cli import build_parser
from pipelines.config import run_config
from pipelines.registry import SYSTEMS
from tests.flags import every_flag_set, flags_by_name, nested_path
from tests.frozen_configs import learned_run_config
from tests.imports import packages_loaded_by


def _chic_arena(c) -> list:
    return [c.arena.cem_config(v) for v in c.arena.variants]


def _harmony_own(c) -> list:
    """The placement trainer's config of every variant trained in Harmony's own scenario."""
    return [c.stage.train_config(v) for v in c.stage.variants]


def _rltaps_envs(c) -> list:
    return [t.reinforce_config().env for t in c.train_configs()] + [c.stage.env_config()]


NESTED_USES = {
    "chic": {
        "train.cem": lambda c: [t.cem_config() for t in c.train_configs()],
        "train.cem.scenario": lambda c: [t.cem_config().scenario for t in c.train_configs()],
        "arena.cem": _chic_arena,
        "arena.cem.scenario": lambda c: [cem.scenario for cem in _chic_arena(c)],
        # the MDP the arena trains in (`CEMConfig.env_config`)
        "arena.cem.env": lambda c: [cem.env_config for cem in _chic_arena(c)],
    },
    "rl-taps": {
        "stage.reinforce": lambda c: [t.reinforce_config() for t in c.train_configs()],
        # the environment of training and of the evaluation
        "stage.reinforce.env": lambda c: _rltaps_envs(c),
        "stage.reinforce.env.obs": lambda c: [env.obs for env in _rltaps_envs(c)],
        "stage.reinforce.env.topology": lambda c: [env.topology for env in _rltaps_envs(c)],
        "arena.reinforce": lambda c: [c.arena.train_config()],
        "arena.reinforce.env": lambda c: [c.arena.train_config().env],
    },
    "harmony": {
        "stage.reward": lambda c: [c.stage.reward],
        "stage.train": lambda c: _harmony_own(c),
        "stage.train.net": lambda c: [t.net for t in _harmony_own(c)],
        "stage.train.search": lambda c: [t.search for t in _harmony_own(c)],
        "arena.train": lambda c: [c.arena.train_config()],
        "arena.train.net": lambda c: [c.arena.train_config().net],
        "arena.train.search": lambda c: [c.arena.train_config().search],
    },
}
"""Per system, for each nested config, the algorithm configs its fields reach."""

OPTION_USES = {
    "chic": {
        "chic_iterations": lambda c: [t.cem_config().iterations for t in c.train_configs()],
        "chic_arena_iterations": lambda c: [cem.iterations for cem in _chic_arena(c)],
    },
    "rl-taps": {
        "rltaps_epochs": lambda c: [t.reinforce_config().epochs for t in c.train_configs()],
        "rltaps_arena_epochs": lambda c: [c.arena.train_config().epochs],
    },
    "harmony": {
        "harmony_updates": lambda c: [t.updates for t in _harmony_own(c)],
        "harmony_arena_updates": lambda c: [c.arena.train_config().updates],
        "harmony_gavel": lambda c: [c.stage.gavel_path],
        "harmony_online_update": lambda c: [c.online_update],
    },
}
"""Per system, where each option lands (`--<key>-as-published` has its own test below)."""

UNCHECKED = {"chic": {"chic_as_published"}, "rl-taps": {"rltaps_as_published"}, "harmony": set()}
"""Each system's flags not followed here (tested on their own)."""


@pytest.mark.parametrize("budget", ["smoke", "default", "large"])
@pytest.mark.parametrize("name", list(NESTED_USES))
def test_every_flag_reaches_the_algorithm_config_that_uses_it(name, budget):
    options, wanted = every_flag_set(budget)
    learned = run_config(SYSTEMS, budget=budget, options=options).learned[name]
    system = next(s for s in SYSTEMS if s.name == name)
    checked = set()
    for flag in system.flags():
        path = nested_path(system, flag)
        if path:
            attr, _, field_name = path.rpartition(".")
            used = NESTED_USES[name][attr](learned)
            assert used, flag.flag
            for cfg in used:
                assert getattr(cfg, field_name) == wanted[flag.dest], flag.flag
            checked.add(flag.dest)
        elif flag.dest in OPTION_USES[name]:
            got = OPTION_USES[name][flag.dest](learned)
            assert got and all(x == wanted[flag.dest] for x in got), flag.flag
            checked.add(flag.dest)
    assert {f.dest for f in system.flags()} - checked == UNCHECKED[name]


def test_a_chic_flag_wins_over_as_published():
    options = {"as_published": True, "train_cem_smoothing": 0.5}
    chic = learned_run_config("chic", "chic", options)
    cem = chic.train.cem_config()
    assert (cem.smoothing, cem.mask_absent, cem.teacher) == (0.5, False, None)
    assert chic.arena.cem_config("chic").smoothing == 0.7  # the paper's, as published


@pytest.mark.parametrize(
    ("system", "lr_flag", "choices", "absent", "switch"),
    [
        (
            "dl2",
            "--dl2-grouped-lr",
            {"--dl2-finetune-credit": ("slot", "inference")},
            ("--dl2-grouped-seed", "--dl2-finetune-net"),
            "--dl2-finetune-exploration",
        ),
        (
            "chic",
            "--chic-train-cem-lr",
            {"--chic-arena-cem-imitation-order": ("optimus", "rows")},
            ("--chic-train-cem-seed", "--chic-arena-cem-scenario-sim"),
            "--chic-train-cem-greedy",
        ),
    ],
)
def test_nested_flags_are_documented(system, lr_flag, choices, absent, switch):
    # A flag's help is its field's docstring, a Literal field's flag lists its choices, the
    # fields a run sets itself have no flag, and a switch refuses what is not a boolean.
    flags = flags_by_name(system)
    assert flags[lr_flag].help.startswith("Adam learning rate")
    for flag, values in choices.items():
        assert flags[flag].choices == values
    for flag in absent:
        assert flag not in flags
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", switch, "maybe"])


def test_an_rltaps_flag_wins_over_as_published_and_a_skipped_arena_takes_none():
    options = {
        "as_published": True,
        "stage_reinforce_teacher": "tetris",
        "arena_epochs": 0,
        "arena_reinforce_lr": 0.5,
    }
    rltaps = learned_run_config("rl-taps", "rltaps", options)
    assert rltaps.stage.reinforce_config().teacher == "tetris" and rltaps.arena is None
    flags = flags_by_name("rl-taps")
    assert flags["--rltaps-stage-reinforce-lr"].help.startswith("Adam learning rate")
    assert "--rltaps-arena-reinforce-env-window" not in flags
    assert "--rltaps-stage-reinforce-env-topology-bw-tor-ds" in flags


def test_harmonys_variants_keep_their_switches_and_its_rule_names_are_the_rules():
    from models.harmony.config import ORDER_NAMES, RULE_NAMES
    from models.harmony.placement import ORDERS, RULES

    assert tuple(RULES) == RULE_NAMES and tuple(ORDERS) == ORDER_NAMES
    harmony = learned_run_config("harmony", "harmony", {"stage_train_lr": 0.5})
    systems = {v: harmony.stage.train_config(v).system for v in harmony.stage.variants}
    assert systems == {v: v for v in harmony.stage.variants}
    assert {harmony.stage.train_config(v).lr for v in harmony.stage.variants} == {0.5}
    flags = flags_by_name("harmony")
    assert flags["--harmony-stage-train-credit"].choices == (
        "interval",
        "marginal",
        "marginal+rest",
    )
    assert "--harmony-stage-train-value-net" not in flags
    assert "--harmony-arena-train-net-n-servers" not in flags


@pytest.mark.parametrize("module", ["chic", "rltaps", "harmony"])
def test_the_command_line_reads_the_algorithm_configs_without_torch(module):
    code = (
        f"from pipelines.systems.{module}.plugin import *; "
        "from pipelines.registry import SYSTEMS; [s.flags() for s in SYSTEMS]"
    )
    assert packages_loaded_by(code, "torch") == []


def test_the_import_probe_sees_a_package_the_code_loads():
    # The torch-free checks above pass on an empty answer: the probe must be able to say no.
    assert packages_loaded_by("import torch.nn", "torch", "fastapi") == ["torch"]
