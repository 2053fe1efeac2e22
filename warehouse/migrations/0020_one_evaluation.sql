-- One evaluation (issue 16 item 3): Harmony's, Chic's and RL-TAPS' evaluations in their own
-- papers' scenarios write eval_runs / eval_jobs / eval_summary like every other evaluation
-- (pipelines/evaluation.py run_schedulers and summarize_runs), with `workload_set` naming
-- the scenario (harmony-uniform, harmony-poisson, harmony-google, chic@<rate>/h,
-- rl-taps-bimodal) and eval_summary.scenario the paper whose scenario it is (harmony, chic,
-- rl-taps; NULL for a workload set of the warehouse or a replay). Their old tables become
-- views over eval_summary with their old columns, and the leaderboard reads eval_summary
-- only: every ratio is paired by (sequence, seed) and has its interval.

-- The episode's return where the scenario's MDP defines one (RL-TAPS' G_1).
ALTER TABLE eval_runs ADD COLUMN reward DOUBLE;

ALTER TABLE eval_summary ADD COLUMN scenario VARCHAR;
-- The per-run cost the ratios pair (jct_ratio, ratio_to_best_heuristic): avg_jct_s, or
-- mean_slowdown in RL-TAPS' scenario (its paper's metric). NULL in older rows: avg_jct_s.
-- (DuckDB adds no column with a CHECK: the contract checks the values.)
ALTER TABLE eval_summary ADD COLUMN ratio_metric VARCHAR;
ALTER TABLE eval_summary ADD COLUMN mean_reward DOUBLE;
ALTER TABLE eval_summary ADD COLUMN mean_reward_ci_low DOUBLE;
ALTER TABLE eval_summary ADD COLUMN mean_reward_ci_high DOUBLE;

DROP VIEW leaderboard;
DROP TABLE harmony_evaluation;
DROP TABLE chic_evaluation;
DROP TABLE rltaps_evaluation;

-- Harmony's evaluation per (evaluation, arrival pattern, scheduler), as migration 0010
-- defined it: paired_ratio is the ratio to the pattern's best baseline, paired by sequence.
CREATE VIEW harmony_evaluation AS
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

-- Chic's evaluation per (evaluation, system, arrival rate), as migration 0011 defined it.
CREATE VIEW chic_evaluation AS
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

-- RL-TAPS' evaluation per (evaluation, scheduler, job-sequence set), as migration 0012
-- defined it: mean slowdown (eq. 17) and mean reward (G_1) with 95% half-widths.
CREATE VIEW rltaps_evaluation AS
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

-- The leaderboard across families (migrations 0018, 0019), now from eval_summary only.
CREATE VIEW leaderboard AS
WITH kinds AS (
    SELECT w.derivation AS workload_set,
           CASE WHEN bool_and(s.format = 'synthetic') THEN 'synthetic' ELSE 'production' END
               AS workload_kind
    FROM workloads w
    JOIN trace_sources s ON list_contains(string_split(w.source_ids, ','), s.source_id)
    GROUP BY ALL
),
everything AS (
    SELECT CASE WHEN e.scenario IS NOT NULL THEN 'paper'
                WHEN starts_with(e.workload_set, 'replay:') THEN 'production'
                ELSE coalesce(k.workload_kind, 'unknown') END AS kind,
           e.workload_set,
           e.scheduler,
           coalesce(e.family, CASE WHEN e.policy = e.scheduler THEN 'heuristic' ELSE 'learned' END)
               AS family,
           e.policy,
           coalesce(e.ratio_metric, 'avg_jct_s') AS metric,
           e.avg_jct_s,
           e.avg_jct_ci_low AS ci_low_s,
           e.avg_jct_ci_high AS ci_high_s,
           e.mean_slowdown,
           e.best_heuristic,
           e.ratio_to_best_heuristic,
           e.ratio_ci_low,
           e.ratio_ci_high,
           e.n_runs,
           e.eval_id,
           e.evaluated_at,
           e.avg_jct_slots,
           CASE WHEN e.reference = 'drf' THEN 1 - e.jct_ratio END AS improvement_over_drf
    FROM eval_summary e
    LEFT JOIN kinds k USING (workload_set)
),
newest AS (
    SELECT workload_set, max(evaluated_at) AS newest_at, max(eval_id) AS newest_id
    FROM everything GROUP BY ALL
),
largest AS (
    -- The evaluation with the most runs of each set and scheduler (the newest of equals).
    SELECT DISTINCT workload_set, scheduler,
           first_value(n_runs) OVER w AS largest_n_runs,
           first_value(eval_id) OVER w AS largest_eval_id
    FROM everything
    WINDOW w AS (PARTITION BY workload_set, scheduler
                 ORDER BY n_runs DESC, evaluated_at DESC NULLS LAST, eval_id DESC)
)
SELECT x.workload_set,
       x.kind,
       x.kind AS workload_kind,
       x.scheduler,
       x.family,
       x.policy,
       x.metric,
       x.avg_jct_s,
       x.ci_low_s,
       x.ci_high_s,
       x.mean_slowdown,
       x.best_heuristic,
       x.ratio_to_best_heuristic,
       x.ratio_ci_low,
       x.ratio_ci_high,
       TRUE AS ratio_paired,
       x.ratio_ci_high < 1 AS significantly_better,
       x.ratio_ci_low > 1 AS significantly_worse,
       x.n_runs,
       l.largest_n_runs,
       l.largest_eval_id,
       x.n_runs < l.largest_n_runs AS smaller_than_largest,
       CASE WHEN n.newest_at IS NULL THEN x.eval_id = n.newest_id
            ELSE x.evaluated_at IS NOT DISTINCT FROM n.newest_at END AS latest,
       rank() OVER (
           PARTITION BY x.eval_id, x.workload_set
           ORDER BY CASE WHEN x.metric = 'mean_slowdown' THEN x.mean_slowdown
                         ELSE x.avg_jct_s END
       ) AS rank,
       x.ci_low_s AS avg_jct_ci_low,
       x.ci_high_s AS avg_jct_ci_high,
       x.avg_jct_slots,
       x.improvement_over_drf,
       x.eval_id,
       x.evaluated_at
FROM everything x
LEFT JOIN newest n USING (workload_set)
LEFT JOIN largest l USING (workload_set, scheduler);
