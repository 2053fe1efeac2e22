"""RL-TAPS' stage configs hand REINFORCE the same `ReinforceConfig`s and its arena training
the same `ArenaTrainConfig`, and so the same input keys of the policies already trained, at
every budget and with every option that changes them."""

from __future__ import annotations

import json
from dataclasses import asdict

from pipelines.trained import input_key
from tests.frozen_configs import frozen_cases, learned_run_config

OPTIONS = {
    "": {},
    "/as_published": {"as_published": True},
    "/epochs=3,arena_epochs=0": {"epochs": 3, "arena_epochs": 0},
}
"""The options of the frozen cases (`rltaps_algorithm_configs.json`), by the case's suffix."""


def handed(budget: str, options: dict) -> dict:
    """What the stages of `schedlab run` hand REINFORCE and the arena training, and the part
    of each input key the configs decide (the arena's also hashes the workload set's
    frames), as JSON."""
    cfg = learned_run_config("rl-taps", "rltaps", options, budget)
    train = {}
    for stage in cfg.train_configs():
        rl = stage.reinforce_config()
        train[stage.mode] = {
            "reinforce": asdict(rl),
            "key": input_key(stage.init, asdict(rl)),
        }
    arena = None
    if cfg.arena is not None:
        tr = cfg.arena.train_config()
        arena = {
            "train": asdict(tr),
            "key": input_key(cfg.arena.init, tr),
            "sequences": [cfg.arena.train_sequences, cfg.arena.val_sequences],
            "workload_set": cfg.arena.workload_set,
        }
    return json.loads(json.dumps({"train": train, "arena": arena}))


def test_the_trainers_get_the_configs_the_copying_stage_configs_gave_them():
    # Written by the stage configs that copied their fields into `ReinforceConfig` and
    # `ArenaTrainConfig` (`reinforce_config()` of `RLTapsStageConfig`, `train_config()` of
    # `RLTapsArenaConfig` before the nesting), for every budget, with and without options.
    cases = frozen_cases("rltaps_algorithm_configs.json", OPTIONS)
    for name, budget, options, expected in cases:
        assert handed(budget, options) == expected, name


def test_the_arena_training_defaults_to_the_evaluations_simulator():
    from models.evaluation import eval_setting
    from models.rltaps.config import arena_training

    trained = arena_training()
    assert trained.sim == eval_setting()
    assert (trained.env.cluster, trained.env.window) == (eval_setting().cluster, 20)
