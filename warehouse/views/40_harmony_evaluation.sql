-- Harmony's evaluation per (evaluation, arrival pattern, scheduler): paired_ratio is the
-- ratio to the pattern's best baseline, paired by sequence.
CREATE OR REPLACE VIEW harmony_evaluation AS
SELECT s.eval_id,
       substr(s.workload_set, length('harmony-') + 1) AS pattern,
       s.scheduler,
       CASE WHEN s.family <> 'heuristic' THEN s.policy END AS policy_id,
       s.n_sequences,
       s.avg_jct_s,
       s.avg_jct_slots AS avg_jct_intervals,
       s.avg_jct_ci_low AS ci_low_s,
       s.avg_jct_ci_high AS ci_high_s,
       s.best_heuristic AS best_baseline,
       1 - s.avg_jct_s / b.avg_jct_s AS improvement_over_best_baseline,
       s.ratio_to_best_heuristic AS paired_ratio,
       s.ratio_ci_low AS paired_ratio_ci_low,
       s.ratio_ci_high AS paired_ratio_ci_high,
       s.config AS eval_config,
       CAST(json_extract(s.config, '$.seed') AS BIGINT) AS seed,
       s.evaluated_at,
       s.code_version
FROM eval_summary s
LEFT JOIN eval_summary b
       ON b.eval_id = s.eval_id AND b.workload_set = s.workload_set
      AND b.scheduler = s.best_heuristic
WHERE s.scenario = 'harmony';
