"""Torch's process-wide generator and thread count are scoped to the stage that sets them."""

from dataclasses import replace

import pytest
import torch

from models.torch_scope import scoped_torch


def test_scoped_torch_gives_back_the_generator_and_the_thread_count():
    threads = torch.get_num_threads()
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    with scoped_torch(seed=5, threads=1):
        assert torch.get_num_threads() == 1
        inside = torch.rand(3)
        torch.manual_seed(99)  # what a trainer does inside its stage
        torch.set_num_threads(1)
    assert torch.equal(torch.rand(3), expected)  # as if the stage had not run
    assert torch.get_num_threads() == threads
    with scoped_torch(seed=5):
        assert torch.equal(torch.rand(3), inside)  # the seed decides the stream
    with pytest.raises(RuntimeError), scoped_torch(threads=1):
        raise RuntimeError("a failing stage")
    assert torch.get_num_threads() == threads


def test_trainers_leave_torch_as_they_found_it():
    # Harmony's predictor seeds torch's global generator; RL-TAPS drops to one thread.
    before = torch.get_num_threads()
    threads = 2 if before != 2 else 3
    torch.set_num_threads(threads)
    try:
        _train_both_and_check(threads)
    finally:
        torch.set_num_threads(before)


def _train_both_and_check(threads: int) -> None:
    from models.harmony.reward import RewardTrainConfig, fit_reward_model
    from models.rltaps.config import ReinforceConfig
    from models.rltaps.reinforce import train
    from tracelib.envs.gpu import GpuEnvConfig, GpuObsConfig
    from tracelib.interference import InterferenceConfig, collect_samples

    torch.manual_seed(11)
    expected = torch.rand(4)
    torch.manual_seed(11)
    samples = collect_samples(InterferenceConfig(n_samples=120, seed=1))
    fit_reward_model(samples, RewardTrainConfig(epochs=1, hidden=(8, 8, 4), augment=False))
    env = GpuEnvConfig(obs=GpuObsConfig(slots=4, backlog=8), max_steps=20)
    tiny = ReinforceConfig(env=env, hidden=8, n_jobs=3, train_sequences=1, val_sequences=1)
    train(replace(tiny, episodes=2, batch_sequences=1, epochs=1, refresh_every=1))
    assert torch.get_num_threads() == threads
    assert torch.equal(torch.rand(4), expected)
