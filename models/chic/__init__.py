"""Chic and Chic-Pair (Gong et al., IWQoS'19): a learned allocation policy trained by a
modified cross-entropy method in the event-driven simulator, or in the arena's DL2
setting (`CEMConfig(scenario=ChicArenaScenario(...))`), where it deploys as an
allocation policy (`policy.arena()`).

    policy, curve, metrics = train_cem(train_seqs, val_seqs, CEMConfig(variant="chic"))
    acts = evaluate_policy(policy, test_seqs, scenario)     # ACT per sequence

Modules: config (CEMConfig), networks (the 64-32-4 policy net, numpy inference), cem (the
training algorithm), policy (checkpoints, episodes, evaluation), contracts (tables).
"""

from models.chic.cem import elite_bound, train_cem
from models.chic.config import CEMConfig
from models.chic.networks import ChicNetConfig, ChicPolicyNet, NumpyPolicy
from models.chic.policy import (
    ChicArenaPolicy,
    ChicPolicy,
    episode_results,
    evaluate_policy,
    load_policy,
    policy_from_checkpoint,
    run_episode,
)

__all__ = [
    "CEMConfig",
    "ChicArenaPolicy",
    "ChicNetConfig",
    "ChicPolicy",
    "ChicPolicyNet",
    "NumpyPolicy",
    "elite_bound",
    "episode_results",
    "evaluate_policy",
    "load_policy",
    "policy_from_checkpoint",
    "run_episode",
    "train_cem",
]
