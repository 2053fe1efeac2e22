"""RL-TAPS' shipped starting policy: it describes this simulator, its file is what its
description says, it is refused with a reason when it does not fit, and the pretraining
command keeps the seed that does best on the selection sequences, reproducibly."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import numpy as np
import pytest

from models.rltaps import pretrained
from models.rltaps.config import MODES
from models.rltaps.policy import job_sequences, scheduler_episodes
from models.rltaps.pretrained import (
    dynamics_fingerprint,
    load_shipped,
    pretrain,
    pretrain_config,
    selection_seeds,
    weights_sha256,
)
from models.rltaps.stage_config import RLTapsStageConfig
from pipelines.config import run_config
from pipelines.registry import SYSTEMS
from tracelib.envs.gpu import GpuEnvConfig

TINY = {
    "n_jobs": 6,
    "max_steps": 40,
    "train_sequences": 1,
    "val_sequences": 1,
    "episodes": 2,
    "batch_sequences": 1,
    "epochs": 1,
    "refresh_every": 1,
}


@pytest.mark.parametrize("mode", MODES)
def test_the_shipped_policy_was_trained_in_this_simulator(mode):
    # Fails when a change alters the environment's dynamics, states or rewards: the shipped
    # policy then describes another simulator and must be trained again (the message names
    # the command).
    env = RLTapsStageConfig(mode=mode).env_config()
    shipped = load_shipped(mode, env)
    assert shipped.policy is not None, shipped.note
    about = shipped.description
    assert about["mode"] == mode and shipped.policy.system == about["system"]
    assert weights_sha256(shipped.policy) == about["weights_sha256"]
    # Its training config is the pretraining's at the chosen seed.
    want = json.loads(json.dumps(pretrained.to_dict(pretrain_config(mode, about["chosen_seed"]))))
    assert shipped.policy.train_config == want


@pytest.mark.parametrize("mode", MODES)
def test_the_shipped_policy_reproduces_its_selection_figures(mode):
    shipped = load_shipped(mode, RLTapsStageConfig(mode=mode).env_config())
    about = shipped.description
    assert about["selection_seeds"] == selection_seeds(len(about["selection_seeds"]))
    chosen = about["selection_slowdown"][str(about["chosen_seed"])]
    assert chosen == min(about["selection_slowdown"].values())
    assert np.mean(about["selection_slowdowns"]) == pytest.approx(chosen, rel=1e-12)
    cfg = pretrain_config(mode, about["chosen_seed"])
    sequences = job_sequences(about["selection_seeds"][:3], cfg.n_jobs)
    eps = scheduler_episodes({"p": shipped.policy}, sequences, cfg.env)["p"]
    assert [ep.slowdown for ep in eps] == about["selection_slowdowns"][:3]


@pytest.mark.parametrize("mode", MODES)
def test_the_selection_and_pretraining_sequences_are_not_the_evaluations(mode):
    about = json.loads((pretrained.PRETRAINED_DIR / f"{mode}.json").read_text())
    used = set(about["selection_seeds"]) | set(about["val_seeds"])
    used |= {s for seeds in about["train_seeds"] for s in seeds}
    # The benchmarks' stage seeds, and the stage seeds `schedlab run --seed k` spawns.
    stage_seeds = list(range(50))
    stage_seeds += [run_config(SYSTEMS, seed=k).learned["rl-taps"].stage.seed for k in range(20)]
    for seed in stage_seeds:
        assert not used & set(RLTapsStageConfig(seed=seed, test_sequences=30).test_seeds())


def test_the_fingerprint_follows_the_dynamics():
    env = GpuEnvConfig(max_steps=200, resume_cost_s=0.0)
    assert dynamics_fingerprint(env, 30) == dynamics_fingerprint(env, 30)
    assert dynamics_fingerprint(replace(env, idle_penalty=2.0), 30) != dynamics_fingerprint(env, 30)
    assert dynamics_fingerprint(replace(env, resume_cost_s=30.0), 30) != dynamics_fingerprint(
        env, 30
    )


@pytest.fixture
def copy(tmp_path):
    for mode in MODES:
        for suffix in (".pt", ".json"):
            name = f"{mode}{suffix}"
            shutil.copyfile(pretrained.PRETRAINED_DIR / name, tmp_path / name)
    return tmp_path


def test_another_simulator_or_network_or_file_is_refused_with_its_reason(copy):
    env = RLTapsStageConfig().env_config()
    assert load_shipped("nonstreaming", env, folder=copy).note == ""
    assert "hidden units" in load_shipped("nonstreaming", env, hidden=32, folder=copy).note
    about = json.loads((copy / "nonstreaming.json").read_text())
    (copy / "nonstreaming.json").write_text(json.dumps({**about, "fingerprint": "0" * 16}))
    note = load_shipped("nonstreaming", env, folder=copy).note
    assert "trained in simulator 0000000000000000" in note
    assert "python -m models.rltaps.pretrained" in note
    data = bytearray((copy / "streaming.pt").read_bytes())
    data[-100] ^= 1
    (copy / "streaming.pt").write_bytes(bytes(data))
    refused = load_shipped("streaming", env, folder=copy)
    assert refused.policy is None and "modified or replaced" in refused.note
    (copy / "streaming.json").unlink()
    assert "cannot be read" in load_shipped("streaming", env, folder=copy).note


def test_pretraining_keeps_the_best_seed_on_selection_and_is_reproducible(tmp_path):
    lines: list[str] = []
    first = pretrain(tmp_path / "a", [0, 1], ("nonstreaming",), TINY, selection=2, log=lines.append)
    about = first["nonstreaming"]
    scores = about["selection_slowdown"]
    assert set(scores) == {"0", "1"}
    assert about["chosen_seed"] == min((v, int(k)) for k, v in scores.items())[1]
    assert about["sizes"] == {**pretrained.PRETRAIN_SIZES, **TINY}
    # The written files are what the description says, and load as the shipped policy.
    shipped = load_shipped(
        "nonstreaming", pretrain_config("nonstreaming", 0, TINY).env, folder=tmp_path / "a"
    )
    assert shipped.policy is not None, shipped.note
    assert weights_sha256(shipped.policy) == about["weights_sha256"]
    # Another folder, the same seeds: the same weights.
    second = pretrain(tmp_path / "b", [0, 1], ("nonstreaming",), TINY, selection=2, log=print)
    assert second["nonstreaming"]["weights_sha256"] == about["weights_sha256"]
    # Run again on its folder, it reads each seed back instead of training it.
    lines.clear()
    pretrain(tmp_path / "a", [0, 1], ("nonstreaming",), TINY, selection=2, log=lines.append)
    assert sum("read back" in line for line in lines) == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--modes", "fast"], "unknown mode(s) fast"), (["--seeds", "1,x"], "must be integers")],
)
def test_the_command_refuses_bad_arguments_naming_them(tmp_path, capsys, args, message):
    with pytest.raises(SystemExit) as exit_:
        pretrained.main([str(tmp_path / "out"), *args])
    assert exit_.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
