"""RL-TAPS (Ryu et al., CASCON '20): a topology-aware, fully preemptive scheduler whose
network assigns every GPU to one of N job slots (or none) each step, trained by REINFORCE
with a per-time-step baseline, without or with streaming job sequences.

    policy, curve, metrics = train(ReinforceConfig(mode="nonstreaming", ...))
    evaluate_schedulers({"rl-taps": policy, "sjf": None, ...}, sequences, env_cfg)
    sha = policy.save(path); register_policy(con, ...)        # models.checkpoints

Modules: config (dataclasses), networks (per-GPU softmax policy, numpy inference), reinforce
(the trainer, both modes), policy (`RLTapsPolicy`, checkpoints, episodes, baselines,
evaluation), contracts (its tables).
"""

from models.rltaps.config import (
    STREAMING_SYSTEM,
    SYSTEM,
    ReinforceConfig,
    RLTapsNetConfig,
    system_of,
)
from models.rltaps.networks import PolicyNet
from models.rltaps.policy import (
    BASELINES,
    PREEMPTIVE,
    RLTapsPolicy,
    evaluate_schedulers,
    job_sequences,
    load_policy,
    policy_from_checkpoint,
    run_episode,
    scheduler_episodes,
)
from models.rltaps.reinforce import train

__all__ = [
    "BASELINES",
    "PREEMPTIVE",
    "STREAMING_SYSTEM",
    "SYSTEM",
    "PolicyNet",
    "RLTapsNetConfig",
    "RLTapsPolicy",
    "ReinforceConfig",
    "evaluate_schedulers",
    "job_sequences",
    "load_policy",
    "policy_from_checkpoint",
    "run_episode",
    "scheduler_episodes",
    "system_of",
    "train",
]
