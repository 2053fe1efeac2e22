"""Harmony (Bao, Peng, Wu 2019): reward predictor and interference-aware placement DRL.

    reward.py     the reward predictor on (x, w, p, d) and its comparison with LIF / GBR
    placement.py  server rules (baselines, exploration), policy/value networks, policies
    train.py      actor-critic with job-aware exploration and experience replay
    workloads.py  uniform / Poisson / Google-like arrival sequences
    evaluate.py   its own evaluation (`harmony_tables`); observed speeds as samples
    stage_config.py  the stage configs of `schedlab run` (own scenario, arena)
    contracts.py  reward_model_metrics, harmony_learning_curves

Pipeline stages: `pipelines/systems/harmony/stages.py`; benchmark: `benchmarks/bench_harmony.py`.
"""
