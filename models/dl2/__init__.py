"""DL2 (Peng et al.): a learned allocation policy, warmed up by imitating a heuristic and
fine-tuned by actor-critic RL in the simulator. Pure functions, frames in and frames out:

    traces = record_decisions(workloads, "drf", RecorderConfig())    # decision_traces rows
    warm, metrics, curve = warmup(traces, WarmupConfig(), val_workloads=...)
    policy, curve, metrics = finetune(train, val, FinetuneConfig(), init=warm)
    offline, curve, metrics = finetune(train, val, FinetuneConfig(offline=True))  # OfflineRL
    sha = policy.save(path); register_policy(con, ...)        # models.checkpoints
    simulate(jobs, Scheduler(load_policy(path, sha256=sha), LoadBalancing()), sim)

Modules: config (dataclasses, every algorithm's config included), networks (policy/value
nets, fast inference), recorder (decision logs), warmup (supervised), finetune
(actor-critic and its switches), grouped (grouped PPO), policy (`DL2Policy`, checkpoints,
evaluation helpers), stage_config (`DL2StageConfig`, the config of `schedlab run`).

The package itself holds only the configs (`models.dl2.config`, no torch): `schedlab run`
reads the algorithm configs' fields for its flags before it knows whether it trains
anything. The functions come from their modules (`from models.dl2.warmup import warmup`).
"""

from models.dl2.config import (
    DL2NetConfig,
    FinetuneConfig,
    GroupedConfig,
    RecorderConfig,
    WarmupConfig,
    analytical,
    dl2_sim,
)

__all__ = [
    "DL2NetConfig",
    "FinetuneConfig",
    "GroupedConfig",
    "RecorderConfig",
    "WarmupConfig",
    "analytical",
    "dl2_sim",
]
