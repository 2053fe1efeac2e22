-- RL-TAPS' evaluation per (evaluation, scheduler, job-sequence set): mean slowdown
-- (eq. 17) and mean reward (G_1) with 95% half-widths.
CREATE OR REPLACE VIEW rltaps_evaluation AS
SELECT s.eval_id AS run_id,
       s.scheduler,
       json_extract_string(s.config, '$.sequence_set') AS sequence_set,
       s.n_sequences,
       CAST(json_extract(s.config, '$.n_jobs') AS INTEGER) AS n_jobs,
       s.mean_reward,
       coalesce(s.mean_reward_ci_high - s.mean_reward, 0.0) AS reward_ci95,
       s.mean_slowdown,
       coalesce(s.mean_slowdown_ci_high - s.mean_slowdown, 0.0) AS slowdown_ci95,
       CASE WHEN s.family <> 'heuristic' THEN s.policy END AS policy_id,
       CAST(json_extract(s.config, '$.seeds') AS VARCHAR) AS seeds,
       s.config,
       s.code_version
FROM eval_summary s
WHERE s.scenario = 'rl-taps';
