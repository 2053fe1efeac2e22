-- Every learned system's training curve in one long-format view: one row per (policy,
-- phase, step, metric), from each system's own curve table.
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
