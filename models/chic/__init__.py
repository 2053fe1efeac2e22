"""Chic and Chic-Pair (Gong et al., IWQoS'19): a learned allocation policy trained by a
modified cross-entropy method in the event-driven simulator, or in the arena's DL2
setting (`CEMConfig(scenario=ChicArenaScenario(...))`), where it deploys as an
allocation policy (`policy.arena()`).

    policy, curve, metrics = train_cem(train_seqs, val_seqs, CEMConfig(variant="chic"))
    acts = evaluate_policy(policy, test_seqs, scenario)     # ACT per sequence

Modules: config (CEMConfig, ChicNetConfig), networks (the 64-32-4 policy net, numpy
inference), cem (the training algorithm), policy (checkpoints, episodes, evaluation),
evaluate (its own scenario through the one evaluation), stage_config (the configs of
`schedlab run`), contracts (tables).

The package itself holds only the configs (`models.chic.config`, no torch): `schedlab run`
reads the algorithm configs' fields for its flags before it knows whether it trains
anything. The functions come from their modules (`from models.chic.cem import train_cem`).
"""

from models.chic.config import CEMConfig, ChicNetConfig

__all__ = ["CEMConfig", "ChicNetConfig"]
