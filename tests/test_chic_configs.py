"""Chic's stage configs hand the trainer the same `CEMConfig`s, and so the same input keys
of the policies already trained, at every budget and with every option that changes them."""

from __future__ import annotations

import json
from dataclasses import asdict

from pipelines.trained import input_key
from tests.frozen_configs import frozen_cases, learned_run_config

OPTIONS = {
    "": {},
    "/as_published": {"as_published": True},
    "/iterations=3,arena_iterations=0": {"iterations": 3, "arena_iterations": 0},
}
"""The options of the frozen cases (`chic_algorithm_configs.json`), by the case's suffix."""


def handed(budget: str, options: dict) -> dict:
    """What the stages of `schedlab run` hand the CEM trainer, and the part of each input key
    the configs decide (the arena's also hashes the workload set's frames), as JSON."""
    cfg = learned_run_config("chic", "chic", options, budget)
    train = {}
    for t in cfg.train_configs():
        cem = t.cem_config()
        train[f"{t.variant}@{t.rate_per_hour:g}"] = {
            "cem": asdict(cem),
            "key": input_key(t.init, cem, f"train:{t.train_sequences}:val:{t.val_sequences}"),
        }
    arena = {}
    # 0 arena iterations: no arena training, no trainer config
    for v in cfg.arena.variants if cfg.arena.iterations > 0 else ():
        cem = cfg.arena.cem_config(v)
        arena[v] = {
            "cem": asdict(cem),
            "key": input_key(cfg.arena.init, cem, f"episode:{cfg.arena.jobs_per_episode}"),
            "sequences": [cfg.arena.train_sequences, cfg.arena.val_sequences],
            "workload_set": cfg.arena.workload_set,
        }
    return json.loads(json.dumps({"train": train, "arena": arena}))


def test_the_trainer_gets_the_configs_the_copying_stage_configs_gave_it():
    # Written by the stage configs that copied their fields into `CEMConfig` (the
    # `cem_config()` of `ChicTrainConfig` and `ChicArenaConfig` before the nesting), for
    # every budget, with and without options.
    for name, budget, options, expected in frozen_cases("chic_algorithm_configs.json", OPTIONS):
        assert handed(budget, options) == expected, name
