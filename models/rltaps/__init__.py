"""RL-TAPS (Ryu et al., CASCON '20): a topology-aware, fully preemptive scheduler whose
network assigns every GPU to one of N job slots (or none) each step, trained by REINFORCE
with a per-time-step baseline, without or with streaming job sequences.

    policy, curve, metrics = train(ReinforceConfig(mode="nonstreaming", ...))  # .reinforce
    evaluate_schedulers({"rl-taps": policy, "sjf": None, ...}, sequences, env_cfg)  # .policy
    sha = policy.save(path); register_policy(con, ...)        # models.checkpoints

Modules: config (dataclasses), networks (per-GPU softmax policy, numpy inference), reinforce
(the trainer, both modes), policy (`RLTapsPolicy`, checkpoints, episodes, baselines,
evaluation), evaluate (its own scenario through the one evaluation), stage_config (the configs of
`schedlab run`), contracts (its tables). The package itself holds only the configs (no torch):
the command line reads them to build its flags.
"""

from models.rltaps.config import (
    STREAMING_SYSTEM,
    SYSTEM,
    ReinforceConfig,
    RLTapsNetConfig,
    system_of,
)

__all__ = [
    "STREAMING_SYSTEM",
    "SYSTEM",
    "RLTapsNetConfig",
    "ReinforceConfig",
    "system_of",
]
