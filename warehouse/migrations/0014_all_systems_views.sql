-- The all-systems SQL surface: `learning_curves` now unions every learned system's curve
-- table (long format: system, policy, phase, step, metric, value), and
-- `reward_model_quality` summarizes Harmony's reward-predictor comparison.
CREATE OR REPLACE VIEW learning_curves AS
WITH long AS (
    -- DL2: warm-up epochs and RL validation points.
    SELECT policy_id, phase, step, episodes, metric, value
    FROM (
        UNPIVOT (
            SELECT policy_id, phase, step, episodes, train_loss, val_loss, val_accuracy,
                   val_avg_jct_s, reward, entropy, policy_loss, value_loss
            FROM dl2_learning_curves
        )
        ON train_loss, val_loss, val_accuracy, val_avg_jct_s, reward, entropy, policy_loss,
           value_loss
        INTO NAME metric VALUE value
    )
    UNION ALL
    -- Harmony: reward-predictor epochs and placement-DRL validation points.
    SELECT policy_id, phase, step, episodes, metric, value
    FROM (
        UNPIVOT (
            SELECT policy_id, phase, step, episodes, train_loss, test_rel_error, reward,
                   entropy, policy_loss, value_loss, epsilon, entropy_weight, val_avg_jct_s
            FROM harmony_learning_curves
        )
        ON train_loss, test_rel_error, reward, entropy, policy_loss, value_loss, epsilon,
           entropy_weight, val_avg_jct_s
        INTO NAME metric VALUE value
    )
    UNION ALL
    -- Chic / Chic-Pair: one row per cross-entropy-method iteration.
    SELECT policy_id, 'cem' AS phase, iteration AS step, NULL::INTEGER AS episodes, metric,
           value
    FROM (
        UNPIVOT (
            SELECT policy_id, iteration, elite_bound, mean_return, best_return, fit_loss,
                   val_act_s, n_elite::DOUBLE AS n_elite
            FROM chic_learning_curves
        )
        ON elite_bound, mean_return, best_return, fit_loss, val_act_s, n_elite
        INTO NAME metric VALUE value
    )
    UNION ALL
    -- RL-TAPS: one row per REINFORCE iteration, phase = training mode.
    SELECT policy_id, mode AS phase, iteration AS step, episodes, metric, value
    FROM (
        UNPIVOT (
            SELECT policy_id, mode, iteration, episodes, train_reward, train_slowdown,
                   val_reward, val_slowdown, entropy, loss
            FROM rltaps_learning_curves
        )
        ON train_reward, train_slowdown, val_reward, val_slowdown, entropy, loss
        INTO NAME metric VALUE value
    )
)
SELECT p.system, l.policy_id, l.phase, l.step, l.episodes, l.metric, l.value
FROM long l
JOIN policies p USING (policy_id);

-- Each fitted reward predictor's held-out error against LIF-Line, LIF-Quad and gradient
-- boosting on the same split, one row per (model, sample source, estimator); `latest`
-- marks the newest fit per sample source; `beats_lif` whether Harmony's network is better
-- than both LIF fits there.
CREATE VIEW reward_model_quality AS
WITH overall AS (
    SELECT m.reward_model_id, p.system, m.source, m.estimator, m.n_samples,
           m.mean_relative_error, p.created_at
    FROM reward_model_metrics m
    JOIN policies p ON p.policy_id = m.reward_model_id
    WHERE m.split = 'test' AND m.job_type = 'all'
),
lif AS (
    SELECT reward_model_id, source, min(mean_relative_error) AS best_lif
    FROM overall WHERE estimator IN ('lif-line', 'lif-quad') GROUP BY ALL
)
SELECT o.reward_model_id,
       o.system,
       o.source,
       o.estimator,
       o.n_samples AS test_samples,
       o.mean_relative_error,
       CASE WHEN o.estimator = 'harmony-nn' THEN o.mean_relative_error < l.best_lif END
           AS beats_lif,
       o.created_at,
       o.created_at = max(o.created_at) OVER (PARTITION BY o.source) AS latest
FROM overall o
LEFT JOIN lif l USING (reward_model_id, source);
