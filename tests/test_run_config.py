"""The run's config from the nightly flow's parameters: budgets, options, skipping, seeds."""

import json

import pytest

from pipelines.config import budgeted, run_config, stage_seed
from pipelines.registry import SYSTEMS
from tests.conftest import DATA
from tracelib.provenance import canonical_json


def _config(**kw):
    return run_config(SYSTEMS, **kw)


def _without_seeds(value):
    if isinstance(value, dict):
        return {k: _without_seeds(v) for k, v in value.items() if k != "seed"}
    if isinstance(value, list):
        return [_without_seeds(v) for v in value]
    return value


def test_budgets_and_options_give_the_configs_they_gave_before_the_registry():
    # run_configs.json was written by the code that named every system in config.py (and
    # checked equal to it for these cases, seeds aside); the registry must size each system
    # exactly as that code did.
    golden = json.loads((DATA / "run_configs.json").read_text())
    assert {"smoke", "default", "large"} <= set(golden)
    for name, case in golden.items():
        cfg = _config(seed=0, options=case["options"], **case["args"])
        got = _without_seeds(json.loads(canonical_json(cfg.to_dict())))
        assert got == case["config"], name


def test_default_budget_is_the_documented_one():
    cfg = _config()
    learned = cfg.learned
    assert list(learned) == ["dl2", "harmony", "chic", "rl-taps"]
    dl2 = learned["dl2"]
    assert dl2.finetune.max_updates == 3000 and dl2.warmup.max_epochs == 40
    assert learned["harmony"].stage.train.updates == 300
    assert (
        learned["chic"].train.cem.iterations == 6 and learned["rl-taps"].stage.reinforce.epochs == 4
    )
    assert budgeted(cfg, "default") == cfg


def test_budgets_order_every_system():
    smoke, default, large = (_config(budget=b).learned for b in ("smoke", "default", "large"))
    for pick in (
        lambda c: c["dl2"].finetune.max_updates,
        lambda c: c["dl2"].grouped.iterations,
        lambda c: c["harmony"].stage.train.updates,
        lambda c: c["chic"].train.cem.iterations,
        lambda c: c["rl-taps"].stage.reinforce.epochs,
        lambda c: c["rl-taps"].arena.reinforce.epochs,
    ):
        assert pick(smoke) < pick(default) < pick(large)


def test_options_skips_and_unknown_names():
    cfg = _config(seed=7, budget="smoke", options={"dl2_updates": 50, "chic_iterations": 0})
    dl2 = cfg.learned["dl2"]
    assert dl2.finetune.max_updates == 50 and dl2.warmup.max_epochs == 2
    assert "chic" not in cfg.learned  # 0 iterations skips Chic
    only = _config(systems=["rl-taps"])
    assert list(only.learned) == ["rl-taps"]
    assert _config(systems=[s.name for s in SYSTEMS]) == _config()
    with pytest.raises(ValueError, match="unknown learned system"):
        _config(systems=["decima"])
    with pytest.raises(ValueError, match="unknown budget"):
        _config(budget="huge")
    with pytest.raises(ValueError, match="unknown option"):
        _config(options={"dl2_update": 5})


def test_chic_trains_with_its_five_deviations_unless_asked_for_the_paper():
    chic = _config().learned["chic"]
    for cfg in (chic.train.cem_config(), chic.arena.cem_config("chic")):
        assert cfg.mask_absent and cfg.work_conserving and cfg.shared_sequence
        assert cfg.smoothing == 1.0
    # The warm start from Optimus: on in Chic's own scenario, off in the arena (measured).
    assert chic.train.cem_config().teacher == "optimus"
    assert chic.arena.cem_config("chic").teacher is None
    paper = _config(options={"chic_as_published": True}).learned["chic"]
    for cfg in (paper.train.cem_config(), paper.arena.cem_config("chic")):
        assert not (cfg.mask_absent or cfg.work_conserving or cfg.shared_sequence)
        assert cfg.smoothing == 0.7 and cfg.teacher is None
    # Nothing else moves: the budget's sizes stay.
    assert paper.train.cem.iterations == chic.train.cem.iterations
    assert paper.arena.cem.n_trajectories == chic.arena.cem.n_trajectories


