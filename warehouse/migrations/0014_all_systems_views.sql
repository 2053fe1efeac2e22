-- The all-systems SQL surface: `learning_curves` now unions every learned system's curve
-- table (long format: system, policy, phase, step, metric, value), and
-- `reward_model_quality` summarizes Harmony's reward-predictor comparison.

-- Each fitted reward predictor's held-out error against LIF-Line, LIF-Quad and gradient
-- boosting on the same split, one row per (model, sample source, estimator); `latest`
-- marks the newest fit per sample source; `beats_lif` whether Harmony's network is better
-- than both LIF fits there.

-- The views it reads or changes are defined once in warehouse/views/, applied after the
-- migrations.
