"""DL2's run config holds each algorithm's config by value: the configs the stage hands its
algorithms are the ones it handed them when it copied its own fields into them, and every
flag of `schedlab run` reaches the algorithm config that uses it."""

from __future__ import annotations

import json

import pytest

from models.dl2.config import to_dict
from models.dl2.stage_config import DL2StageConfig
from pipelines.config import run_config
from pipelines.registry import SYSTEMS
from pipelines.systems.dl2.plugin import BUDGETS, DL2, DL2Options, apply
from tests.flags import every_flag_set, nested_path
from tests.frozen_configs import frozen_cases, learned_run_config
from tests.imports import packages_loaded_by
from tracelib.configs import resized

OPTIONS = {
    "": {},
    "/as_published": {"as_published": True},
    "/updates=50": {"updates": 50},
    "/teacher=fifo,algorithm=actor-critic,iterations=0,warmup_epochs=3": {
        "teacher": "fifo",
        "algorithm": "actor-critic",
        "iterations": 0,
        "warmup_epochs": 3,
    },
}
"""The options of the frozen cases (`dl2_algorithm_configs.json`), by the case's suffix."""


def _handed(cfg: DL2StageConfig) -> dict:
    """What the stages hand the recorder and the three trainers, as JSON."""
    return {
        "recorder": to_dict(cfg.recorder_config()),
        "warmup": to_dict(cfg.warmup_config()),
        "finetune": to_dict(cfg.finetune_config()),
        "grouped": to_dict(cfg.grouped_config()),
        "trained_variants": list(cfg.trained_variants()),
        "teacher": cfg.teacher,
        "algorithm": cfg.algorithm,
    }


def test_the_algorithms_get_the_configs_the_copying_stage_config_gave_them():
    # Written by the stage config that copied its ~25 fields into each algorithm's config
    # (`recorder()`, `warmup_config()`, `finetune_config()`, `grouped_config()` of the
    # commit before the nesting), for every budget, with and without options: the
    # defaults, and so the input keys of the policies already trained, stay the same.
    for name, budget, options, expected in frozen_cases("dl2_algorithm_configs.json", OPTIONS):
        base = resized(DL2StageConfig(), BUDGETS.get(budget, {}))
        cfg = apply(base, DL2Options(**options))
        assert json.loads(json.dumps(_handed(cfg))) == expected, name
        # the run config of that budget is the same stage config
        via_run = learned_run_config("dl2", "dl2", options, budget)
        assert _handed(via_run)["grouped"] == {**expected["grouped"], "seed": via_run.seed}


def test_grouped_ppo_keeps_its_own_learning_rate_and_no_kl():
    cfg = DL2StageConfig()
    grouped, ft = cfg.grouped_config(), cfg.finetune_config()
    assert (grouped.lr, grouped.kl_init, grouped.clip) == (3e-4, 0.0, 0.2)
    assert (ft.lr, ft.clip, ft.kl_init, ft.exploration) == (1e-4, 0.2, 1.0, False)


# -- every flag of `schedlab run` ----------------------------------------------------------


NESTED_USES = {
    "recorder": lambda c: [c.recorder_config()],
    "warmup": lambda c: [c.warmup_config()],
    "finetune": lambda c: [c.finetune_config()],
    "grouped": lambda c: [c.grouped_config()],
    "net": lambda c: [c.recorder_config().net, c.finetune_config().net, c.grouped_config().net],
}
"""For each of DL2's nested configs, the algorithm configs its fields reach."""

OPTION_USES = {
    "dl2_updates": lambda c: c.finetune_config().max_updates,
    "dl2_iterations": lambda c: c.grouped_config().iterations,
    "dl2_warmup_epochs": lambda c: c.warmup_config().max_epochs,
    "dl2_teacher": lambda c: c.recorder_config().teacher,
    "dl2_algorithm": lambda c: c.algorithm_of("dl2"),
    "dl2_baselines": lambda c: c.trained_variants() != (),
}
"""Where each of DL2's options lands (`dl2_as_published` has its own test below: every
field it changes has a flag of its own, which wins)."""


@pytest.mark.parametrize("budget", ["smoke", "default", "large"])
def test_every_flag_reaches_the_algorithm_config_that_uses_it(budget):
    options, wanted = every_flag_set(budget)
    cfg = run_config(SYSTEMS, budget=budget, options=options)
    dl2 = cfg.learned["dl2"]
    checked = set()
    for flag in DL2.flags():
        path = nested_path(DL2, flag)
        if path:
            attr, _, name = path.rpartition(".")
            for used in NESTED_USES[attr](dl2):
                assert getattr(used, name) == wanted[flag.dest], flag.flag
            checked.add(flag.dest)
        elif flag.dest in OPTION_USES:
            got = OPTION_USES[flag.dest](dl2)
            assert got == wanted[flag.dest], flag.flag
            checked.add(flag.dest)
    assert {f.dest for f in DL2.flags()} - checked == {"dl2_as_published"}
    # the warm-up's network is `net`'s
    assert dl2.warmup_config().hidden == wanted["dl2_net_hidden"]
    assert dl2.warmup_config().head == wanted["dl2_net_head"]


def test_a_nested_flag_wins_over_as_published():
    # Its documentation: test_system_flags.py, test_nested_flags_are_documented.
    options = {"as_published": True, "finetune_clip": 0.1, "grouped_lr": 1e-4}
    cfg = learned_run_config("dl2", "dl2", options)
    ft = cfg.finetune_config()
    assert (ft.clip, ft.kl_init, ft.exploration) == (0.1, 0.0, True)  # the rest: the paper's
    assert cfg.grouped_config().lr == 1e-4


def test_the_command_line_reads_dl2s_algorithm_configs_without_torch():
    code = "from pipelines.systems.dl2.plugin import DL2; DL2.flags()"
    assert packages_loaded_by(code, "torch") == []
