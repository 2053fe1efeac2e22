-- Chic's evaluation per (evaluation, system, arrival rate).
CREATE OR REPLACE VIEW chic_evaluation AS
SELECT s.eval_id,
       s.scheduler AS system,
       CAST(regexp_extract(s.workload_set, '^chic@([0-9.]+)/h$', 1) AS DOUBLE) AS rate_per_hour,
       s.avg_jct_s,
       coalesce(s.avg_jct_ci_high - s.avg_jct_s, 0.0) AS ci95_s,
       s.n_sequences,
       CASE WHEN s.family <> 'heuristic' THEN s.policy END AS policy_id,
       coalesce(1 - s.avg_jct_s / o.avg_jct_s, 0.0) AS improvement_vs_optimus_600,
       CAST(json_extract(s.config, '$.sequence_seeds') AS VARCHAR) AS sequence_seeds,
       s.config,
       CAST(json_extract(s.config, '$.seed') AS BIGINT) AS seed,
       s.code_version,
       s.evaluated_at
FROM eval_summary s
LEFT JOIN eval_summary o
       ON o.eval_id = s.eval_id AND o.workload_set = s.workload_set
      AND o.scheduler = 'optimus-600'
WHERE s.scenario = 'chic';
