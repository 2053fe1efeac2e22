"""The run's config from the nightly flow's parameters: budgets, overrides, skipping."""

import pytest

from pipelines.config import SYSTEMS, budgeted, run_config


def test_default_budget_is_the_documented_one():
    cfg = run_config()
    assert cfg.dl2.updates == 3000 and cfg.dl2.warmup_epochs == 40
    assert cfg.harmony.train.updates == 300 and cfg.chic.train.iterations == 6
    assert cfg.rltaps.stage.epochs == 4
    assert budgeted(cfg, "default") == cfg


def test_budgets_order_every_system():
    smoke, default, large = (run_config(budget=b) for b in ("smoke", "default", "large"))
    for pick in (
        lambda c: c.dl2.updates,
        lambda c: c.harmony.train.updates,
        lambda c: c.chic.train.iterations,
        lambda c: c.rltaps.stage.epochs,
    ):
        assert pick(smoke) < pick(default) < pick(large)


def test_overrides_skips_and_seed():
    cfg = run_config(seed=7, budget="smoke", dl2_updates=50, chic_iterations=0)
    assert cfg.dl2.updates == 50 and cfg.dl2.warmup_epochs == 2  # override on the budget
    assert cfg.chic is None  # 0 iterations skips Chic
    assert cfg.harmony.seed == cfg.rltaps.stage.seed == cfg.dl2.seed == 7
    only = run_config(systems=["rl-taps"])
    assert (only.dl2, only.harmony, only.chic) == (None, None, None) and only.rltaps
    assert run_config(systems=list(SYSTEMS)) == run_config()
    with pytest.raises(ValueError, match="unknown learned system"):
        run_config(systems=["decima"])
    with pytest.raises(ValueError, match="unknown budget"):
        run_config(budget="huge")


def test_chic_deviations_switch_on_all_four():
    train = run_config(chic_deviations=True).chic.train
    assert train.mask_absent and train.work_conserving and train.shared_sequence
    assert train.smoothing == 1.0
    paper = run_config().chic.train
    assert not (paper.mask_absent or paper.work_conserving or paper.shared_sequence)