def test_dl2_trains_with_its_deviations_unless_asked_for_the_paper():
    from models.dl2.config import PUBLISHED_DEVIATIONS

    dl2 = _config().learned["dl2"]
    paper = _config(options={"dl2_as_published": True}).learned["dl2"]

    def at(cfg, path):
        for name in path.split("."):
            cfg = getattr(cfg, name)
        return cfg

    for name, (published, default) in PUBLISHED_DEVIATIONS.items():
        assert at(dl2, name) == default and at(paper, name) == published, name
    # the paper's choices: DRF's decisions, a decision every 20-minute slot, job-aware
    # exploration, the plain policy gradient at lr 0.0001
    ft, paper_ft = dl2.finetune_config(), paper.finetune_config()
    assert (paper.teacher, paper_ft.net.interval_s, paper_ft.exploration) == ("drf", None, True)
    assert (paper_ft.clip, paper_ft.kl_init, paper_ft.lr) == (None, 0.0, 1e-4)
    assert (ft.clip, ft.kl_init, ft.lr) == (0.2, 1.0, 1e-4)
    assert paper.recorder_config().net.interval_s is None
    recorder = dl2.recorder_config()
    assert recorder.teacher == "searched" and recorder.net.bundle_first
    assert recorder.resolved_order() == "rows"
    assert recorder.net.interval_s == ft.net.interval_s == 600.0
    # Nothing else moves: the budget's sizes stay; a teacher option still applies.
    assert paper.finetune.max_updates == dl2.finetune.max_updates
    assert paper.warmup.max_epochs == dl2.warmup.max_epochs
    fifo = _config(options={"dl2_as_published": True, "dl2_teacher": "fifo"}).learned["dl2"]
    assert fifo.teacher == "fifo" and not fifo.recorder_config().net.bundle_first


def test_every_stage_gets_its_own_seed_spawned_from_the_run_seed():
    cfg = _config(seed=7)
    seeds = {
        "synthetic": cfg.synthetic.seed,
        "derive": cfg.derive.seed,
        "interference": cfg.interference.seed,
        "dl2": cfg.learned["dl2"].seed,
        "harmony": cfg.learned["harmony"].stage.seed,
        "chic": cfg.learned["chic"].train.seed,
        "rl-taps": cfg.learned["rl-taps"].stage.seed,
    }
    # Copied, they were all 7 and the streams built from them identical.
    assert len(set(seeds.values())) == len(seeds)
    assert cfg.learned["chic"].eval.seed == seeds["chic"]  # one seed per system
    assert 7 not in seeds.values()
    assert seeds["interference"] == stage_seed(7, "interference")
    # Deterministic, a function of the run seed, and the same whichever systems train.
    assert _config(seed=7) == cfg
    assert _config(seed=8).synthetic.seed != cfg.synthetic.seed
    assert _config(seed=7, systems=["rl-taps"]).learned["rl-taps"] == cfg.learned["rl-taps"]


def test_harmony_holds_out_sequences_of_the_run_seed_never_its_training_ones():
    from tracelib.scenarios.harmony import sequences, split_seed

    runs = [_config(seed=s).learned["harmony"].stage for s in (7, 8)]
    # Each run is judged on its own held-out sequences (a fixed set made every run's pairs
    # the same sequences, counted once per run when pooled).
    assert runs[0].eval.seed != runs[1].eval.seed
    for stage in runs:
        train = sequences(stage.arrivals, stage.n_train_sequences, split_seed(stage.seed, "train"))
        val = sequences(stage.arrivals, stage.n_val_sequences, split_seed(stage.seed, "validation"))
        held = sequences(stage.eval.arrivals, stage.eval.n_sequences, stage.eval.seed)
        assert not set(held) & (set(train) | set(val))
    assert _config(seed=7).learned["harmony"].stage.eval == runs[0].eval  # deterministic
