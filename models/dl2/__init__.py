"""DL2 (Peng et al.): a learned allocation policy, warmed up by imitating a heuristic and
fine-tuned by actor-critic RL in the simulator. Pure functions, frames in and frames out:

    traces = record_decisions(workloads, "drf", RecorderConfig())    # decision_traces rows
    warm, metrics, curve = warmup(traces, WarmupConfig(), val_workloads=...)
    policy, curve, metrics = finetune(train, val, FinetuneConfig(), init=warm)
    offline, curve, metrics = finetune(train, val, FinetuneConfig(offline=True))  # OfflineRL
    sha = policy.save(path); register_policy(con, ...)        # models.checkpoints
    simulate(jobs, Scheduler(load_policy(path, sha256=sha), LoadBalancing()), sim)

Modules: config (dataclasses), networks (policy/value nets, fast inference), recorder
(decision logs), warmup (supervised), finetune (actor-critic and its switches), policy
(`DL2Policy`, checkpoints, evaluation helpers).
"""

from models.dl2.config import (
    DL2NetConfig,
    FinetuneConfig,
    RecorderConfig,
    WarmupConfig,
    analytical,
    dl2_sim,
)
from models.dl2.finetune import finetune
from models.dl2.policy import DL2Policy, average_jct, load_policy, policy_from_checkpoint
from models.dl2.recorder import ReplayMismatch, record_decisions, record_runs
from models.dl2.warmup import warmup

__all__ = [
    "DL2NetConfig",
    "DL2Policy",
    "FinetuneConfig",
    "RecorderConfig",
    "ReplayMismatch",
    "WarmupConfig",
    "analytical",
    "average_jct",
    "dl2_sim",
    "finetune",
    "load_policy",
    "policy_from_checkpoint",
    "record_decisions",
    "record_runs",
    "warmup",
]
