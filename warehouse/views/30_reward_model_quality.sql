-- Each fitted reward predictor's held-out error against LIF-Line, LIF-Quad and gradient
-- boosting on the same split, one row per (model, sample source, estimator); `latest`
-- marks the newest fit per sample source; `beats_lif` whether Harmony's network is better
-- than both LIF fits there.
CREATE OR REPLACE VIEW reward_model_quality AS
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
