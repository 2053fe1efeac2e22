"""Every flag of `schedlab run` set to a value other than its config's: what the tests that
follow each flag to the algorithm config using it (`test_dl2_configs.py`,
`test_system_flags.py`) parse and check."""

from __future__ import annotations

from dataclasses import fields

from pipelines.cli import build_parser
from pipelines.config import run_config
from pipelines.registry import SYSTEMS
from pipelines.system import Flag, LearnedSystem

STRINGS = {
    "dl2_recorder_placement": "bin-packing",
    "harmony_gavel": "g.json",
    "chic_train_cem_teacher": "srtf",
    "chic_arena_cem_teacher": "srtf",
    "chic_arena_cem_scenario_placement": "bin-packing",
    "rltaps_stage_reinforce_teacher": "tetris",
    "rltaps_arena_reinforce_env_ps_rule": "requested",
    "harmony_stage_train_teacher": "lif-line",
    "harmony_arena_train_teacher": "lif-line",
}
"""A value for each free-text flag."""

VALUES = {
    "chic_arena_cem_scenario_window": 10,
    "rltaps_stage_reinforce_env_topology_gpus_per_machine": 6,
}
"""A value for each flag whose config's next value is invalid (Chic's arena window is at
most the simulator's; a machine's GPUs split evenly between its sockets, 3 with the flags
set)."""


def at(cfg, path: str):
    """The value at a dotted path of a config ("grouped.lr")."""
    for name in path.split("."):
        cfg = getattr(cfg, name)
    return cfg


def nested_path(system: LearnedSystem, flag: Flag) -> str | None:
    """ "grouped.lr" for `--dl2-grouped-lr`; None for an option's flag (`--dl2-warmup-epochs`
    is `DL2Options.warmup_epochs`). The longest nested attribute wins (`train.cem.scenario`
    over `train.cem`)."""
    if flag.dest in {f"{system.key}_{f.name}" for f in fields(system.options)}:
        return None
    for attr in sorted(system.nested, key=len, reverse=True):
        prefix = f"{system.key}_{attr.replace('.', '_')}_"
        if flag.dest.startswith(prefix):
            name = flag.dest.removeprefix(prefix)
            if name in {f.name for f in fields(system.nested[attr].cls)}:
                return f"{attr}.{name}"
    return None


def value_for(flag: Flag, current) -> tuple[list[str], object]:
    """The flag's argv (a value other than `current`, the config's own) and the value
    the config should then hold."""
    if flag.kind == "store_true":
        return [flag.flag], True
    if flag.kind == "store_false":
        return [flag.flag], False
    if flag.choices:
        value = next(c for c in reversed(flag.choices) if c != current)
        return [flag.flag, str(value)], value
    if flag.dest in STRINGS:
        return [flag.flag, STRINGS[flag.dest]], STRINGS[flag.dest]
    if flag.dest in VALUES:
        return [flag.flag, str(VALUES[flag.dest])], VALUES[flag.dest]
    name = getattr(flag.type, "__name__", "")
    if name == "true/false":
        return [flag.flag, str(not current).lower()], not current
    if name.startswith("comma-separated"):
        # a str tuple (the network's models) less its last; numbers one more each
        value = tuple(current[:-1]) if name.endswith("str") else tuple(x + 1 for x in current)
        return [flag.flag, ",".join(str(x) for x in value)], value
    if flag.type is int:
        value = 5000 if current is None else current + 1
    elif flag.type is float:
        value = 1.5 if current is None else current * 0.5 + 0.25
    else:
        raise AssertionError(f"{flag.flag}: no test value for type {flag.type}")
    return [flag.flag, str(value)], value


def every_flag_set(budget: str) -> tuple[dict, dict]:
    """Every flag of every system given on one command line at `budget`: the options the
    command line parsed (by dest, what `run_config` takes) and the value each flag should
    put in the config (by dest)."""
    base = run_config(SYSTEMS, budget=budget).learned
    argv, wanted = ["run", "--budget", budget], {}
    for system in SYSTEMS:
        for flag in system.flags():
            path = nested_path(system, flag)
            args, value = value_for(flag, at(base[system.name], path) if path else None)
            argv += args
            wanted[flag.dest] = value
    args = build_parser().parse_args(argv)
    options = {f.dest: getattr(args, f.dest) for s in args.registry for f in s.flags()}
    assert {d: options[d] for d in wanted} == wanted  # every flag parsed to its value
    return options, wanted


def flags_by_name(system: str) -> dict[str, Flag]:
    """The `schedlab run` flags of the registered learned `system`, by flag (`--...`)."""
    return {f.flag: f for f in next(s for s in SYSTEMS if s.name == system).flags()}
